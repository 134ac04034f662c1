package fdbq

import (
	"math"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// cronParser reads 5-field expressions (minute hour day-of-month month
// day-of-week), 6-field ones with seconds first, and the descriptors
// @yearly, @annually, @monthly, @weekly, @daily, @midnight and @hourly.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// timing is when a schedule's ticks fall: a cron expression read on the
// wall clock of a time zone, or a fixed interval.
type timing struct {
	spec  *cron.SpecSchedule // nil: every
	loc   *time.Location
	every time.Duration
}

// parseTiming checks a schedule's timing and returns it.
func parseTiming(expr, tz string, every time.Duration) (timing, error) {
	switch {
	case expr != "" && every != 0:
		return timing{}, errorf(ErrInvalidSchedule, "a schedule has either a cron expression or an interval, not both")
	case expr == "" && every == 0:
		return timing{}, errorf(ErrInvalidSchedule, "a schedule needs a cron expression or an interval")
	case every != 0:
		if tz != "" {
			return timing{}, errorf(ErrInvalidSchedule, "a time zone applies to a cron expression, not to an interval")
		}
		if every < time.Second || every%time.Millisecond != 0 {
			return timing{}, errorf(ErrInvalidSchedule, "interval %s: it must be at least 1s, in whole milliseconds", every)
		}
		return timing{every: every}, nil
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return timing{}, errorf(ErrInvalidSchedule, "cron expression %q: give the time zone as the schedule's timezone, not in the expression", expr)
	}
	if strings.HasPrefix(expr, "@every") {
		return timing{}, errorf(ErrInvalidSchedule, "cron expression %q: give an interval as the schedule's every, not in the expression", expr)
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return timing{}, errorf(ErrInvalidSchedule, "cron expression %q: %v", expr, err)
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return timing{}, errorf(ErrInvalidSchedule, "cron expression %q is not a calendar expression", expr)
	}
	loc := time.UTC
	if tz != "" {
		// time.LoadLocation also takes "Local" (it refuses paths); a
		// schedule's zone must mean the same on every machine.
		if tz == "Local" {
			return timing{}, errorf(ErrInvalidSchedule, "time zone %q: give an IANA name such as Europe/Paris or UTC", tz)
		}
		l, err := time.LoadLocation(tz)
		if err != nil {
			return timing{}, errorf(ErrInvalidSchedule, "time zone %q: %v", tz, err)
		}
		loc = l
	}
	c := *spec
	c.Location = loc
	t := timing{spec: &c, loc: loc}
	// An expression that matches no date (30 February) would have the
	// scheduler search without end.
	if t.next(time.Unix(0, 0)).IsZero() {
		return timing{}, errorf(ErrInvalidSchedule, "cron expression %q matches no date", expr)
	}
	return t, nil
}

// next returns the first tick after t, or the zero time if there is none
// within the cron library's search (five years).
//
// Intervals tick at the multiples of the interval since the Unix epoch,
// so every process computes the same ticks.
//
// A cron expression is read on the wall clock of its zone, each wall
// time that matches ticking once:
//   - a wall time that occurs twice (the hour repeated when clocks go
//     back) ticks at its first occurrence only;
//   - wall times that do not occur (the hour skipped when clocks go
//     forward) tick once, at the instant the clocks jump, unless a wall
//     time after the jump ticks at that same instant.
//
// A schedule that must tick at every real hour through such a change is
// an interval (every: 1h), not a cron expression.
func (t timing) next(after time.Time) time.Time {
	if t.spec == nil {
		ms := t.every.Milliseconds()
		a := after.UnixMilli()
		k := floorDiv(a, ms) + 1
		if k > math.MaxInt64/ms {
			return time.Time{}
		}
		return time.UnixMilli(k * ms).UTC()
	}
	return t.nextWall(after)
}

// nextWall finds the next tick on the zone's wall clock with the
// expression read in UTC (which has no clock changes), then maps the wall
// time back to an instant: its first occurrence, or the instant of the
// jump when the wall time was skipped.
func (t timing) nextWall(after time.Time) time.Time {
	u := *t.spec
	u.Location = time.UTC
	// seen: every wall time up to it has occurred by after.
	seen := naiveWall(after, t.loc)
	if start, _ := after.In(t.loc).ZoneBounds(); !start.IsZero() {
		if before := naiveWall(start.Add(-time.Nanosecond), t.loc); before.After(seen) {
			seen = before.Truncate(time.Second)
		}
	}
	for range 64 {
		w := u.Next(seen)
		if w.IsZero() {
			return w
		}
		if at, ok := t.instantOf(w, after); ok {
			return at
		}
		seen = w
	}
	return time.Time{}
}

func naiveWall(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// instantOf returns the first instant after `after` whose wall time is w,
// or, when w does not occur, the instant the clocks jumped over it.
func (t timing) instantOf(w, after time.Time) (time.Time, bool) {
	guess := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), 0, t.loc)
	var best time.Time
	for _, probe := range []time.Time{guess.Add(-26 * time.Hour), guess, guess.Add(26 * time.Hour)} {
		_, off := probe.Zone()
		c := w.Add(-time.Duration(off) * time.Second)
		c = time.Unix(c.Unix(), 0).In(t.loc)
		if naiveWall(c, t.loc).Equal(w) && c.After(after) && (best.IsZero() || c.Before(best)) {
			best = c
		}
	}
	if !best.IsZero() {
		return best, true
	}
	// A gap: the first transition after which the wall time is past w.
	at := guess.Add(-26 * time.Hour)
	for range 8 {
		_, end := at.ZoneBounds()
		if end.IsZero() {
			break
		}
		if naiveWall(end, t.loc).After(w) && naiveWall(end.Add(-time.Nanosecond), t.loc).Before(w) {
			if end.After(after) {
				return end.In(t.loc), true
			}
			return time.Time{}, false
		}
		at = end
	}
	return time.Time{}, false
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
