package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/config"
	"github.com/jobstage/jobstage/fdbq"
)

func TestSchedules(t *testing.T) {
	src := `
types:
  report: {}
schedules:
  nightly:
    type: report
    cron: "0 30 2 * * *"
    timezone: Europe/Paris
    data: '{"kind": "daily"}'
    missed: each
    missed_limit: 5
  beat:
    type: report
    every: 30s
`
	c, probs := config.Parse("f.yaml", []byte(src), nil)
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	s, err := c.Schedules["nightly"].Schedule("nightly")
	if err != nil {
		t.Fatal(err)
	}
	if s.Cron != "0 30 2 * * *" || s.Timezone != "Europe/Paris" || string(s.Job.Data) != `{"kind": "daily"}` ||
		s.Missed != fdbq.MissedEach || s.MissedLimit != 5 || s.Job.Type != "report" {
		t.Fatalf("nightly = %+v", s)
	}
	if err := fdbq.ValidateSchedule(s); err != nil {
		t.Fatal(err)
	}
	b, _ := c.Schedules["beat"].Schedule("beat")
	if b.Every != 30*time.Second || b.Missed != fdbq.MissedOnce {
		t.Fatalf("beat = %+v", b)
	}
}

func TestSchedulesLint(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{"type: report", "schedules.s: a schedule needs cron or every"},
		{"type: report\n    cron: '* * * * *'\n    every: 1m", "schedules.s.every: give cron or every, not both"},
		{"type: nope\n    every: 1m", `schedules.s.type: type "nope" is not declared under types`},
		{"every: 1m", "schedules.s.type: missing"},
		{"type: report\n    cron: '61 * * * *'", "schedules.s.cron: cron expression \"61 * * * *\": end of range (61) above maximum (59): 61"},
		{"type: report\n    cron: '0 0 30 2 *'", "matches no date"},
		{"type: report\n    cron: '* * * * *'\n    timezone: Mars/Base", "schedules.s.timezone: time zone \"Mars/Base\""},
		{"type: report\n    every: 1m\n    timezone: UTC", "schedules.s.timezone: applies to cron, not to every"},
		{"type: report\n    every: 10ms", "schedules.s.every: interval 10ms: it must be at least 1s"},
		{"type: report\n    every: 1m\n    data: '{'", "schedules.s.data: not valid JSON text"},
		{"type: report\n    every: 1m\n    missed: sometimes", `schedules.s.missed: unknown value "sometimes"`},
		{"type: report\n    every: 1m\n    missed_limit: 20000", "schedules.s.missed_limit: missed limit 20000 is out of range"},
		{"type: report\n    every: 1m\n    grace: 48h", "schedules.s.grace: grace 48h0m0s is out of range"},
		{"type: report\n    every: 1m\n    key: \"a\\u0001\"", "schedules.s.key: fairness key"},
	} {
		src := "types:\n  report: {}\nschedules:\n  s:\n    " + c.body + "\n"
		_, probs := config.Parse("f.yaml", []byte(src), nil)
		var got []string
		for _, p := range probs {
			got = append(got, p.String())
		}
		if len(got) != 1 || !strings.Contains(got[0], c.want) {
			t.Errorf("%s\nproblems %q, want one with %q", c.body, got, c.want)
		}
	}
	_, probs := config.Parse("f.yaml", []byte("types:\n  report: {}\nschedules:\n  'bad/name':\n    type: report\n    every: 1m\n"), nil)
	if len(probs) != 1 || !strings.Contains(probs[0].String(), "schedule name") {
		t.Errorf("bad name: %v", probs)
	}
}
