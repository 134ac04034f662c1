package kvtest

import (
	"context"
	"errors"
	"fmt"

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

// testWatchOwnWriteAfterWatch: FoundationDB reports a change the watch's own
// transaction makes after creating it (the watch started from the value
// the transaction read), so the watch fires by the time the transaction
// has committed, with no other writer.
func testWatchOwnWriteAfterWatch(e *env) {
	e.put("k", "v0")
	var w kv.Watch
	attempt := 0
	e.transact(func(tx kv.Tx) error {
		// A value of its own per attempt: a retry after a commit that
		// applied still changes the key from what the attempt read.
		attempt++
		w = tx.Watch(e.k("k"))
		tx.Set(e.k("k"), []byte(fmt.Sprintf("v1-%d", attempt)))
		return nil
	})
	e.fired(w, "watch whose own transaction changed the key after creating it")
}
