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
