package fdbq

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The samples a monitor keeps answer as all of its transactions would,
// but later: never stale where the full record is not (safety), and
// stale at most about two spacings after it is (liveness), whatever the
// pace and order of the transactions.
func TestSamplesAgainstFullRecord(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	const spacing = 250 * time.Millisecond
	for round := 0; round < 200; round++ {
		s := samples{spacing: spacing}
		var all []versionSample
		at := time.Unix(1000, 0)
		rv := int64(0)
		for i := 0; i < 300; i++ {
			// Transactions a few ms to a second apart; some report late
			// (a concurrent sweep), with an older time or version.
			at = at.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
			rv += int64(rng.IntN(5))
			sat, srv := at, rv
			if rng.IntN(5) == 0 {
				sat = at.Add(-time.Duration(rng.IntN(300)) * time.Millisecond)
				srv = max(0, rv-int64(rng.IntN(10)))
			}
			s.note(srv, sat)
			all = append(all, versionSample{srv, sat})
		}
		for k := 0; k < 200; k++ {
			cv := int64(rng.IntN(int(rv) + 1))
			timeout := time.Duration(1+rng.IntN(20_000)) * time.Millisecond
			now := at.Add(time.Duration(rng.IntN(30_000)) * time.Millisecond)
			// The full record: stale when some transaction at least a
			// timeout before now knew of the commit.
			full := false
			var first time.Time
			for _, e := range all {
				if e.rv >= cv && (first.IsZero() || e.at.Before(first)) {
					first = e.at
				}
				if !e.at.After(now.Add(-timeout)) && e.rv >= cv {
					full = true
				}
			}
			if got := s.stale(cv, timeout, now); got && !full {
				t.Fatalf("seed %d: stale(%d, %v, %v) with kept samples, not with all of them", seed, cv, timeout, now)
			}
			if due, ok := s.dueAt(cv, timeout); ok && !first.IsZero() && due.Before(first.Add(timeout)) {
				t.Fatalf("seed %d: due %v, before the full record's %v", seed, due, first.Add(timeout))
			}
			if !first.IsZero() && !now.Before(first.Add(timeout+2*spacing)) && !s.stale(cv, timeout, now) {
				t.Fatalf("seed %d: not stale %v after the first sample that knew the commit, timeout %v", seed, now.Sub(first), timeout)
			}
		}
	}
}

func TestSamplesBounded(t *testing.T) {
	s := samples{spacing: time.Millisecond}
	at := time.Unix(0, 0)
	for i := range 100_000 {
		at = at.Add(time.Millisecond)
		s.note(int64(i), at)
	}
	if len(s.list) > maxSamples {
		t.Fatalf("%d samples kept", len(s.list))
	}
	s.prune(at.Add(-time.Second))
	if len(s.list) == 0 || s.list[0].at.After(at.Add(-time.Second)) {
		t.Fatalf("prune dropped the latest sample before the horizon: first %v", s.list[0].at)
	}
}
