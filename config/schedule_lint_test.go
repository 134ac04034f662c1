package config_test

import (
	"strings"
	"testing"

	"github.com/jobstage/jobstage/config"
	"github.com/jobstage/jobstage/fdbq"
)

// TestLintCronErrorRepeatedAtTimezone: a bad cron expression with a
// timezone is reported once, at cron. The timezone is fine; it must not
// get the cron's message too.
func TestLintCronErrorRepeatedAtTimezone(t *testing.T) {
	src := "types:\n  report: {}\nschedules:\n  s:\n    type: report\n    cron: '61 * * * *'\n    timezone: Europe/Paris\n"
	_, probs := config.Parse("f.yaml", []byte(src), nil)
	var got []string
	for _, p := range probs {
		got = append(got, p.String())
	}
	if len(got) != 1 || !strings.Contains(got[0], "schedules.s.cron:") {
		t.Fatalf("problems %q, want one, at schedules.s.cron", got)
	}
}

// TestLintPriority: a priority fdbq refuses passes the lint and
// fails the server's start instead.
func TestLintPriority(t *testing.T) {
	src := "types:\n  report: {}\nschedules:\n  s:\n    type: report\n    every: 1m\n    priority: -9223372036854775808\n"
	c, probs := config.Parse("f.yaml", []byte(src), nil)
	if len(probs) > 0 {
		return // linted: fine
	}
	s, err := c.Schedules["s"].Schedule("s")
	if err != nil {
		t.Fatal(err)
	}
	if err := fdbqValidate(s); err != nil {
		t.Fatalf("the lint passed a schedule that declare refuses: %v", err)
	}
}

func fdbqValidate(s fdbq.Schedule) error { return fdbq.ValidateSchedule(s) }
