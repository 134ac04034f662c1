package kvtest

import (
	"context"
	"errors"

	"github.com/jobstage/jobstage/kv"
)

// Watch tests never wait for a watch not to fire: where a watch must still
// be pending, the test first waits for a control watch that the same write
// fires, so the backend has delivered that write's notifications, and then
// checks the watch without waiting.

// watch creates a watch on the test's key name in a committed transaction.
func (e *env) watch(name string) kv.Watch {
	e.Helper()
	var w kv.Watch
	e.transact(func(tx kv.Tx) error {
		w = tx.Watch(e.k(name))
		return nil
	})
	return w
}

// fired fails the test unless w fires (nil error) within waitTimeout.
func (e *env) fired(w kv.Watch, what string) {
	e.Helper()
	e.await(w.Ready(), what)
	if err := w.Wait(e.ctx); err != nil {
		e.Fatalf("%s: watch failed: %v", what, err)
	}
}

// failed waits for w and returns its error, failing the test if it fired.
func (e *env) failed(w kv.Watch, what string) error {
	e.Helper()
	e.await(w.Ready(), what)
	err := w.Wait(e.ctx)
	if err == nil {
		e.Fatalf("%s: watch fired, want it to fail", what)
	}
	return err
}

// pending fails the test if w has fired or failed.
func (e *env) pending(w kv.Watch, what string) {
	e.Helper()
	if closed(w.Ready()) {
		e.Fatalf("%s: watch is ready (err %v), want it pending", what, w.Wait(e.ctx))
	}
}

// testWatchFiresOnChange: a committed watch fires when another transaction
// sets, changes, clears or atomically changes its key.
func testWatchFiresOnChange(e *env) {
	w := e.watch("k")
	e.put("k", "v1")
	e.fired(w, "absent key set")

	w = e.watch("k")
	e.put("k", "v2")
	e.fired(w, "value changed")

	w = e.watch("k")
	e.transact(func(tx kv.Tx) error { tx.Clear(e.k("k")); return nil })
	e.fired(w, "key cleared")

	e.put("k", "v3")
	w = e.watch("k")
	e.transact(func(tx kv.Tx) error { tx.ClearRange(e.all()); return nil })
	e.fired(w, "key cleared by a range clear")

	w = e.watch("n")
	e.transact(func(tx kv.Tx) error { tx.Add(e.k("n"), 1); return nil })
	e.fired(w, "key changed by an atomic add")
}

// testWatchNotBeforeCommit: until its transaction commits, a watch reports
// no change made by other transactions; once it commits, it compares with
// the value its transaction saw and so fires for a change made meanwhile.
func testWatchNotBeforeCommit(e *env) {
	e.put("k", "v1")
	tx := e.begin()
	w := tx.Watch(e.k("k"))
	control := e.watch("k")
	e.put("k", "v2")
	e.fired(control, "control watch")
	e.pending(w, "watch of an uncommitted transaction after another transaction changed the key")
	e.commit(tx, "the watch's transaction")
	e.fired(w, "watch after its transaction committed, key changed since its read version")
}

// testWatchFailsWhenCancelled: a watch whose transaction is cancelled, or
// whose transactional function failed, fails with transaction_cancelled.
func testWatchFailsWhenCancelled(e *env) {
	tx := e.begin()
	w := tx.Watch(e.k("k"))
	tx.Cancel()
	e.wantErr(e.failed(w, "watch of a cancelled transaction"), kv.ErrTransactionCancelled,
		"watch of a cancelled transaction")

	err := e.db.Transact(e.ctx, func(tx kv.Tx) error {
		w = tx.Watch(e.k("k"))
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		e.Fatal(err)
	}
	e.wantErr(e.failed(w, "watch of a failed transactional function"), kv.ErrTransactionCancelled,
		"watch of a failed transactional function")
}

// testWatchFailsOnConflict: a watch whose transaction fails to commit fails
// with the commit's error.
func testWatchFailsOnConflict(e *env) {
	e.put("k", "v")
	tx := e.begin()
	if _, err := tx.Get(e.k("k")); err != nil {
		e.Fatal(err)
	}
	w := tx.Watch(e.k("watched"))
	tx.Set(e.k("other"), []byte("x"))
	e.put("k", "changed")
	e.wantErr(tx.Commit(), kv.ErrNotCommitted, "commit after the read key changed")
	e.wantErr(e.failed(w, "watch of a transaction that conflicted"), kv.ErrNotCommitted,
		"watch of a transaction that conflicted")
}

// testWatchCancel: Cancel makes a pending watch fail with
// transaction_cancelled; it does not undo a watch that already fired.
func testWatchCancel(e *env) {
	w := e.watch("k")
	w.Cancel()
	e.wantErr(e.failed(w, "cancelled watch"), kv.ErrTransactionCancelled, "cancelled watch")
	e.put("k", "v") // a change after the cancel reaches no one and breaks nothing

	w = e.watch("k")
	e.put("k", "v2")
	e.fired(w, "watch")
	w.Cancel()
	if err := w.Wait(e.ctx); err != nil {
		e.Errorf("Wait after a fired watch was cancelled: %v, want nil", err)
	}

	// Wait returns the context's error when the context ends first, and
	// the watch still fires afterwards.
	w = e.watch("k")
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	e.wantErr(w.Wait(ctx), context.Canceled, "Wait with a cancelled context")
	e.put("k", "v3")
	e.fired(w, "watch after a Wait gave up")
}

// testWatchSameValue: writing the value a watch already saw is no change.
func testWatchSameValue(e *env) {
	e.put("k", "v1", "control", "c0")
	w := e.watch("k")
	control := e.watch("control")
	e.put("k", "v1", "control", "c1")
	e.fired(control, "control watch")
	e.pending(w, "watch after its key was set to the same value")
	e.put("k", "v2")
	e.fired(w, "watch after a real change")
}

// testWatchOwnWriteBeforeWatch: a value the transaction set before creating
// the watch is the watch's starting value, so committing it does not fire
// the watch; a later change by another transaction does.
func testWatchOwnWriteBeforeWatch(e *env) {
	e.put("k", "v0", "control", "c0")
	var w kv.Watch
	e.transact(func(tx kv.Tx) error {
		tx.Set(e.k("k"), []byte("v1"))
		w = tx.Watch(e.k("k"))
		return nil
	})
	control := e.watch("control")
	e.put("control", "c1")
	e.fired(control, "control watch")
	e.pending(w, "watch after its own transaction committed the value it started from")
	e.put("k", "v2")
	e.fired(w, "watch after another transaction changed the key")
}

// testWatchOwnWriteAfterWatch: a write the watch's own transaction makes
// after creating it fires the watch then, before any commit
// (ReadYourWrites.actor.cpp, triggerWatches), and the watch stays fired
// whatever becomes of the transaction. Writing the value the watch
// started from is no change; an atomic operation always is. (On
// FoundationDB the trigger runs on the client's network thread, so the
// suite waits for it rather than looking the moment the write returns.)
func testWatchOwnWriteAfterWatch(e *env) {
	e.put("k", "v0", "c", "x", "a", "\x01")
	e.rollback(func(tx kv.Tx) error {
		// Each control watch is fired by a write after the writes that must
		// not fire the watches checked; once it fired, those writes were
		// seen.
		control := func(name string) {
			w := tx.Watch(e.k(name))
			tx.Set(e.k(name), []byte("changed"))
			e.fired(w, "control watch fired by its own transaction's write")
		}
		w := tx.Watch(e.k("k"))
		tx.Set(e.k("k"), []byte("v0"))
		control("control1")
		e.pending(w, "watch after its transaction set the value it started from")
		tx.Set(e.k("k"), []byte("v1"))
		e.fired(w, "watch after its own transaction's write, before commit")

		cleared := tx.Watch(e.k("c"))
		absent := tx.Watch(e.k("absent"))
		ranged := tx.Watch(e.k("r/x"))
		tx.Clear(e.k("c"))
		tx.Clear(e.k("absent"))
		tx.ClearRange(e.r("r/"))
		e.fired(cleared, "watch after its own transaction cleared the key")
		control("control2")
		e.pending(absent, "watch after its transaction cleared an absent key")
		e.pending(ranged, "watch after its transaction cleared a range without the key")

		atomic := tx.Watch(e.k("a"))
		tx.Atomic(kv.MutationBitOr, e.k("a"), []byte{0x01}) // leaves the value as it was
		e.fired(atomic, "watch after its own transaction's atomic operation")
		return nil
	})
	// The transaction rolled back; the watch it fired stays fired.
	var w kv.Watch
	err := e.db.Transact(e.ctx, func(tx kv.Tx) error {
		w = tx.Watch(e.k("k"))
		tx.Set(e.k("k"), []byte("v2"))
		e.await(w.Ready(), "watch fired by its own write")
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		e.Fatal(err)
	}
	e.fired(w, "watch fired by its own write, transaction rolled back")
}

// testWatchReadConflict: a watch reads its key with a read conflict, as
// Get does, so a transaction that writes and watches a key another
// transaction changed before its commit conflicts; a key whose value the
// transaction's own write decides adds none.
func testWatchReadConflict(e *env) {
	e.put("k", "v0")
	watchAndWrite := func(name string, own bool) func(tx kv.Transaction) error {
		return func(tx kv.Transaction) error {
			if own {
				tx.Set(e.k(name), []byte("mine"))
			}
			tx.Watch(e.k(name))
			return nil
		}
	}
	e.conflict(e.race(watchAndWrite("k", false), e.setter("k")),
		"transaction that watched a key another transaction then changed")
	e.noConflict(e.race(watchAndWrite("own", true), e.setter("own")),
		"transaction that set a key, then watched it, another transaction changed it")
}

// testWatchReadOnlyCommit: a transaction that only reads and watches
// commits at once, without resolution: it cannot conflict and has no
// versionstamp (no_commit_version); its watches start from what it read
// at its read version, so a change made since fires them at commit.
func testWatchReadOnlyCommit(e *env) {
	e.put("k", "v0", "w", "w0")
	tx := e.begin()
	if _, err := tx.Get(e.k("k")); err != nil {
		e.Fatal(err)
	}
	quiet := tx.Watch(e.k("k"))
	moved := tx.Watch(e.k("w"))
	stamp := tx.Versionstamp()
	e.put("k", "changed-but-read-only", "w", "w1")
	e.put("k", "v0") // back to what it read: the watch on k stays pending
	e.commit(tx, "read-only transaction whose read key changed")
	e.await(stamp.Ready(), "versionstamp of a read-only transaction")
	if _, err := stamp.Get(e.ctx); !errors.Is(err, kv.ErrNoCommitVersion) {
		e.Errorf("versionstamp of a read-only transaction: %v, want no_commit_version", err)
	}
	e.fired(moved, "watch of a read-only transaction on a key changed after its read version")
	control := e.watch("control")
	e.put("control", "c")
	e.fired(control, "control watch")
	e.pending(quiet, "watch on a key changed and changed back after its read version")
	e.put("k", "v1")
	e.fired(quiet, "watch of a read-only transaction after a later change")
}

// testVersionstampAfterCommit: the versionstamp future is taken before
// commit; asked for once the commit started it fails with
// used_during_commit, also after a commit that succeeded (FoundationDB's
// ReadYourWritesTransaction::getVersionstamp). A future taken before a
// commit that failed fails with transaction_invalid_version.
func testVersionstampAfterCommit(e *env) {
	tx := e.begin()
	tx.Set(e.k("k"), []byte("v"))
	e.commit(tx, "a write")
	f := tx.Versionstamp()
	e.await(f.Ready(), "versionstamp asked for after commit")
	if _, err := f.Get(e.ctx); !errors.Is(err, kv.ErrUsedDuringCommit) {
		e.Errorf("versionstamp asked for after a commit: %v, want used_during_commit", err)
	}

	e.put("r", "0")
	tx = e.begin()
	if _, err := tx.Get(e.k("r")); err != nil {
		e.Fatal(err)
	}
	tx.Set(e.k("x"), []byte("x"))
	f = tx.Versionstamp()
	e.put("r", "1")
	e.wantErr(tx.Commit(), kv.ErrNotCommitted, "commit after its read key changed")
	e.await(f.Ready(), "versionstamp of a failed commit")
	if _, err := f.Get(e.ctx); !errors.Is(err, kv.ErrTransactionInvalidVersion) {
		e.Errorf("versionstamp of a commit that conflicted: %v, want transaction_invalid_version", err)
	}
	if _, err := tx.Versionstamp().Get(e.ctx); !errors.Is(err, kv.ErrUsedDuringCommit) {
		e.Errorf("versionstamp asked for after a failed commit: %v, want used_during_commit", err)
	}
}
