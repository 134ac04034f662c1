package fdbq

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// wallOf is t's wall clock in loc as a UTC time (a naive date-time).
func wallOf(t time.Time, loc *time.Location) time.Time {
	w := t.In(loc)
	return time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), 0, time.UTC)
}

// oracleTicks is the documented rule computed by brute force, a minute at
// a time: each matching wall time ticks at its first occurrence; wall
// times skipped by a jump forward tick once at the jump (unless the wall
// time at the jump matches, which is the same tick).
func oracleTicks(expr string, loc *time.Location, from, to time.Time) []string {
	p, err := cronParser.Parse(expr)
	if err != nil {
		panic(err)
	}
	spec := *p.(*cron.SpecSchedule)
	spec.Location = time.UTC
	matches := func(w time.Time) bool { return spec.Next(w.Add(-time.Second)).Equal(w) }
	var out []string
	prev := wallOf(from, loc)
	maxWall := prev
	for u := from.Add(time.Minute); !u.After(to); u = u.Add(time.Minute) {
		w := wallOf(u, loc)
		fire := false
		if w.After(maxWall) && matches(w) {
			fire = true
		}
		if w.Sub(prev) > time.Minute {
			for s := prev.Add(time.Minute); s.Before(w); s = s.Add(time.Minute) {
				if s.After(maxWall) && matches(s) {
					fire = true
				}
			}
		}
		if fire {
			out = append(out, u.UTC().Format(time.RFC3339))
		}
		if w.After(maxWall) {
			maxWall = w
		}
		prev = w
	}
	return out
}

func implTicks(tm timing, from, to time.Time) []string {
	var out []string
	for at := from; ; {
		n := tm.next(at)
		if !n.IsZero() && !n.After(at) {
			out = append(out, fmt.Sprintf("NOT-AFTER(%s->%s)", at.UTC().Format(time.RFC3339), n.UTC().Format(time.RFC3339)))
			break
		}
		at = n
		if at.IsZero() || at.After(to) {
			break
		}
		out = append(out, at.UTC().Format(time.RFC3339))
	}
	return out
}

// TestCronOracleDST compares next, around every clock change of 17 zones
// (30-minute shifts, changes at midnight, two-hour shifts, zones that
// dropped or moved their changes), with oracleTicks, the documented rule
// computed a minute at a time.
func TestCronOracleDST(t *testing.T) {
	zones := []string{"America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Havana", "America/Santiago",
		"Asia/Beirut", "America/Sao_Paulo", "Pacific/Apia", "Africa/Casablanca", "Antarctica/Troll", "Europe/Moscow",
		"America/Nuuk", "Asia/Gaza", "America/Asuncion", "Pacific/Chatham", "Australia/Sydney", "America/Scoresbysund", "Europe/Dublin"}
	exprs := []string{"0 * * * *", "30 2 * * *", "0 0 * * *", "*/15 * * * *", "0 0 1 * *", "0 2 * * 0", "30 0 * * *", "0 1,2,3 * * *", "45 23 * * *", "0 3 * * *", "59 1 * * *"}
	fails := 0
	for _, zn := range zones {
		loc, err := time.LoadLocation(zn)
		if err != nil {
			t.Logf("skip %s: %v", zn, err)
			continue
		}
		// Transitions from 2008 to 2027 with JOBSTAGE_CRON_ORACLE=full;
		// CI checks those from 2025.
		at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		if os.Getenv("JOBSTAGE_CRON_ORACLE") == "full" {
			at = time.Date(2008, 1, 1, 0, 0, 0, 0, time.UTC)
		}
		for at.Year() < 2027 {
			_, end := at.In(loc).ZoneBounds()
			if end.IsZero() {
				break
			}
			from := end.Add(-36 * time.Hour).Truncate(time.Hour)
			to := end.Add(36 * time.Hour)
			for _, e := range exprs {
				tm := mustTiming(t, e, zn, 0)
				want := oracleTicks(e, loc, from, to)
				ch := make(chan []string, 1)
				go func() { ch <- implTicks(tm, from, to) }()
				var got []string
				select {
				case got = <-ch:
				case <-time.After(10 * time.Second):
					t.Fatalf("%s %q: next does not return (from %s)", zn, e, from.In(loc))
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					fails++
					if fails < 30 {
						t.Errorf("%s %q around %s:\n got %v\nwant %v", zn, e, end.In(loc), got, want)
					}
				}
			}
			at = end
		}
	}
	if fails > 0 {
		t.Errorf("%d mismatches", fails)
	}
}
