package fdbq

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustTiming(t *testing.T, expr, tz string, every time.Duration) timing {
	t.Helper()
	tm, err := parseTiming(expr, tz, every)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// ticksFrom lists n ticks after from, as UTC RFC 3339 strings.
func ticksFrom(tm timing, from time.Time, n int) []string {
	var out []string
	for at := from; len(out) < n; {
		at = tm.next(at)
		if at.IsZero() {
			break
		}
		out = append(out, at.UTC().Format(time.RFC3339))
	}
	return out
}

func TestTimingClockChanges(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	// 2026-03-08 02:00 EST the clocks go to 03:00 EDT (07:00 UTC);
	// 2026-11-01 02:00 EDT they go back to 01:00 EST (06:00 UTC).
	spring := time.Date(2026, 3, 7, 23, 0, 0, 0, ny)
	fall := time.Date(2026, 10, 31, 23, 0, 0, 0, ny)
	for _, c := range []struct {
		name, expr string
		from       time.Time
		want       []string
	}{
		// 02:30 does not exist on March 8: the tick falls at the jump,
		// 03:00 EDT, and the day still has its one tick.
		{"daily in the skipped hour", "30 2 * * *", spring,
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		// 01:30 occurs twice on November 1: one tick, at the first.
		{"daily in the repeated hour", "30 1 * * *", fall,
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		// Hourly on the wall clock: 02:00 is skipped, and 03:00 is the
		// jump itself, so the skipped hour adds no tick of its own.
		{"hourly, clocks forward", "0 * * * *", spring,
			[]string{"2026-03-08T05:00:00Z", "2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"}},
		// Hourly through the repeated hour: 01:00 ticks once, so two real
		// hours pass between 01:00 EDT and 02:00 EST.
		{"hourly, clocks back", "0 * * * *", fall,
			[]string{"2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z", "2026-11-01T08:00:00Z"}},
		{"half-hourly, clocks forward", "*/30 * * * *", time.Date(2026, 3, 8, 1, 0, 0, 0, ny),
			[]string{"2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z"}},
		{"with seconds", "15 0 9 * * MON", time.Date(2026, 3, 7, 0, 0, 0, 0, ny),
			[]string{"2026-03-09T13:00:15Z", "2026-03-16T13:00:15Z"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := ticksFrom(mustTiming(t, c.expr, "America/New_York", 0), c.from, len(c.want))
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Fatalf("%q from %s:\n got %v\nwant %v", c.expr, c.from, got, c.want)
			}
		})
	}
}

func TestTimingInterval(t *testing.T) {
	tm := mustTiming(t, "", "", 90*time.Second)
	// Multiples of 90s since the epoch, whatever the start.
	from := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	got := ticksFrom(tm, from, 3)
	want := []string{"2026-01-01T00:01:30Z", "2026-01-01T00:03:00Z", "2026-01-01T00:04:30Z"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %v, want %v", got, want)
	}
	// A tick is strictly after its argument.
	at := time.Date(2026, 1, 1, 0, 3, 0, 0, time.UTC)
	if n := tm.next(at); !n.Equal(at.Add(90 * time.Second)) {
		t.Fatalf("next after a tick: %s", n)
	}
	if n := tm.next(time.UnixMilli(-1)); n.UnixMilli() != 0 {
		t.Fatalf("next after -1ms: %s", n)
	}
}

func TestTimingRefused(t *testing.T) {
	for _, c := range []struct {
		expr, tz string
		every    time.Duration
		want     string
	}{
		{"", "", 0, "needs a cron expression or an interval"},
		{"* * * * *", "", time.Minute, "not both"},
		{"", "UTC", time.Minute, "time zone applies to a cron expression"},
		{"", "", 500 * time.Millisecond, "at least 1s"},
		{"", "", time.Second + time.Microsecond, "whole milliseconds"},
		{"61 * * * *", "", 0, "above maximum"},
		{"* * *", "", 0, "cron expression"},
		{"CRON_TZ=UTC * * * * *", "", 0, "as the schedule's timezone"},
		{"@every 1m", "", 0, "as the schedule's every"},
		{"0 0 30 2 *", "", 0, "matches no date"},
		{"* * * * *", "Mars/Olympus", 0, "Mars/Olympus"},
		{"* * * * *", "Local", 0, "IANA name"},
		{"* * * * *", "../../etc/passwd", 0, "time zone"},
	} {
		_, err := parseTiming(c.expr, c.tz, c.every)
		if !errors.Is(err, ErrInvalidSchedule) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseTiming(%q, %q, %s) = %v, want ErrInvalidSchedule saying %q", c.expr, c.tz, c.every, err, c.want)
		}
	}
}
