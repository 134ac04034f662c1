package fdbq_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv/kvtest"
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
			started := acceptInTurns(t, rng, 40, behind, ahead)
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

// TestKeyRateLimitUnderFaults: accepts of a rated key by two processes
// whose clocks disagree by more than Per (less than a minute), on a store
// whose commits conflict, come back too old, or report
// commit_unknown_result whether they applied or not. The bound of two
// windows holds, and every start the store recorded is a lease an accept
// returned: a retried accept that had applied neither starts its jobs
// again nor counts them twice in the window.
func TestKeyRateLimitUnderFaults(t *testing.T) {
	seed := jobtest.Seed(t)
	const maxStarts, per, skew = 3, time.Second, 20 * time.Second
	s := fdbq.DefaultTypeSettings()
	s.KeyDefault = fdbq.KeyPolicy{MaxStarts: maxStarts, Per: per}
	clean, _ := limitedQueue(t, s)
	addKeyed(t, clean, "a", 30)
	fo := kvtest.DefaultFaultOptions(int64(seed))
	fo.UnknownAppliedRate = 0.3
	db, fb := kvtest.NewFaultyDB(clean.DB(), fo)
	behind := fdbq.New(db, fdbq.Options{Now: clean.Now})
	ahead := fdbq.New(db, fdbq.Options{Now: func() time.Time { return clean.Now().Add(skew) }})
	rng := rand.New(rand.NewPCG(seed, seed))
	returned := acceptInTurns(t, rng, 40, behind, ahead)
	if fb.Counts().UnknownApplied == 0 {
		t.Fatal("no commit reported commit_unknown_result after it applied: the test tried nothing")
	}
	if returned > 2*maxStarts || returned < maxStarts {
		t.Fatalf("accepts returned %d jobs of a key with max_starts %d per %s, clocks %s apart: want %d to %d", returned, maxStarts, per, skew, maxStarts, 2*maxStarts)
	}
	running, err := clean.Count(context.Background(), clean.DB(), "email", fdbq.Running)
	if err != nil {
		t.Fatal(err)
	}
	if running != int64(returned) {
		t.Fatalf("%d jobs running in the store, %d returned by the accepts", running, returned)
	}
	page, err := clean.Keys(context.Background(), clean.DB(), "email", fdbq.KeysOptions{})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(page.Keys, func(k fdbq.KeyInfo) bool { return k.Key == "a" })
	if i < 0 {
		t.Fatalf("key a not listed: %+v", page.Keys)
	}
	if w := page.Keys[i].Window; w == nil || w.Started < 1 || w.Started > maxStarts {
		t.Fatalf("a's window %+v: want 1 to %d starts counted in the last window", w, maxStarts)
	}
}

// acceptInTurns makes n accepts of 1 to 3 jobs, each by one of qs chosen
// at random, and returns how many jobs they took.
func acceptInTurns(t *testing.T, rng *rand.Rand, n int, qs ...*fdbq.Queue) int {
	t.Helper()
	took := 0
	for range n {
		took += len(acceptNoWait(t, qs[rng.IntN(len(qs))], fdbq.AcceptOptions{Max: 1 + rng.IntN(3)}))
	}
	return took
}
