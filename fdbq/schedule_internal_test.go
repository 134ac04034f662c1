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
				z0 := zone{key: id, shard: int(uint64(v) % MaxZones)}
				key := k.scheduled(typ, z0, int(v), -v, id)
				check(t, key, tuple.Tuple{tagSchedule, typ, -v, -v, id, int64(z0.shard), id})
				z, n, s, got, ok := k.parseScheduled(typ, key)
				if !ok || z != z0 || n != -v || s != -v || got != id {
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
		z0 := zone{key: typ, shard: int(uint64(prio) % MaxZones)}
		key := k.scheduled(typ, z0, int(prio), sched, id)
		check(t, key, tuple.Tuple{tagSchedule, typ, sched, -prio, typ, int64(z0.shard), id})
		z, n, s, got, ok := k.parseScheduled(typ, key)
		if !ok || z != z0 || n != -prio || s != sched || got != id {
			t.Fatalf("parseScheduled(scheduled(%d, %d, %q)) = %d, %d, %q, %v", prio, sched, id, n, s, got, ok)
		}
		// Any other key under the prefix either reads as the tuple layer
		// reads it, or is refused.
		other := append(append([]byte(nil), k.of(typ).scheduled...), junk...)
		z, n, s, got, ok = k.parseScheduled(typ, other)
		if !ok {
			return
		}
		tu, err := tuple.FromBytes(k.of(typ).scheduled).Unpack(other)
		if err != nil || len(tu) != 5 || tu[0] != s || tu[1] != n || tu[2] != z.key || tu[3] != int64(z.shard) || tu[4] != got {
			t.Fatalf("% x read as %d, %d, %q; the tuple layer reads %v (%v)", junk, n, s, got, tu, err)
		}
	})
}
