package kvtest

import (
	"bytes"
	"errors"
	"fmt"
	"sort"

	"github.com/jobstage/jobstage/kv"
)

// testRangeReads: limits, order, bounds and degenerate ranges on committed
// keys.
func testRangeReads(e *env) {
	var all []kv.KeyValue
	e.transact(func(tx kv.Tx) error {
		all = all[:0]
		for i := range 10 {
			k, v := e.k(fmt.Sprintf("k/%02d", i)), []byte(fmt.Sprintf("v%d", i))
			tx.Set(k, v)
			all = append(all, kv.KeyValue{Key: k, Value: v})
		}
		return nil
	})
	e.put("j", "before", "l", "after")
	err := e.db.ReadTransact(e.ctx, func(tx kv.ReadTx) error {
		rg := e.r("k/")
		for _, c := range []struct {
			r    kv.Range
			opts kv.RangeOptions
			want []kv.KeyValue
		}{
			{rg, kv.RangeOptions{}, all},
			{rg, kv.RangeOptions{Limit: 3}, all[:3]},
			{rg, kv.RangeOptions{Reverse: true}, reversed(all)},
			{rg, kv.RangeOptions{Limit: 3, Reverse: true}, reversed(all)[:3]},
			{rg, kv.RangeOptions{Limit: 10}, all},
			{rg, kv.RangeOptions{Limit: 11, Reverse: true}, reversed(all)},
			// Begin is inclusive, end exclusive.
			{kv.KeyRange(e.k("k/03"), e.k("k/06")), kv.RangeOptions{}, all[3:6]},
			{kv.KeyRange(e.k("k/03"), e.k("k/06")), kv.RangeOptions{Reverse: true}, reversed(all[3:6])},
			{kv.KeyRange(e.k("k/03"), e.k("k/06")), kv.RangeOptions{Limit: 1, Reverse: true}, all[5:6]},
			// Bounds between keys.
			{kv.KeyRange(e.k("k/035"), e.k("k/055")), kv.RangeOptions{}, all[4:6]},
			// Empty ranges: begin == end, and a range holding no keys.
			{kv.KeyRange(e.k("k/03"), e.k("k/03")), kv.RangeOptions{}, nil},
			{e.r("nothing/"), kv.RangeOptions{}, nil},
			{e.r("nothing/"), kv.RangeOptions{Reverse: true, Limit: 5}, nil},
		} {
			if err := e.expectRange(tx, c.r, c.opts, c.want); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		e.Fatal(err)
	}

	// begin > end: FoundationDB returns no key-values for such a read
	// (inverted_range is only raised by ClearRange and explicit conflict
	// ranges); a backend may also reject it with inverted_range.
	inverted := kv.KeyRange(e.k("k/06"), e.k("k/03"))
	err = e.db.ReadTransact(e.ctx, func(tx kv.ReadTx) error {
		kvs, err := tx.GetRange(inverted, kv.RangeOptions{})
		if err != nil && !errors.Is(err, kv.ErrInvertedRange) {
			return err
		}
		if len(kvs) != 0 {
			return fmt.Errorf("kvtest: GetRange(begin > end) = %s, want no key-values", e.showKVs(kvs))
		}
		it := tx.Iterate(inverted, kv.RangeOptions{Reverse: true})
		if it.Next() {
			return fmt.Errorf("kvtest: Iterate(begin > end) returned %s", e.name(it.KeyValue().Key))
		}
		if err := it.Err(); err != nil && !errors.Is(err, kv.ErrInvertedRange) {
			return err
		}
		return nil
	})
	if err != nil {
		e.Fatal(err)
	}
}

// testIterateLarge: Iterate streams a range larger than one page, in both
// directions and with limits, alone and merged with the transaction's own
// writes.
func testIterateLarge(e *env) {
	const n, perTx = 5000, 1000
	key := func(i int) []byte { return e.k(fmt.Sprintf("big/%05d", i)) }
	value := func(i int) []byte { return []byte(fmt.Sprintf("%05d-%s", i, bytes.Repeat([]byte("v"), 40))) }
	var all []kv.KeyValue
	for i := range n {
		all = append(all, kv.KeyValue{Key: key(i), Value: value(i)})
	}
	for start := 0; start < n; start += perTx {
		e.transact(func(tx kv.Tx) error {
			for _, kv := range all[start : start+perTx] {
				tx.Set(kv.Key, kv.Value)
			}
			return nil
		})
	}
	rg := e.r("big/")
	cases := func(want []kv.KeyValue) []kv.RangeOptions {
		return []kv.RangeOptions{{}, {Reverse: true}, {Limit: 1234}, {Limit: 1234, Reverse: true}, {Limit: len(want) + 1}}
	}
	expect := func(r kv.ReadTx, want []kv.KeyValue) error {
		for _, opts := range cases(want) {
			w := want
			if opts.Reverse {
				w = reversed(w)
			}
			if opts.Limit > 0 && opts.Limit < len(w) {
				w = w[:opts.Limit]
			}
			if err := e.expectRange(r, rg, opts, w); err != nil {
				return err
			}
		}
		return nil
	}
	if err := e.db.ReadTransact(e.ctx, func(tx kv.ReadTx) error { return expect(tx, all) }); err != nil {
		e.Fatal(err)
	}

	// Own writes spread over the whole range: a cleared block, inserts
	// between committed keys, a cleared last key, an overwritten first key.
	model := map[string][]byte{}
	for _, kv := range all {
		model[string(kv.Key)] = kv.Value
	}
	e.rollback(func(tx kv.Tx) error {
		tx.ClearRange(kv.KeyRange(key(1000), key(2000)))
		for i := 1000; i < 2000; i++ {
			delete(model, string(key(i)))
		}
		for i := 0; i < n; i += 7 {
			k := append(key(i), "-x"...)
			tx.Set(k, []byte("inserted"))
			model[string(k)] = []byte("inserted")
		}
		tx.Clear(key(n - 1))
		delete(model, string(key(n-1)))
		tx.Set(key(0), []byte("overwritten"))
		model[string(key(0))] = []byte("overwritten")
		want := make([]kv.KeyValue, 0, len(model))
		for k, v := range model {
			want = append(want, kv.KeyValue{Key: []byte(k), Value: v})
		}
		sort.Slice(want, func(i, j int) bool { return bytes.Compare(want[i].Key, want[j].Key) < 0 })
		if err := expect(tx, want); err != nil {
			return err
		}
		if err := expect(tx.Snapshot(), want); err != nil {
			return fmt.Errorf("snapshot view: %w", err)
		}
		return nil
	})
}

// testClearRange: ClearRange removes committed keys in [begin, end) and
// nothing else; clearing what is absent is no error; an inverted ClearRange
// fails the transaction with inverted_range, as in FoundationDB.
func testClearRange(e *env) {
	for _, c := range "abcdefghij" {
		e.put(string(c), "v")
	}
	e.transact(func(tx kv.Tx) error {
		tx.ClearRange(kv.KeyRange(e.k("c"), e.k("g")))
		tx.Clear(e.k("absent"))
		tx.ClearRange(e.r("nothing/"))
		tx.ClearRange(kv.KeyRange(e.k("h"), e.k("h"))) // empty
		return nil
	})
	e.wantKeys(e.all(), "a", "b", "g", "h", "i", "j")

	err := e.db.Transact(e.ctx, func(tx kv.Tx) error {
		tx.Set(e.k("side"), []byte("x"))
		tx.ClearRange(kv.KeyRange(e.k("j"), e.k("a")))
		return nil
	})
	e.wantErr(err, kv.ErrInvertedRange, "commit after ClearRange(begin > end)")
	e.wantKeys(e.all(), "a", "b", "g", "h", "i", "j")
}
