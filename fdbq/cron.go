package fdbq

import (
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
		return time.UnixMilli(k * ms).UTC()
	}
	after = after.In(t.loc)
	for i := 0; i < 64; i++ {
		c := t.spec.Next(after)
		if c.IsZero() {
			return c
		}
		if gap, ok := t.gapTick(after, c); ok {
			return gap
		}
		if t.repeated(c) {
			after = c
			continue
		}
		return c
	}
	return time.Time{}
}

// repeated says whether c's wall time occurred before, in the period just
// before the clocks went back.
func (t timing) repeated(c time.Time) bool {
	start, _ := c.ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, before := start.Add(-time.Nanosecond).Zone()
	_, now := c.Zone()
	back := time.Duration(before-now) * time.Second
	return back > 0 && c.Sub(start) < back
}

// gapTick looks for a clock jump forward in (after, c] whose skipped wall
// times the expression matches; it returns the instant of the first such
// jump. c is the next tick the cron library found, which skips those
// wall times.
func (t timing) gapTick(after, c time.Time) (time.Time, bool) {
	at := after
	for range 16 {
		_, end := at.ZoneBounds()
		if end.IsZero() || end.After(c) {
			return time.Time{}, false
		}
		_, before := end.Add(-time.Nanosecond).Zone()
		_, now := end.Zone()
		if jump := time.Duration(now-before) * time.Second; jump > 0 && end.After(after) && !end.Equal(c) {
			// The skipped wall times are [wall(end-), wall(end-)+jump):
			// read them in the zone's offset before the jump.
			fixed := time.FixedZone("", before)
			s := *t.spec
			s.Location = fixed
			from := end.In(fixed).Add(-time.Second)
			if m := s.Next(from); !m.IsZero() && m.Before(end.Add(jump)) {
				return end.In(t.loc), true
			}
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
