package kvtest

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// keyOfSize returns a key of the test of exactly n bytes.
func (e *env) keyOfSize(name string, n int) []byte {
	k := e.k(name)
	if len(k) > n {
		e.Fatalf("the test's prefix is longer than %d bytes", n)
	}
	return append(k, bytes.Repeat([]byte{'k'}, n-len(k))...)
}

// rejects runs write in a transaction that also sets a side key, and fails
// the test unless the commit fails with want, a read after the bad write
// fails with want too (FoundationDB fails every later operation of a
// transaction with a bad write), and nothing of the test's keys changed.
func (e *env) rejects(what string, want error, write func(tx kv.Tx)) {
	e.Helper()
	before := e.scan(e.all())
	err := e.db.Transact(e.ctx, func(tx kv.Tx) error {
		tx.Set(e.k("side"), []byte("x"))
		write(tx)
		return nil
	})
	e.wantErr(err, want, what+": commit")
	err = e.db.Transact(e.ctx, func(tx kv.Tx) error {
		write(tx)
		if _, err := tx.Get(e.k("side")); err != nil {
			return err
		}
		return errReadSucceeded
	})
	e.wantErr(err, want, what+": read after the bad write")
	after := e.scan(e.all())
	if err := e.sameKVs("store after "+what, kv.RangeOptions{}, after, before); err != nil {
		e.Error(err)
	}
}

// testKeyTooLarge: keys up to MaxKeySize bytes are stored; longer ones fail
// the transaction with key_too_large.
func testKeyTooLarge(e *env) {
	atLimit := e.keyOfSize("max/", kv.MaxKeySize)
	e.transact(func(tx kv.Tx) error { tx.Set(atLimit, []byte("v")); return nil })
	if got := e.getKey(atLimit); string(got) != "v" {
		e.Errorf("key of MaxKeySize bytes = %s, want \"v\"", show(got))
	}
	tooLarge := e.keyOfSize("over/", kv.MaxKeySize+1)
	e.rejects("Set with a key over MaxKeySize", kv.ErrKeyTooLarge, func(tx kv.Tx) { tx.Set(tooLarge, []byte("v")) })
	e.rejects("Add with a key over MaxKeySize", kv.ErrKeyTooLarge, func(tx kv.Tx) { tx.Add(tooLarge, 1) })
}

// testValueTooLarge: values up to MaxValueSize bytes are stored; longer ones
// fail the transaction with value_too_large.
func testValueTooLarge(e *env) {
	atLimit := bytes.Repeat([]byte{'v'}, kv.MaxValueSize)
	e.transact(func(tx kv.Tx) error { tx.Set(e.k("max"), atLimit); return nil })
	if got := e.get("max"); !bytes.Equal(got, atLimit) {
		e.Errorf("value of MaxValueSize bytes read back as %s", show(got))
	}
	tooLarge := bytes.Repeat([]byte{'v'}, kv.MaxValueSize+1)
	e.rejects("Set with a value over MaxValueSize", kv.ErrValueTooLarge, func(tx kv.Tx) { tx.Set(e.k("over"), tooLarge) })
}

// testTransactionTooLarge: a transaction over MaxTransactionSize fails with
// transaction_too_large and writes nothing.
func testTransactionTooLarge(e *env) {
	value := bytes.Repeat([]byte{'v'}, 99_000)
	err := e.db.Transact(e.ctx, func(tx kv.Tx) error {
		for i := range 110 { // 10.9 MB of values alone
			tx.Set(e.k(fmt.Sprintf("big/%03d", i)), value)
		}
		tx.Set(e.k("side"), []byte("x"))
		return nil
	})
	e.wantErr(err, kv.ErrTransactionTooLarge, "commit of 110 values of 99,000 bytes")
	e.wantKeys(e.all())
}

// testSystemKeyspace: keys from 0xff on belong to the system; writing them
// fails with key_outside_legal_range, as FoundationDB does without the
// ACCESS_SYSTEM_KEYS option.
func testSystemKeyspace(e *env) {
	sys := []byte("\xffkvtest/system")
	e.rejects("Set of a system key", kv.ErrKeyOutsideLegalRange, func(tx kv.Tx) { tx.Set(sys, []byte("v")) })
	e.rejects("Clear of a system key", kv.ErrKeyOutsideLegalRange, func(tx kv.Tx) { tx.Clear(sys) })
	e.rejects("Add to a system key", kv.ErrKeyOutsideLegalRange, func(tx kv.Tx) { tx.Add(sys, 1) })
	e.rejects("ClearRange ending past 0xff", kv.ErrKeyOutsideLegalRange, func(tx kv.Tx) {
		tx.ClearRange(kv.KeyRange(e.k("a"), []byte("\xff\x01")))
	})
}

// tooOldWait is how long a transaction must live to be too old: the
// lifetime plus a margin for coarse clocks.
func (e *env) tooOldWait() time.Duration {
	if e.f.TransactionLifetime <= 0 {
		e.Skip("no transaction lifetime declared")
	}
	return e.f.TransactionLifetime + e.f.TransactionLifetime/2 + 100*time.Millisecond
}

// testTransactionTooOld: a transaction older than the lifetime fails its
// next read, or its commit, with transaction_too_old.
func testTransactionTooOld(e *env) {
	wait := e.tooOldWait()
	e.put("k", "v", "k2", "v2")
	tx := e.begin()
	if _, err := tx.Get(e.k("k")); err != nil { // takes the read version
		e.Fatal(err)
	}
	time.Sleep(wait) // the lifetime has to pass; nothing to wait on
	_, err := tx.Get(e.k("k2"))
	if err == nil {
		tx.Set(e.k("k"), []byte("too late"))
		err = tx.Commit()
	}
	e.wantErr(err, kv.ErrTransactionTooOld, fmt.Sprintf("transaction after %v", wait))
	e.wantValue("k", []byte("v"))
}

// testTransactionTooOldRetried: the retry loop restarts a transaction that
// grew too old, and the retry commits.
func testTransactionTooOldRetried(e *env) {
	wait := e.tooOldWait()
	e.put("k", "v")
	attempts := 0
	e.transact(func(tx kv.Tx) error {
		attempts++
		if _, err := tx.Get(e.k("k")); err != nil {
			return err
		}
		if attempts == 1 {
			time.Sleep(wait) // the lifetime has to pass; nothing to wait on
		}
		if _, err := tx.Get(e.k("k2")); err != nil {
			return err
		}
		tx.Set(e.k("k"), []byte("done"))
		return nil
	})
	if attempts < 2 {
		e.Errorf("a transaction older than its lifetime committed")
	}
	e.wantValue("k", []byte("done"))
}

// errReadSucceeded: a read that should have failed did not.
var errReadSucceeded = errors.New("kvtest: the read succeeded")

// testNegativeLimit: a range read with a negative limit fails with
// range_limits_invalid, through GetRange and Iterate alike, forward and
// reverse, on every backend (FoundationDB's own client takes -1 as "no
// limit" in some streaming modes only).
func testNegativeLimit(e *env) {
	e.put("a", "1", "b", "2")
	for _, limit := range []int{-1, -2, -1 << 40} {
		for _, reverse := range []bool{false, true} {
			opts := kv.RangeOptions{Limit: limit, Reverse: reverse}
			e.rollback(func(tx kv.Tx) error {
				for _, r := range []kv.ReadTx{tx, tx.Snapshot()} {
					kvs, err := r.GetRange(e.all(), opts)
					if !errors.Is(err, kv.ErrRangeLimitsInvalid) {
						return fmt.Errorf("kvtest: GetRange with limit %d (reverse %t) = %d key-values, %v; want range_limits_invalid", limit, reverse, len(kvs), err)
					}
					it := r.Iterate(e.all(), opts)
					n := 0
					for it.Next() {
						n++
					}
					if err := it.Err(); n != 0 || !errors.Is(err, kv.ErrRangeLimitsInvalid) {
						return fmt.Errorf("kvtest: Iterate with limit %d (reverse %t) = %d key-values, %v; want range_limits_invalid", limit, reverse, n, err)
					}
				}
				return nil
			})
		}
	}
}

// testOversizedKeyReads: no key longer than MaxKeySize can exist, so, as
// in FoundationDB, reading one answers "absent", clearing one does nothing,
// and range reads, clears and conflict ranges with longer bounds cover the
// same keys as bounds cut to MaxKeySize+1 bytes. Writing one still fails
// with key_too_large (testKeyTooLarge), and so does watching one.
func testOversizedKeyReads(e *env) {
	atLimit := e.keyOfSize("m/", kv.MaxKeySize)
	e.transact(func(tx kv.Tx) error { tx.Set(atLimit, []byte("v")); tx.Set(e.k("m0"), []byte("after")); return nil })
	over := append(bytes.Clone(atLimit), 'z')
	farOver := append(bytes.Clone(atLimit), bytes.Repeat([]byte{'z'}, 50)...)
	e.transact(func(tx kv.Tx) error {
		for _, k := range [][]byte{over, farOver} {
			if v, err := tx.Get(k); err != nil || v != nil {
				return fmt.Errorf("kvtest: Get of a %d-byte key = %s, %v; want absent", len(k), show(v), err)
			}
			if v, err := tx.Snapshot().Get(k); err != nil || v != nil {
				return fmt.Errorf("kvtest: snapshot Get of a %d-byte key = %s, %v; want absent", len(k), show(v), err)
			}
			tx.Clear(k)
			tx.AddReadConflictKey(k)
			tx.AddWriteConflictKey(k)
		}
		// [atLimit, over) holds atLimit; [over, m0) holds nothing
		// before m0.
		for _, c := range []struct {
			r    kv.Range
			want []string
		}{
			{kv.Range{Begin: atLimit, End: farOver}, []string{string(atLimit)}},
			{kv.Range{Begin: over, End: e.k("m1")}, []string{string(e.k("m0"))}},
			{kv.Range{Begin: e.k("m/"), End: farOver}, []string{string(atLimit)}},
		} {
			kvs, err := tx.GetRange(c.r, kv.RangeOptions{})
			if err != nil {
				return fmt.Errorf("kvtest: GetRange with a bound over MaxKeySize: %w", err)
			}
			if len(kvs) != len(c.want) || (len(kvs) > 0 && string(kvs[0].Key) != c.want[0]) {
				return fmt.Errorf("kvtest: GetRange with a bound over MaxKeySize read %d keys, want %d", len(kvs), len(c.want))
			}
		}
		tx.AddReadConflictRange(kv.Range{Begin: over, End: farOver})
		tx.AddWriteConflictRange(kv.Range{Begin: atLimit, End: farOver})
		return nil
	})
	if got := e.getKey(atLimit); string(got) != "v" {
		e.Errorf("key of MaxKeySize bytes = %s after clears of longer keys, want \"v\"", show(got))
	}
	// A range clear whose end is longer than any key clears up to it.
	e.transact(func(tx kv.Tx) error { tx.ClearRange(kv.Range{Begin: e.k("m/"), End: farOver}); return nil })
	if got := e.getKey(atLimit); got != nil {
		e.Errorf("key of MaxKeySize bytes = %s after a range clear to a longer bound, want absent", show(got))
	}
	e.wantValue("m0", []byte("after"))

	// An inverted range stays inverted, even when cutting its bounds would
	// make them equal.
	e.rejects("ClearRange inverted beyond MaxKeySize", kv.ErrInvertedRange, func(tx kv.Tx) {
		tx.ClearRange(kv.Range{Begin: append(bytes.Clone(atLimit), 'z', 'z'), End: append(bytes.Clone(atLimit), 'z', 'a')})
	})

	err := e.db.Transact(e.ctx, func(tx kv.Tx) error {
		w := tx.Watch(over)
		e.await(w.Ready(), "watch on a key over MaxKeySize")
		return w.Wait(e.ctx)
	})
	e.wantErr(err, kv.ErrKeyTooLarge, "watch on a key over MaxKeySize")
}

// testCommitAfterLifetime: the lifetime ends reads, and the commit of a
// transaction that read (the resolver cannot check reads that old), but
// not a blind write nor a read-only commit: FoundationDB's resolver
// answers too old only to a transaction with read conflicts, and a
// read-only commit never reaches it.
func testCommitAfterLifetime(e *env) {
	if e.f.TransactionLifetime == 0 {
		e.Skip("the backend's transaction lifetime is not known")
	}
	blind, read, readOnly := e.begin(), e.begin(), e.begin()
	if _, err := read.Get(e.k("r")); err != nil {
		e.Fatal(err)
	}
	if _, err := readOnly.Get(e.k("r")); err != nil {
		e.Fatal(err)
	}
	<-time.After(e.f.TransactionLifetime + e.f.TransactionLifetime/2)
	if _, err := read.Get(e.k("r")); !errors.Is(err, kv.ErrTransactionTooOld) {
		e.Errorf("read past the lifetime: %v, want transaction_too_old", err)
	}
	blind.Set(e.k("blind"), []byte("v"))
	e.commit(blind, "a blind write past the lifetime")
	e.wantValue("blind", []byte("v"))
	read.Set(e.k("read"), []byte("v"))
	e.wantErr(read.Commit(), kv.ErrTransactionTooOld, "commit past the lifetime of a transaction that read")
	e.wantValue("read", nil)
	e.commit(readOnly, "a read-only commit past the lifetime")
}
