package fdbq

import (
	"math"
	"testing"

	"github.com/jobstage/jobstage/kv/tuple"
)

// The scheduled index's keys are the packed tuples of doc.go's data
// model, and parseScheduled reads back what scheduled builds.
func TestScheduledKeysArePackedTuples(t *testing.T) {
	k := newKeys(tuple.FromBytes(DefaultPrefix))
	ints := []int64{0, 1, -1, 255, -256, 1 << 32, 1_700_000_000_000, math.MaxInt64, math.MinInt64 + 1}
	for _, typ := range []string{"t", "email\x00x"} {
		for _, id := range []string{"a", "", "with\x00nul"} {
			for _, v := range ints {
				key := k.scheduled(typ, int(v), -v, id)
				check(t, key, tuple.Tuple{tagSchedule, typ, -v, -v, id})
				n, s, got, ok := k.parseScheduled(typ, key)
				if !ok || n != -v || s != -v || got != id {
					t.Fatalf("parseScheduled(scheduled(%d, %d, %q)) = %d, %d, %q, %v", v, -v, id, n, s, got, ok)
				}
			}
		}
	}
}

func FuzzParseScheduled(f *testing.F) {
	f.Add("t", "id", int64(0), int64(1), []byte(nil))
	f.Add("t", "a\x00b", int64(-300), int64(math.MinInt64), []byte{0x15})
	f.Fuzz(func(t *testing.T, typ, id string, prio, sched int64, junk []byte) {
		k := newKeys(tuple.FromBytes(DefaultPrefix))
		if prio == math.MinInt64 {
			prio++
		}
		key := k.scheduled(typ, int(prio), sched, id)
		check(t, key, tuple.Tuple{tagSchedule, typ, sched, -prio, id})
		n, s, got, ok := k.parseScheduled(typ, key)
		if !ok || n != -prio || s != sched || got != id {
			t.Fatalf("parseScheduled(scheduled(%d, %d, %q)) = %d, %d, %q, %v", prio, sched, id, n, s, got, ok)
		}
		// Any other key under the prefix either reads as the tuple layer
		// reads it, or is refused.
		other := append(append([]byte(nil), k.of(typ).scheduled...), junk...)
		n, s, got, ok = k.parseScheduled(typ, other)
		if !ok {
			return
		}
		tu, err := tuple.FromBytes(k.of(typ).scheduled).Unpack(other)
		if err != nil || len(tu) != 3 || tu[0] != s || tu[1] != n || tu[2] != got {
			t.Fatalf("% x read as %d, %d, %q; the tuple layer reads %v (%v)", junk, n, s, got, tu, err)
		}
	})
}
