package kvtest

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/jobstage/jobstage/kv"
)

// testLostUpdate: concurrent read-modify-write increments through the retry
// loop lose none, because a transaction whose read was overwritten after its
// read version fails to commit and runs again, and count none twice,
// because Transact commits each call once.
func testLostUpdate(e *env) {
	const workers, perWorker = 16, 25
	counter := e.k("counter")
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				err := e.db.Transact(e.ctx, func(tx kv.Tx) error {
					v, err := tx.Get(counter)
					if err != nil {
						return err
					}
					tx.Set(counter, kv.EncodeInt64(kv.DecodeInt64(v)+1))
					return nil
				})
				if err != nil {
					errs <- fmt.Errorf("worker %d, increment %d: %w", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.Fatal(err)
	}
	if got := kv.DecodeInt64(e.getKey(counter)); got != workers*perWorker {
		e.Fatalf("counter = %d after %d increments: updates were lost", got, workers*perWorker)
	}
}

// testWriteSkew: two doctors on call; each transaction checks that both are
// on call and takes one of them off. Snapshot isolation would let both
// commit and leave nobody on call; serializability fails the second.
func testWriteSkew(e *env) {
	alice, bob := e.k("oncall/alice"), e.k("oncall/bob")
	e.put("oncall/alice", "1", "oncall/bob", "1")
	goOffCall := func(tx kv.Transaction, me []byte) {
		e.Helper()
		onCall := 0
		for _, k := range [][]byte{alice, bob} {
			v, err := tx.Get(k)
			if err != nil {
				e.Fatalf("Get %s: %v", e.name(k), err)
			}
			if string(v) == "1" {
				onCall++
			}
		}
		if onCall != 2 {
			e.Fatalf("%d doctors on call before either went off, want 2", onCall)
		}
		tx.Set(me, []byte("0"))
	}
	tx1, tx2 := e.begin(), e.begin()
	goOffCall(tx1, alice)
	goOffCall(tx2, bob)
	e.commit(tx1, "alice goes off call")
	e.wantErr(tx2.Commit(), kv.ErrNotCommitted, "bob goes off call after alice did")
	e.wantValue("oncall/alice", []byte("0"))
	e.wantValue("oncall/bob", []byte("1"))
}

// race runs read in a raw transaction, then commits change in another one,
// then has the first write a key of its own (a transaction without writes
// commits without a conflict check) and returns its commit's error.
func (e *env) race(read func(tx kv.Transaction) error, change func(tx kv.Transaction)) error {
	e.Helper()
	tx1 := e.begin()
	if err := read(tx1); err != nil {
		e.Fatalf("read: %v", err)
	}
	tx2 := e.begin()
	change(tx2)
	e.commit(tx2, "the other transaction")
	tx1.Set(e.k("~written"), []byte("x"))
	return tx1.Commit()
}

// conflict fails the test unless err is a conflict.
func (e *env) conflict(err error, what string) {
	e.Helper()
	if !errors.Is(err, kv.ErrNotCommitted) {
		e.Errorf("%s: commit err = %v, want not_committed", what, err)
	}
}

// noConflict fails the test unless err is nil.
func (e *env) noConflict(err error, what string) {
	e.Helper()
	if err != nil {
		e.Errorf("%s: commit err = %v, want a commit", what, err)
	}
}

// setter returns a change that sets the test's key name.
func (e *env) setter(name string) func(tx kv.Transaction) {
	return func(tx kv.Transaction) { tx.Set(e.k(name), []byte("changed")) }
}

// testPhantom: a range read conflicts with any later write into the range,
// including keys that did not exist when it was read.
func testPhantom(e *env) {
	e.put("full/r/b", "b", "full/r/d", "d")
	getRange := func(r kv.Range) func(tx kv.Transaction) error {
		return func(tx kv.Transaction) error {
			_, err := tx.GetRange(r, kv.RangeOptions{})
			return err
		}
	}
	iterate := func(r kv.Range) func(tx kv.Transaction) error {
		return func(tx kv.Transaction) error {
			it := tx.Iterate(r, kv.RangeOptions{})
			for it.Next() {
			}
			return it.Err()
		}
	}
	full, empty := e.r("full/r/"), e.r("empty/r/")
	e.conflict(e.race(getRange(full), e.setter("full/r/c")), "insert into a range read")
	e.conflict(e.race(iterate(full), e.setter("full/r/c2")), "insert into an iterated range")
	e.conflict(e.race(getRange(empty), e.setter("empty/r/x")), "insert into an empty range read")
	e.conflict(e.race(getRange(full), func(tx kv.Transaction) { tx.Clear(e.k("full/r/b")) }),
		"clear of a key in a range read")
	e.noConflict(e.race(getRange(full), e.setter("full/s")), "insert after the range's end")
	e.noConflict(e.race(getRange(full), e.setter("full/r")), "insert before the range's begin")
}

// testRangeLimitConflict: a range read stopped by its limit conflicts on the
// keys up to the last one it returned, not on the rest of the range
// (FoundationDB adds [begin, keyAfter(last)) forward and [last, end)
// reversed).
func testRangeLimitConflict(e *env) {
	for _, dir := range []string{"fwd", "rev"} {
		for _, s := range []string{"beyond", "within"} {
			e.put(dir+s+"/a", "a", dir+s+"/b", "b", dir+s+"/c", "c", dir+s+"/d", "d")
		}
	}
	read := func(dir, s string, want ...string) func(tx kv.Transaction) error {
		return func(tx kv.Transaction) error {
			kvs, err := tx.GetRange(e.r(dir+s+"/"), kv.RangeOptions{Limit: 2, Reverse: dir == "rev"})
			if err != nil {
				return err
			}
			if got := e.names(kvs); !slices.Equal(got, want) {
				e.Fatalf("GetRange(limit 2, %s) = %v, want %v", dir, got, want)
			}
			return nil
		}
	}
	e.noConflict(e.race(read("fwd", "beyond", "fwdbeyond/a", "fwdbeyond/b"), e.setter("fwdbeyond/b0")),
		"forward read with limit, insert after the last key returned")
	e.conflict(e.race(read("fwd", "within", "fwdwithin/a", "fwdwithin/b"), e.setter("fwdwithin/a0")),
		"forward read with limit, insert between keys returned")
	e.noConflict(e.race(read("rev", "beyond", "revbeyond/d", "revbeyond/c"), e.setter("revbeyond/b0")),
		"reverse read with limit, insert before the last key returned")
	e.conflict(e.race(read("rev", "within", "revwithin/d", "revwithin/c"), e.setter("revwithin/c0")),
		"reverse read with limit, insert between keys returned")
}

// testSnapshotReads: snapshot reads add no read conflicts.
func testSnapshotReads(e *env) {
	e.put("k", "v", "r/a", "a")
	e.noConflict(e.race(func(tx kv.Transaction) error {
		_, err := tx.Snapshot().Get(e.k("k"))
		return err
	}, e.setter("k")), "snapshot Get, then the key changed")
	e.noConflict(e.race(func(tx kv.Transaction) error {
		_, err := tx.Snapshot().GetRange(e.r("r/"), kv.RangeOptions{})
		return err
	}, e.setter("r/b")), "snapshot GetRange, then a key inserted into the range")
	e.noConflict(e.race(func(tx kv.Transaction) error {
		it := tx.Snapshot().Iterate(e.r("r/"), kv.RangeOptions{})
		for it.Next() {
		}
		return it.Err()
	}, e.setter("r/c")), "snapshot Iterate, then a key inserted into the range")
	// The same read without Snapshot does conflict, so the cases above
	// pass because of the snapshot and not because of the setup.
	e.conflict(e.race(func(tx kv.Transaction) error {
		_, err := tx.Get(e.k("k"))
		return err
	}, e.setter("k")), "Get, then the key changed")
}

// testReadConflictKey: AddReadConflictKey conflicts like a read of exactly
// that key.
func testReadConflictKey(e *env) {
	addKey := func(tx kv.Transaction) error {
		tx.AddReadConflictKey(e.k("k"))
		return nil
	}
	e.conflict(e.race(addKey, e.setter("k")), "read conflict key, then the key written")
	e.noConflict(e.race(addKey, e.setter("k0")), "read conflict key, then the next key written")
}

// testReadConflictRange: AddReadConflictRange conflicts like a read of the
// half-open range.
func testReadConflictRange(e *env) {
	addRange := func(tx kv.Transaction) error {
		tx.AddReadConflictRange(kv.KeyRange(e.k("b"), e.k("d")))
		return nil
	}
	e.conflict(e.race(addRange, e.setter("c")), "read conflict range, then a key inside written")
	e.conflict(e.race(addRange, e.setter("b")), "read conflict range, then its begin written")
	e.noConflict(e.race(addRange, e.setter("d")), "read conflict range, then its end written")
	e.noConflict(e.race(addRange, e.setter("a")), "read conflict range, then a key before written")
}

// testWriteConflictKey: AddWriteConflictKey makes a transaction conflict
// with readers of the key without writing it.
func testWriteConflictKey(e *env) {
	e.put("k", "v")
	read := func(tx kv.Transaction) error {
		_, err := tx.Get(e.k("k"))
		return err
	}
	e.conflict(e.race(read, func(tx kv.Transaction) {
		tx.AddWriteConflictKey(e.k("k"))
		tx.Set(e.k("other"), []byte("x"))
	}), "read, then another transaction added a write conflict on the key")
	e.noConflict(e.race(read, func(tx kv.Transaction) {
		tx.AddWriteConflictKey(e.k("k0"))
		tx.Set(e.k("other"), []byte("y"))
	}), "read, then another transaction added a write conflict on the next key")
	e.wantValue("k", []byte("v")) // a write conflict is not a write
}

// testWriteConflictRange: AddWriteConflictRange conflicts with readers of
// any key in the range.
func testWriteConflictRange(e *env) {
	e.put("c", "v")
	read := func(tx kv.Transaction) error {
		_, err := tx.Get(e.k("c"))
		return err
	}
	e.conflict(e.race(read, func(tx kv.Transaction) {
		tx.AddWriteConflictRange(kv.KeyRange(e.k("b"), e.k("d")))
		tx.Set(e.k("other"), []byte("x"))
	}), "read, then another transaction added a write conflict range over the key")
	e.noConflict(e.race(read, func(tx kv.Transaction) {
		tx.AddWriteConflictRange(kv.KeyRange(e.k("a"), e.k("c")))
		tx.Set(e.k("other"), []byte("y"))
	}), "read, then another transaction added a write conflict range ending at the key")
	e.wantValue("c", []byte("v"))
}

// testAtomicNoReadConflict: an atomic add reads nothing, so a concurrent
// write of the same key does not make it conflict, and the add applies to
// the value that write left.
func testAtomicNoReadConflict(e *env) {
	e.noConflict(e.race(func(tx kv.Transaction) error {
		tx.Add(e.k("n"), 1)
		return nil
	}, func(tx kv.Transaction) {
		tx.Set(e.k("n"), kv.EncodeInt64(10))
	}), "atomic add, then the key set by another transaction")
	if got := kv.DecodeInt64(e.get("n")); got != 11 {
		e.Errorf("n = %d, want 11", got)
	}
}

// testAtomicAddContention: concurrent atomic adds of one key never conflict:
// every raw commit succeeds and the total is exact.
func testAtomicAddContention(e *env) {
	const workers, perWorker = 16, 25
	counter := e.k("counter")
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	for range workers {
		wg.Go(func() {
			for range perWorker {
				tx, err := e.db.CreateTransaction(e.ctx)
				if err != nil {
					errs <- err
					return
				}
				tx.Add(counter, 1)
				if err := tx.Commit(); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.Errorf("an atomic add failed to commit: %v", err)
	}
	if got := kv.DecodeInt64(e.getKey(counter)); got != workers*perWorker {
		e.Errorf("counter = %d, want %d", got, workers*perWorker)
	}
}
