package fdbq

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// pick takes whole priority bands from the highest, samples the band that
// does not fit, and returns what it took in index order; every candidate of
// the sampled band gets its chance.
func TestPickSamplesInOrder(t *testing.T) {
	var cands []candidate
	for i := 0; i < 3; i++ {
		cands = append(cands, candidate{key: []byte(fmt.Sprintf("a%03d", i)), priority: 5})
	}
	for i := 0; i < 20; i++ {
		cands = append(cands, candidate{key: []byte(fmt.Sprintf("b%03d", i)), priority: 0})
	}
	taken := map[string]int{}
	for round := 0; round < 2000; round++ {
		out := pick(rand.IntN, cands, 8)
		if len(out) != 8 {
			t.Fatalf("picked %d, want 8", len(out))
		}
		for i, c := range out {
			if i < 3 && c.priority != 5 {
				t.Fatalf("picked %s before the higher band was taken whole", c.key)
			}
			if i > 0 && string(out[i-1].key) >= string(c.key) {
				t.Fatalf("picked out of index order: %s then %s", out[i-1].key, c.key)
			}
			taken[string(c.key)]++
		}
	}
	for _, c := range cands {
		if taken[string(c.key)] == 0 {
			t.Fatalf("%s never picked in 2000 rounds", c.key)
		}
	}
	if out := pick(rand.IntN, cands, 30); len(out) != len(cands) {
		t.Fatalf("picked %d of a window of %d with room for all", len(out), len(cands))
	}
}

// An accept group's accepts skip the keys another holds; one that finds
// every key held gets a channel that the next release closes.
func TestAcceptGroupSkipsHeld(t *testing.T) {
	var cands []candidate
	for i := 0; i < 6; i++ {
		cands = append(cands, candidate{key: []byte(fmt.Sprintf("k%d", i)), id: fmt.Sprintf("j%d", i)})
	}
	var g AcceptGroup
	first, held1, wake := g.pick(rand.IntN, "t", cands, 4, nil)
	if len(first) != 4 || len(held1) != 4 || wake != nil || g.held() != 4 {
		t.Fatalf("first pick: %d candidates, %d held, wake %v", len(first), len(held1), wake)
	}
	second, held2, _ := g.pick(rand.IntN, "t", append([]candidate(nil), cands...), 4, nil)
	if len(second) != 2 {
		t.Fatalf("second pick took %d, want the 2 not held", len(second))
	}
	for _, c := range second {
		for _, k := range held1 {
			if c.id == k.id {
				t.Fatalf("%s picked while held", k.id)
			}
		}
	}
	none, _, wake := g.pick(rand.IntN, "t", append([]candidate(nil), cands...), 4, nil)
	if len(none) != 0 || wake == nil {
		t.Fatalf("with every key held: %d picked, wake %v", len(none), wake)
	}
	g.release(held2)
	select {
	case <-wake:
	default:
		t.Fatal("release did not close the wake channel")
	}
	if again, _, _ := g.pick(rand.IntN, "t", append([]candidate(nil), cands...), 4, nil); len(again) != 2 {
		t.Fatalf("after release, picked %d, want 2", len(again))
	}
}
