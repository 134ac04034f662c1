package consumer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
)

// The keys with envelopes waiting take one start each in turn, in the
// order they first had one waiting; within a key, arrival order. Envelopes
// arriving between starts join their key's queue (a key with none waiting
// joins the end of the turns). Checked against a model over seeded random
// pushes and pops (JOBSTAGE_SEED replays a seed).
func TestTurns(t *testing.T) {
	env := func(key, id string) *Envelope { return &Envelope{Lease: &fdbq.Lease{Job: fdbq.Job{ID: id, Key: key}}} }
	tr := newTurns(true)
	for i, k := range []string{"a", "a", "a", "b", "", "a", "c", "b"} {
		tr.push(env(k, string(rune('0'+i))))
	}
	var got []string
	for tr.len() > 0 {
		e := tr.head()
		got = append(got, e.Lease.Key+e.Lease.ID)
		tr.pop()
	}
	if want := []string{"a0", "b3", "4", "c6", "a1", "b7", "a2", "a5"}; !slices.Equal(got, want) {
		t.Fatalf("started %v, want %v", got, want)
	}

	seed := jobtest.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	tr = newTurns(true)
	// The model: ring of keys, each with its ids in arrival order.
	var ring []string
	waiting := map[string][]string{}
	n := 0
	for step := range 20_000 {
		if rng.IntN(3) > 0 || n == 0 {
			k := string(rune('a' + rng.IntN(1+rng.IntN(40))))
			id := strings.Repeat("x", step%3) + string(rune(step))
			tr.push(env(k, id))
			if len(waiting[k]) == 0 {
				ring = append(ring, k)
			}
			waiting[k] = append(waiting[k], id)
			n++
			continue
		}
		k := ring[0]
		if e := tr.head(); e.Lease.Key != k || e.Lease.ID != waiting[k][0] {
			t.Fatalf("seed %d, step %d: head %q/%q, want %q/%q", seed, step, e.Lease.Key, e.Lease.ID, k, waiting[k][0])
		}
		tr.pop()
		ring = ring[1:]
		if waiting[k] = waiting[k][1:]; len(waiting[k]) > 0 {
			ring = append(ring, k)
		}
		n--
		if tr.len() != n || len(tr.ring)-tr.at != len(ring) {
			t.Fatalf("seed %d, step %d: %d envelopes and %d keys waiting, want %d and %d", seed, step, tr.len(), len(tr.ring)-tr.at, n, len(ring))
		}
	}

	// Without keys: one queue in arrival order.
	tr = newTurns(false)
	for i, k := range []string{"a", "b", "a", ""} {
		tr.push(env(k, string(rune('0'+i))))
	}
	got = got[:0]
	for tr.len() > 0 {
		got = append(got, tr.head().Lease.ID)
		tr.pop()
	}
	if want := []string{"0", "1", "2", "3"}; !slices.Equal(got, want) {
		t.Fatalf("without keys started %v, want arrival order %v", got, want)
	}
}
