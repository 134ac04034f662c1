package kvtest

import (
	"encoding/binary"
	"fmt"

	"github.com/jobstage/jobstage/kv"
)

// testRangeReadOverAtomic: a range read over keys with pending atomic
// operations returns each operation applied to that key's own committed
// value, forward and reverse, with every limit, through GetRange and
// Iterate (reads equal the transaction's mutations applied in order to its
// snapshot).
func testRangeReadOverAtomic(e *env) {
	const n = 12
	le := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	e.transact(func(tx kv.Tx) error {
		for i := range n {
			tx.Set(e.k(fmt.Sprintf("r/%02d", i)), le(uint64(1000*i)))
		}
		return nil
	})
	e.rollback(func(tx kv.Tx) error {
		var want []kv.KeyValue
		for i := range n {
			key := e.k(fmt.Sprintf("r/%02d", i))
			v := uint64(1000 * i)
			switch i % 3 {
			case 0:
				tx.Add(key, int64(i))
				v += uint64(i)
			case 1:
				tx.Atomic(kv.MutationBitOr, key, le(1<<40))
				tx.Add(key, 7)
				v = (v | 1<<40) + 7
			}
			want = append(want, kv.KeyValue{Key: key, Value: le(v)})
		}
		// A key the transaction adds to that has no committed value.
		extra := e.k("r/99")
		tx.Add(extra, 5)
		want = append(want, kv.KeyValue{Key: extra, Value: le(5)})
		for limit := 0; limit <= len(want)+1; limit++ {
			for _, reverse := range []bool{false, true} {
				w := want
				if reverse {
					w = reversed(want)
				}
				if limit > 0 && limit < len(w) {
					w = w[:limit]
				}
				if err := e.expectRange(tx, e.r("r/"), kv.RangeOptions{Limit: limit, Reverse: reverse}, w); err != nil {
					return err
				}
				if err := e.expectRange(tx.Snapshot(), e.r("r/"), kv.RangeOptions{Limit: limit, Reverse: reverse}, w); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// testEmptyBeginKey: the empty key is a key like any other: a range whose
// begin is a non-nil empty slice reads, clears and conflicts as one whose
// begin is nil, and the empty key itself can be written and read.
func testEmptyBeginKey(e *env) {
	e.put("a", "1", "b", "2")
	empty := []byte{}
	r := kv.Range{Begin: empty, End: e.k("b")}
	e.rollback(func(tx kv.Tx) error {
		for _, reverse := range []bool{false, true} {
			kvs, err := tx.GetRange(r, kv.RangeOptions{Reverse: reverse})
			if err != nil {
				return err
			}
			nilKVs, err := tx.GetRange(kv.Range{End: r.End}, kv.RangeOptions{Reverse: reverse})
			if err != nil {
				return err
			}
			if err := e.sameKVs("GetRange from the empty key", kv.RangeOptions{Reverse: reverse}, kvs, nilKVs); err != nil {
				return err
			}
			if len(kvs) == 0 || string(kvs[len(kvs)-1].Key) != string(e.k("a")) && string(kvs[0].Key) != string(e.k("a")) {
				return fmt.Errorf("kvtest: GetRange from the empty key = %s, want it to hold a", e.showKVs(kvs))
			}
			it := tx.Iterate(r, kv.RangeOptions{Reverse: reverse})
			count := 0
			for it.Next() {
				count++
			}
			if err := it.Err(); err != nil {
				return err
			}
			if count != len(kvs) {
				return fmt.Errorf("kvtest: Iterate from the empty key gave %d key-values, GetRange %d", count, len(kvs))
			}
		}
		tx.AddReadConflictRange(r)
		tx.AddWriteConflictRange(r)
		tx.Snapshot().GetRange(r, kv.RangeOptions{Limit: 1})
		// A clear from the empty key up to just below the test's prefix
		// touches no key of any test.
		tx.ClearRange(kv.Range{Begin: empty, End: []byte{0}})
		if _, err := tx.Get(empty); err != nil {
			return err
		}
		return nil
	})
}

// testOwnWritesNoReadConflict: a read adds read conflicts only where its
// result came from the database. Keys the transaction set or cleared, and
// ranges it cleared, are known without it: another transaction's write
// there does not conflict. Keys under an atomic operation do conflict,
// since the result depends on their committed value
// (fdbclient/ReadYourWrites.actor.cpp, updateConflictMap).
func testOwnWritesNoReadConflict(e *env) {
	rangeRead := func(rg kv.Range, prepare func(tx kv.Transaction)) func(tx kv.Transaction) error {
		return func(tx kv.Transaction) error {
			prepare(tx)
			for _, reverse := range []bool{false, true} {
				if _, err := tx.GetRange(rg, kv.RangeOptions{Reverse: reverse}); err != nil {
					return err
				}
				it := tx.Iterate(rg, kv.RangeOptions{Reverse: reverse})
				for it.Next() {
				}
				if err := it.Err(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	pointRead := func(name string, prepare func(tx kv.Transaction)) func(tx kv.Transaction) error {
		return func(tx kv.Transaction) error {
			prepare(tx)
			_, err := tx.Get(e.k(name))
			return err
		}
	}
	e.put("c/a", "a", "c/b", "b")
	e.noConflict(e.race(rangeRead(e.r("c/"), func(tx kv.Transaction) { tx.ClearRange(e.r("c/")) }), e.setter("c/a0")),
		"range read entirely under the transaction's own range clear, another writes into it")

	e.put("s/a", "a")
	e.noConflict(e.race(rangeRead(e.r("s/a"), func(tx kv.Transaction) { tx.Set(e.k("s/a"), []byte("mine")) }), e.setter("s/a")),
		"range read of a key the transaction set, another writes that key")
	e.noConflict(e.race(pointRead("s/a", func(tx kv.Transaction) { tx.Set(e.k("s/a"), []byte("mine")) }), e.setter("s/a")),
		"point read of a key the transaction set, another writes it")
	e.noConflict(e.race(pointRead("s/b", func(tx kv.Transaction) { tx.Clear(e.k("s/b")) }), e.setter("s/b")),
		"point read of a key the transaction cleared, another writes it")

	// Around a cleared part, the rest of the range read still conflicts.
	e.put("p/a", "a", "p/m", "m", "p/z", "z")
	clearMiddle := func(tx kv.Transaction) { tx.ClearRange(kv.Range{Begin: e.k("p/b"), End: e.k("p/y")}) }
	e.noConflict(e.race(rangeRead(e.r("p/"), clearMiddle), e.setter("p/n")),
		"write inside the cleared part of a range read")
	e.conflict(e.race(rangeRead(e.r("p/"), clearMiddle), e.setter("p/a0")),
		"write before the cleared part of a range read")
	e.conflict(e.race(rangeRead(e.r("p/"), clearMiddle), e.setter("p/y")),
		"write at the end of the cleared part of a range read")

	// Next to a key the transaction set, the rest of the range still
	// conflicts.
	e.put("n/a", "a", "n/c", "c")
	e.conflict(e.race(rangeRead(e.r("n/"), func(tx kv.Transaction) { tx.Set(e.k("n/b"), []byte("mine")) }), e.setter("n/b0")),
		"write next to a key the transaction set, in a range it read")

	// An atomic operation's result depends on the committed value.
	e.put("t/a", "\x01")
	e.conflict(e.race(rangeRead(e.r("t/"), func(tx kv.Transaction) { tx.Add(e.k("t/a"), 1) }), e.setter("t/a")),
		"range read of a key under the transaction's atomic add, another writes it")
	e.conflict(e.race(pointRead("t/a", func(tx kv.Transaction) { tx.Add(e.k("t/a"), 1) }), e.setter("t/a")),
		"point read of a key under the transaction's atomic add, another writes it")
}
