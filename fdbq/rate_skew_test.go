package fdbq_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
)

// TestKeyRateLimitAcrossSkewedClocks: two processes whose clocks disagree
// by more than a key's Per, but by less than a minute, share its rate
// window. With both clocks stopped, each may open one window (the ahead
// one finds the other's ended, the behind one finds the ahead one's still
// holding), so the key starts at most 2·MaxStarts jobs however the
// accepts alternate. (A window opened by a clock more than a window ahead
// was once taken for ended at once: each process then opened a new window
// after the other's, and the bound did not hold at all.)
func TestKeyRateLimitAcrossSkewedClocks(t *testing.T) {
	seed := jobtest.Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed))
	for round := range 20 {
		per := []time.Duration{100 * time.Millisecond, time.Second, 10 * time.Second}[rng.IntN(3)]
		skew := per + time.Duration(rng.Int64N(int64(time.Minute-per))) // per ≤ skew < 1 minute
		maxStarts := 1 + rng.IntN(3)
		t.Run(fmt.Sprintf("%d/per=%s/skew=%s/max=%d", round, per, skew, maxStarts), func(t *testing.T) {
			s := fdbq.DefaultTypeSettings()
			s.KeyDefault = fdbq.KeyPolicy{MaxStarts: maxStarts, Per: per}
			behind, _ := limitedQueue(t, s)
			ahead := fdbq.New(behind.DB(), fdbq.Options{Now: func() time.Time { return behind.Now().Add(skew) }})
			addKeyed(t, behind, "a", 30) // due on both clocks
			started := 0
			for range 40 {
				q := behind
				if rng.IntN(2) == 0 {
					q = ahead
				}
				started += len(acceptNoWait(t, q, fdbq.AcceptOptions{Max: 1 + rng.IntN(3)}))
			}
			if started > 2*maxStarts {
				t.Fatalf("%d starts of one key with max_starts %d per %s, clocks %s apart and stopped: the bound did not hold", started, maxStarts, per, skew)
			}
			if started < maxStarts {
				t.Fatalf("%d starts, want at least the %d of one window", started, maxStarts)
			}
		})
	}
}

// TestKeyRateLimitClockJumps: one process whose clock steps back and forth
// by more than Per (and less than a minute) around one instant starts at
// most two windows' worth of a key's jobs.
func TestKeyRateLimitClockJumps(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.KeyDefault = fdbq.KeyPolicy{MaxStarts: 1, Per: time.Minute}
	q, c := limitedQueue(t, s)
	addKeyed(t, q, "a", 10)
	started := 0
	for i := range 10 {
		if i%2 == 0 {
			c.Advance(59 * time.Second)
		} else {
			c.Advance(-59 * time.Second)
		}
		started += len(acceptNoWait(t, q, fdbq.AcceptOptions{Max: 1}))
	}
	if started > 2 {
		t.Fatalf("%d starts of a key with max_starts 1 per minute, its clock stepping 59 s back and forth", started)
	}
}

// TestKeyRateLimitWindowFarAhead: a window opened by a clock more than a
// minute (and more than Per) ahead is taken for the work of a clock gone
// wrong: a process with the right time opens a new window at once rather
// than wait for its clock to reach that one.
func TestKeyRateLimitWindowFarAhead(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.KeyDefault = fdbq.KeyPolicy{MaxStarts: 1, Per: time.Second}
	q, _ := limitedQueue(t, s)
	wrong := fdbq.New(q.DB(), fdbq.Options{Now: func() time.Time { return q.Now().Add(2 * time.Minute) }})
	addKeyed(t, q, "a", 3)
	if ls := acceptNoWait(t, wrong, fdbq.AcceptOptions{Max: 1}); len(ls) != 1 {
		t.Fatalf("the clock ahead started %d, want 1", len(ls))
	}
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 1}); len(ls) != 1 {
		t.Fatalf("the right clock started %d after a window opened two minutes ahead, want 1", len(ls))
	}
}
