package fdbq

import (
	"fmt"
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
		out := pick(cands, 8)
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
	if out := pick(cands, 30); len(out) != len(cands) {
		t.Fatalf("picked %d of a window of %d with room for all", len(out), len(cands))
	}
}
