package fdbq

import (
	"testing"
	"time"
)

// TestSecondsCronThroughRepeatedHour: a cron with seconds ticks
// through the day the clocks go back; the repeated hour's wall times
// already ticked, so after 01:59:59 EDT the next tick is 02:00:00 EST.
// next gives up after 64 repeated candidates and returns the zero time,
// and a zero next makes the Scheduler drop the schedule (RunDue lists
// only schedules with a next tick) and TickSchedule add nothing.
func TestSecondsCronThroughRepeatedHour(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip(err)
	}
	for _, expr := range []string{"* * * * * *", "*/30 * * * * *", "0,30 * * * * *"} {
		tm := mustTiming(t, expr, "America/New_York", 0)
		from := time.Date(2026, 11, 1, 5, 59, 59, 0, time.UTC) // 01:59:59 EDT
		got := tm.next(from)
		want := time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC) // 02:00:00 EST
		if !got.Equal(want) {
			t.Errorf("%q: next after 01:59:59 EDT = %v, want %v (02:00 EST)", expr, got.In(ny), want.In(ny))
		}
	}
}

// TestCronDaysLostAtClockChanges: daily and weekly cron schedules
// lose a whole day's tick on the day of a clock change in zones where
// robfig/cron's DST handling breaks: Lord Howe Island's 30-minute shift
// (its hour loop steps by real hours, landing on :30), and Beirut, whose
// clocks go forward at midnight (its day loop steps back to the day
// before and then past the wanted day). Every one of these wall times
// occurs exactly once that day, so each must tick.
func TestCronDaysLostAtClockChanges(t *testing.T) {
	for _, c := range []struct {
		zone, expr string
		from, want time.Time
	}{
		// 2026-04-05 02:00 LHDT (+11) -> 01:30 LHST (+10:30); 03:00 is after it.
		{"Australia/Lord_Howe", "0 3 * * *", time.Date(2026, 4, 4, 12, 0, 0, 0, time.UTC), time.Date(2026, 4, 4, 16, 30, 0, 0, time.UTC)},
		// 2026-10-04 02:00 (+10:30) -> 02:30 (+11); after the 4th's midnight tick, the 5th's.
		{"Australia/Lord_Howe", "0 0 * * *", time.Date(2026, 10, 3, 13, 30, 0, 0, time.UTC), time.Date(2026, 10, 4, 13, 0, 0, 0, time.UTC)},
		// 2026-03-29 00:00 EET -> 01:00 EEST, a Sunday; 02:00 EEST exists.
		{"Asia/Beirut", "0 2 * * 0", time.Date(2026, 3, 23, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 28, 23, 0, 0, 0, time.UTC)},
	} {
		tm := mustTiming(t, c.expr, c.zone, 0)
		loc, _ := time.LoadLocation(c.zone)
		if got := tm.next(c.from); !got.Equal(c.want) {
			t.Errorf("%s %q after %s: next = %s, want %s", c.zone, c.expr, c.from.In(loc), got.In(loc), c.want.In(loc))
		}
	}
}

// TestCronNextHangsOnSkippedDay: Samoa skipped 30 December 2011.
// robfig/cron's day loop, asked for the next "0 0 1 * *" from the 28th,
// steps to the 30th, which time.Date normalizes back to the 29th, and
// loops for ever: next never returns (inside RunDue's transaction and
// TickSchedule, pinning the scheduler's goroutine and a CPU).
func TestCronNextHangsOnSkippedDay(t *testing.T) {
	loc, err := time.LoadLocation("Pacific/Apia")
	if err != nil {
		t.Skip(err)
	}
	tm := mustTiming(t, "0 0 1 * *", "Pacific/Apia", 0)
	done := make(chan time.Time, 1)
	go func() { done <- tm.next(time.Date(2011, 12, 28, 12, 0, 0, 0, loc)) }()
	select {
	case got := <-done:
		if want := time.Date(2012, 1, 1, 0, 0, 0, 0, loc); !got.Equal(want) {
			t.Fatalf("next = %s, want %s", got.In(loc), want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("next does not return")
	}
}
