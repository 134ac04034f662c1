package embedded_test

import (
	"context"
	"testing"

	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
)

// Many adds to one key in one transaction, folded by the write buffer,
// give what applying them one by one gives: in the transaction's own
// reads and once committed, across add widths and other mutations in
// between.
func TestManyAtomicsOnOneKey(t *testing.T) {
	db := jobtest.OpenDB(t)
	ctx := context.Background()
	counter, narrow := []byte("counter"), []byte("narrow")
	if err := db.Transact(ctx, func(tx kv.Tx) error {
		tx.Set(counter, kv.EncodeInt64(40))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var inTx int64
	var narrowInTx []byte
	if err := db.Transact(ctx, func(tx kv.Tx) error {
		for i := 0; i < 1000; i++ {
			tx.Add(counter, 1)
		}
		for i := 0; i < 300; i++ {
			tx.Add(counter, -1)
		}
		for i := 0; i < 3; i++ {
			tx.Atomic(kv.MutationAdd, narrow, []byte{200}) // one byte wide: wraps
		}
		tx.Atomic(kv.MutationMax, narrow, []byte{0x10, 0}) // two bytes: ends the run of adds
		tx.Atomic(kv.MutationAdd, narrow, []byte{0xff, 0}) // then adds of that width
		tx.Atomic(kv.MutationAdd, narrow, []byte{0x02, 0})
		b, err := tx.Get(counter)
		if err != nil {
			return err
		}
		inTx = kv.DecodeInt64(b)
		narrowInTx, err = tx.Get(narrow)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// 3·200 = 600 ≡ 88 in one byte; max with 0x0010 gives 0x0058 (88);
	// then + 255 + 2 = 345 = 0x0159.
	want := []byte{0x59, 0x01}
	if inTx != 740 || string(narrowInTx) != string(want) {
		t.Fatalf("in the transaction: counter %d (want 740), narrow % x (want % x)", inTx, narrowInTx, want)
	}
	got, err := kv.ReadTransact(ctx, db, func(tx kv.ReadTx) ([2][]byte, error) {
		a, err := tx.Get(counter)
		if err != nil {
			return [2][]byte{}, err
		}
		b, err := tx.Get(narrow)
		return [2][]byte{a, b}, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if kv.DecodeInt64(got[0]) != 740 || string(got[1]) != string(want) {
		t.Fatalf("committed: counter %d (want 740), narrow % x (want % x)", kv.DecodeInt64(got[0]), got[1], want)
	}
}

// Atomics after a set, a clear or a range clear of their key in the same
// transaction apply over what those left, not over the earlier chain.
func TestAtomicsAfterOtherWrites(t *testing.T) {
	db := jobtest.OpenDB(t)
	ctx := context.Background()
	a, b, c := []byte("k/a"), []byte("k/b"), []byte("k/c")
	if err := db.Transact(ctx, func(tx kv.Tx) error {
		tx.Set(b, kv.EncodeInt64(100))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	read := func(tx kv.ReadTx) ([3]int64, error) {
		var out [3]int64
		for i, k := range [][]byte{a, b, c} {
			v, err := tx.Get(k)
			if err != nil {
				return out, err
			}
			out[i] = kv.DecodeInt64(v)
		}
		return out, nil
	}
	want := [3]int64{11, 2, 3}
	if err := db.Transact(ctx, func(tx kv.Tx) error {
		tx.Add(a, 1)
		tx.Set(a, kv.EncodeInt64(10))
		tx.Add(a, 1)
		tx.Add(b, 5)
		tx.ClearRange(kv.Range{Begin: []byte("k/b"), End: []byte("k/c")})
		tx.Add(b, 2)
		tx.Add(c, 7)
		tx.Clear(c)
		tx.Add(c, 3)
		got, err := read(tx)
		if err == nil && got != want {
			t.Errorf("in the transaction: %v, want %v", got, want)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	got, err := kv.ReadTransact(ctx, db, read)
	if err != nil || got != want {
		t.Fatalf("committed: %v (%v), want %v", got, err, want)
	}
}
