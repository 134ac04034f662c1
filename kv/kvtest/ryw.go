package kvtest

import (
	"errors"
	"fmt"
	"slices"

	"github.com/jobstage/jobstage/kv"
)

// rollback runs fn in a transaction that is never committed: fn returns
// nil when its checks passed, and rollback turns that into errRollback so
// that the writes it inspected are discarded.
func (e *env) rollback(fn func(tx kv.Tx) error) {
	e.Helper()
	err := e.db.Transact(e.ctx, func(tx kv.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		e.Fatal(err)
	}
}

// expectGet returns an error unless r reads want (nil: absent) at key. A
// read error is returned as is, so that the retry loop sees retryable
// ones.
func (e *env) expectGet(r kv.ReadTx, key []byte, want []byte) error {
	got, err := r.Get(key)
	if err != nil {
		return err
	}
	if !sameValue(got, want) {
		return fmt.Errorf("kvtest: Get %s = %s, want %s", e.name(key), show(got), show(want))
	}
	return nil
}

// expectRange returns an error unless GetRange and Iterate on r both return
// exactly want (key names and values).
func (e *env) expectRange(r kv.ReadTx, rg kv.Range, opts kv.RangeOptions, want []kv.KeyValue) error {
	got, err := r.GetRange(rg, opts)
	if err != nil {
		return err
	}
	if err := e.sameKVs("GetRange", opts, got, want); err != nil {
		return err
	}
	var streamed []kv.KeyValue
	it := r.Iterate(rg, opts)
	for it.Next() {
		streamed = append(streamed, it.KeyValue())
	}
	if err := it.Err(); err != nil {
		return err
	}
	return e.sameKVs("Iterate", opts, streamed, want)
}

func (e *env) sameKVs(what string, opts kv.RangeOptions, got, want []kv.KeyValue) error {
	same := len(got) == len(want)
	for i := 0; same && i < len(got); i++ {
		same = string(got[i].Key) == string(want[i].Key) && sameValue(got[i].Value, want[i].Value)
	}
	if same {
		return nil
	}
	return fmt.Errorf("kvtest: %s(limit %d, reverse %t) = %s, want %s",
		what, opts.Limit, opts.Reverse, e.showKVs(got), e.showKVs(want))
}

func (e *env) showKVs(kvs []kv.KeyValue) string {
	const most = 20
	s := "["
	for i, kv := range kvs {
		if i == most {
			s += fmt.Sprintf(" … %d more", len(kvs)-most)
			break
		}
		if i > 0 {
			s += " "
		}
		s += e.name(kv.Key) + "=" + show(kv.Value)
	}
	return s + "]"
}

// testReadYourWritesPoint: point reads see every kind of the transaction's
// own writes, through the transaction and through its snapshot view, and
// none of it is visible outside before commit.
func testReadYourWritesPoint(e *env) {
	e.put("a", "1", "b", "2", "c", "3")
	e.transact(func(tx kv.Tx) error {
		tx.Set(e.k("n"), kv.EncodeInt64(40))
		return nil
	})
	e.rollback(func(tx kv.Tx) error {
		// Each step writes, then reads through both views.
		steps := []struct {
			write func()
			key   string
			want  []byte
		}{
			{func() { tx.Set(e.k("x"), []byte("new")) }, "x", []byte("new")},
			{func() { tx.Set(e.k("a"), []byte("1b")) }, "a", []byte("1b")},
			{func() { tx.Clear(e.k("b")) }, "b", nil},
			{func() { tx.Set(e.k("b"), []byte("again")) }, "b", []byte("again")},
			{func() { tx.ClearRange(kv.KeyRange(e.k("a"), e.k("b"))) }, "a", nil},
			{func() {}, "b", []byte("again")}, // ClearRange's end is exclusive
			{func() { tx.ClearRange(kv.KeyRange(e.k("c"), e.k("d"))) }, "c", nil},
			{func() { tx.Clear(e.k("never")) }, "never", nil},
			{func() { tx.Add(e.k("absent"), 5) }, "absent", kv.EncodeInt64(5)},
			{func() { tx.Add(e.k("n"), 2) }, "n", kv.EncodeInt64(42)},
			{func() { tx.Add(e.k("n"), -50) }, "n", kv.EncodeInt64(-8)},
			{func() { tx.Clear(e.k("n")); tx.Add(e.k("n"), 3) }, "n", kv.EncodeInt64(3)},
			{func() { tx.Set(e.k("x"), []byte("newer")) }, "x", []byte("newer")},
		}
		for _, s := range steps {
			s.write()
			if err := e.expectGet(tx, e.k(s.key), s.want); err != nil {
				return err
			}
			if err := e.expectGet(tx.Snapshot(), e.k(s.key), s.want); err != nil {
				return fmt.Errorf("snapshot view: %w", err)
			}
		}
		return nil
	})
	// Nothing of the rolled-back transaction is visible.
	e.wantValue("a", []byte("1"))
	e.wantValue("b", []byte("2"))
	e.wantValue("c", []byte("3"))
	e.wantValue("x", nil)
	e.wantValue("absent", nil)
	e.wantValue("n", kv.EncodeInt64(40))
}

// testReadYourWritesRange: range reads merge the transaction's own writes
// with the committed keys, in both directions and with limits.
func testReadYourWritesRange(e *env) {
	e.put("r/a", "1", "r/b", "2", "r/c", "3", "r/d", "4", "r/e", "5", "r/g", "7", "s", "outside")
	kvOf := func(name string, v []byte) kv.KeyValue { return kv.KeyValue{Key: e.k(name), Value: v} }
	want := []kv.KeyValue{
		kvOf("r/a", []byte("A")),
		kvOf("r/b", []byte("2")),
		kvOf("r/b2", []byte("b2")),
		kvOf("r/e", []byte("E")),
		kvOf("r/f", kv.EncodeInt64(6)),
		kvOf("r/g", []byte("7")),
	}
	e.rollback(func(tx kv.Tx) error {
		tx.Set(e.k("r/b2"), []byte("b2"))
		tx.Set(e.k("r/a"), []byte("A"))
		tx.Clear(e.k("r/c"))
		tx.ClearRange(kv.KeyRange(e.k("r/d"), e.k("r/e\x00"))) // clears d and e
		tx.Set(e.k("r/e"), []byte("E"))                        // and e comes back
		tx.Add(e.k("r/f"), 6)
		rg := e.r("r/")
		for _, view := range []struct {
			name string
			r    kv.ReadTx
		}{{"transaction", tx}, {"snapshot view", tx.Snapshot()}} {
			for _, c := range []struct {
				opts kv.RangeOptions
				want []kv.KeyValue
			}{
				{kv.RangeOptions{}, want},
				{kv.RangeOptions{Reverse: true}, reversed(want)},
				{kv.RangeOptions{Limit: 3}, want[:3]},
				{kv.RangeOptions{Limit: 3, Reverse: true}, reversed(want)[:3]},
				{kv.RangeOptions{Limit: 100}, want},
			} {
				if err := e.expectRange(view.r, rg, c.opts, c.want); err != nil {
					return fmt.Errorf("%s: %w", view.name, err)
				}
			}
			// A range that begins and ends at keys only the transaction
			// wrote or cleared.
			sub := kv.KeyRange(e.k("r/b2"), e.k("r/f"))
			if err := e.expectRange(view.r, sub, kv.RangeOptions{}, want[2:4]); err != nil {
				return fmt.Errorf("%s: %w", view.name, err)
			}
		}
		return nil
	})
	e.wantKeys(e.r("r/"), "r/a", "r/b", "r/c", "r/d", "r/e", "r/g")
}

// testWritesApplyInOrder: a committed transaction's writes take effect in
// the order they were made, exactly as its own reads saw them.
func testWritesApplyInOrder(e *env) {
	e.put("c", "old", "d", "old", "e/1", "old", "e/3", "old")
	// Every write here is idempotent as a whole, so a retry after a
	// commit_unknown_result that applied leaves the same result.
	e.transact(func(tx kv.Tx) error {
		tx.Set(e.k("c"), kv.EncodeInt64(10))
		tx.Add(e.k("c"), 5)
		tx.Clear(e.k("d"))
		tx.Set(e.k("d"), []byte("z"))
		tx.Set(e.k("e/2"), []byte("gone"))
		tx.ClearRange(e.r("e/"))
		tx.Set(e.k("e/3"), []byte("y"))
		tx.Set(e.k("f"), []byte("f"))
		tx.Clear(e.k("f"))
		return nil
	})
	e.wantValue("c", kv.EncodeInt64(15))
	e.wantValue("d", []byte("z"))
	e.wantValue("f", nil)
	e.wantKeys(e.r("e/"), "e/3")
	e.wantValue("e/3", []byte("y"))
}

func reversed(kvs []kv.KeyValue) []kv.KeyValue {
	out := slices.Clone(kvs)
	slices.Reverse(out)
	return out
}
