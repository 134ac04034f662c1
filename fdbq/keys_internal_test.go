package fdbq

import (
	"bytes"
	"math"
	"testing"

	"github.com/jobstage/jobstage/kv/tuple"
)

// The keys built from cached prefixes are the packed tuples of doc.go's
// data model, byte for byte.
func TestKeysArePackedTuples(t *testing.T) {
	k := newKeys(tuple.FromBytes(DefaultPrefix))
	ints := []int64{0, 1, -1, 255, -255, 256, -256, 1 << 32, -(1 << 32), 1_700_000_000_000, -1_700_000_000_000, math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1}
	ids := []string{"a", "", "with\x00nul", "\x00", "\xff\x00\xff", "b12345"}
	for _, typ := range []string{"t", "email\x00x"} {
		for _, id := range ids {
			check(t, k.job(typ, id), tuple.Tuple{tagJob, typ, id})
			for _, v := range ints {
				check(t, k.active(typ, v, -v, id), tuple.Tuple{tagActive, typ, laneOf(id), v, -v, id})
				if v > 0 {
					check(t, k.stamp(typ, -v, v), tuple.Tuple{tagStamp, typ, v % activityLanes, -v, v})
				}
				check(t, k.legacyActive(typ, v, id), tuple.Tuple{tagLegacyActive, typ, v, id})
				check(t, k.finished(typ, v, id), tuple.Tuple{tagFinished, typ, laneOf(id), v, id})
				if v != math.MinInt64 {
					z := zone{key: id, shard: int(uint64(v) % MaxZones)}
					check(t, k.pending(typ, z, int(v), -v, id), tuple.Tuple{tagPending, typ, id, int64(z.shard), -int(v), -v, id})
					check(t, k.scheduled(typ, z, int(v), -v, id), tuple.Tuple{tagSchedule, typ, -v, -int(v), id, int64(z.shard), id})
				}
			}
		}
	}
}

func check(t *testing.T, got []byte, want tuple.Tuple) {
	t.Helper()
	w := tuple.FromBytes(DefaultPrefix).MustPack(want)
	if !bytes.Equal(got, w) {
		t.Fatalf("key of %v:\n got % x\nwant % x", want, got, w)
	}
}

func FuzzKeysArePackedTuples(f *testing.F) {
	f.Add("t", "id", int64(0), int64(1))
	f.Add("x\x00", "\x00\xff", int64(math.MinInt64), int64(-7))
	f.Fuzz(func(t *testing.T, typ, id string, a, b int64) {
		k := newKeys(tuple.FromBytes(DefaultPrefix))
		check(t, k.job(typ, id), tuple.Tuple{tagJob, typ, id})
		check(t, k.active(typ, a, b, id), tuple.Tuple{tagActive, typ, laneOf(id), a, b, id})
		check(t, k.finished(typ, b, id), tuple.Tuple{tagFinished, typ, laneOf(id), b, id})
		if a != math.MinInt64 {
			z := zone{key: typ, shard: int(uint64(b) % MaxZones)}
			check(t, k.pending(typ, z, int(a), b, id), tuple.Tuple{tagPending, typ, typ, int64(z.shard), -int(a), b, id})
			check(t, k.zoneMark(typ, z), tuple.Tuple{tagZones, typ, typ, int64(z.shard)})
		}
	})
}

// parsePending reads back what pending builds, and refuses what it does
// not build rather than misread it.
func FuzzParsePending(f *testing.F) {
	f.Add("t", "id", int64(0), int64(1), []byte(nil))
	f.Add("t", "a\x00b", int64(-300), int64(math.MinInt64), []byte{0x15})
	f.Add("t", "", int64(math.MaxInt32), int64(math.MaxInt64), []byte{0x1d, 1})
	f.Fuzz(func(t *testing.T, typ, id string, prio, sched int64, junk []byte) {
		k := newKeys(tuple.FromBytes(DefaultPrefix))
		if prio == math.MinInt64 {
			prio++
		}
		z0 := zone{key: id, shard: int(uint64(sched) % MaxZones)}
		key := k.pending(typ, z0, int(prio), sched, id)
		z, n, s, got, ok := k.parsePending(typ, key)
		if !ok || z != z0 || n != -prio || s != sched || got != id {
			t.Fatalf("parsePending(pending(%v, %d, %d, %q)) = %v, %d, %d, %q, %v", z0, prio, sched, id, z, n, s, got, ok)
		}
		// Any other key under the prefix either reads as the tuple layer
		// reads it, or is refused.
		other := append(append([]byte(nil), k.of(typ).pending...), junk...)
		z, n, s, got, ok = k.parsePending(typ, other)
		if !ok {
			return
		}
		tu, err := tuple.FromBytes(k.of(typ).pending).Unpack(other)
		if err != nil || len(tu) != 5 || tu[0] != z.key || tu[1] != int64(z.shard) || tu[2] != n || tu[3] != s || tu[4] != got {
			t.Fatalf("% x read as %v, %d, %d, %q; the tuple layer reads %v (%v)", junk, z, n, s, got, tu, err)
		}
	})
}
