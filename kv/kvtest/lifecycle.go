package kvtest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// testRetryLimit: a function that conflicts on every attempt runs once plus
// RetryLimit times, then Transact gives up with an error that matches
// ErrRetryLimit and the last attempt's error.
func testRetryLimit(e *env) {
	db := kv.NewDB(e.db.Backend(), kv.Options{RetryLimit: 3, MaxBackoff: 10 * time.Millisecond})
	e.put("k", "0")
	runs := 0
	err := db.Transact(e.ctx, func(tx kv.Tx) error {
		runs++
		if _, err := tx.Get(e.k("k")); err != nil {
			return err
		}
		// Another transaction overwrites the key after this one read it:
		// a real conflict at this one's commit, every time.
		if err := e.db.Transact(e.ctx, func(tx2 kv.Tx) error {
			tx2.Set(e.k("k"), []byte(fmt.Sprint(runs)))
			return nil
		}); err != nil {
			return fmt.Errorf("kvtest: the interfering transaction: %w", err)
		}
		tx.Set(e.k("never"), []byte("x"))
		return nil
	})
	if !errors.Is(err, kv.ErrRetryLimit) {
		e.Fatalf("Transact = %v, want an error matching kv.ErrRetryLimit", err)
	}
	// Injected faults may replace the last conflict with another retryable
	// error.
	if !errors.Is(err, kv.ErrNotCommitted) && !(e.f.Faults && kv.IsRetryable(errors.Unwrap(err))) {
		e.Errorf("Transact = %v, want it to wrap not_committed", err)
	}
	var rl *kv.RetryLimitError
	if errors.As(err, &rl) && rl.Attempts != 4 {
		e.Errorf("RetryLimitError.Attempts = %d, want 4", rl.Attempts)
	}
	if runs != 4 {
		e.Errorf("fn ran %d times, want 4 (1 + RetryLimit 3)", runs)
	}
	e.wantValue("never", nil)
}

// testContextCancelled: a context cancelled while the function runs stops
// the transaction: nothing commits and Transact's error matches
// context.Canceled. A context cancelled before Transact runs nothing.
func testContextCancelled(e *env) {
	ctx, cancel := context.WithCancel(e.ctx)
	err := e.db.Transact(ctx, func(tx kv.Tx) error {
		if _, err := tx.Get(e.k("k")); err != nil {
			return err
		}
		tx.Set(e.k("k"), []byte("before cancel"))
		cancel()
		tx.Set(e.k("k2"), []byte("after cancel"))
		return nil
	})
	e.wantErr(err, context.Canceled, "Transact whose context was cancelled inside fn")
	e.wantKeys(e.all())

	runs := 0
	err = e.db.Transact(ctx, func(tx kv.Tx) error {
		runs++
		tx.Set(e.k("k"), []byte("v"))
		return nil
	})
	e.wantErr(err, context.Canceled, "Transact with a cancelled context")
	if runs != 0 {
		e.Errorf("fn ran %d times with a cancelled context, want 0", runs)
	}
	e.wantKeys(e.all())
}

// testContextCancelledDuringBackoff: cancelling the context while Transact
// sleeps before a retry ends it promptly.
func testContextCancelledDuringBackoff(e *env) {
	// Backoffs drawn up to a minute: the test's cancel lands in one of them.
	db := kv.NewDB(e.db.Backend(), kv.Options{InitialBackoff: time.Minute, MaxBackoff: time.Minute})
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ran := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- db.Transact(ctx, func(tx kv.Tx) error {
			select {
			case ran <- struct{}{}:
			default:
			}
			return kv.ErrNotCommitted.WithDetail("kvtest: forced retry")
		})
	}()
	select {
	case <-ran:
	case <-time.After(waitTimeout):
		e.Fatal("fn never ran")
	}
	cancel()
	const prompt = 5 * time.Second
	select {
	case err := <-done:
		e.wantErr(err, context.Canceled, "Transact cancelled during backoff")
	case <-time.After(prompt):
		e.Fatalf("Transact still running %v after its context was cancelled during backoff", prompt)
	}
}

// usedAfterEnd fails the test unless err is the *kv.Error FoundationDB
// gives for using a transaction that has committed.
func (e *env) usedAfterEnd(err error, what string) {
	e.Helper()
	var kerr *kv.Error
	if !errors.As(err, &kerr) || !(errors.Is(err, kv.ErrClientInvalidOperation) || errors.Is(err, kv.ErrUsedDuringCommit)) {
		e.Errorf("%s after commit: err = %v, want client_invalid_operation or used_during_commit", what, err)
	}
}

// testUseAfterCommit: a committed transaction cannot be used again, and
// trying changes nothing.
func testUseAfterCommit(e *env) {
	tx := e.begin()
	tx.Set(e.k("k"), []byte("v"))
	e.commit(tx, "first commit")

	_, err := tx.Get(e.k("k"))
	e.usedAfterEnd(err, "Get")
	_, err = tx.GetRange(e.all(), kv.RangeOptions{})
	e.usedAfterEnd(err, "GetRange")
	it := tx.Iterate(e.all(), kv.RangeOptions{})
	for it.Next() {
	}
	e.usedAfterEnd(it.Err(), "Iterate")
	tx.Set(e.k("k"), []byte("changed"))
	tx.Set(e.k("k2"), []byte("v2"))
	e.usedAfterEnd(tx.Commit(), "Commit")

	e.wantValue("k", []byte("v"))
	e.wantValue("k2", nil)
	e.put("k3", "v3") // the store still works
	e.wantKeys(e.all(), "k", "k3")
}

// testUseAfterCancel: a cancelled transaction fails every later operation
// with transaction_cancelled and commits nothing.
func testUseAfterCancel(e *env) {
	tx := e.begin()
	tx.Set(e.k("k"), []byte("v"))
	tx.Cancel()
	_, err := tx.Get(e.k("k"))
	e.wantErr(err, kv.ErrTransactionCancelled, "Get after Cancel")
	_, err = tx.GetRange(e.all(), kv.RangeOptions{})
	e.wantErr(err, kv.ErrTransactionCancelled, "GetRange after Cancel")
	e.wantErr(tx.Commit(), kv.ErrTransactionCancelled, "Commit after Cancel")
	e.wantKeys(e.all())
}

// addItem is a transactional function written against kv.Transactor: it
// runs on its own when given a DB, or inside the caller's transaction when
// given a Tx.
func addItem(ctx context.Context, t kv.Transactor, key, value []byte) error {
	return t.Transact(ctx, func(tx kv.Tx) error {
		tx.Set(key, value)
		return nil
	})
}

// countItems is a read-only transactional function.
func countItems(ctx context.Context, t kv.ReadTransactor, r kv.Range) (int, error) {
	return kv.ReadTransact(ctx, t, func(tx kv.ReadTx) (int, error) {
		kvs, err := tx.GetRange(r, kv.RangeOptions{})
		return len(kvs), err
	})
}

// testComposition: transactional functions compose: inside a caller's
// transaction they commit or roll back with it.
func testComposition(e *env) {
	items := e.r("item/")
	if err := addItem(e.ctx, e.db, e.k("item/1"), []byte("alone")); err != nil {
		e.Fatal(err)
	}
	e.wantValue("item/1", []byte("alone"))

	errAbort := errors.New("kvtest: abort")
	err := e.db.Transact(e.ctx, func(tx kv.Tx) error {
		if err := addItem(e.ctx, tx, e.k("item/2"), []byte("rolled back")); err != nil {
			return err
		}
		return errAbort
	})
	e.wantErr(err, errAbort, "outer function failing after the inner one wrote")
	e.wantValue("item/2", nil)

	n, err := kv.Transact(e.ctx, e.db, func(tx kv.Tx) (int, error) {
		for _, i := range []string{"3", "4"} {
			if err := addItem(e.ctx, tx, e.k("item/"+i), []byte("together")); err != nil {
				return 0, err
			}
		}
		// The caller's transaction sees what the functions wrote, through
		// itself and through a nested read-only function.
		if err := e.expectGet(tx, e.k("item/3"), []byte("together")); err != nil {
			return 0, err
		}
		return countItems(e.ctx, tx, items)
	})
	if err != nil {
		e.Fatal(err)
	}
	if n != 3 {
		e.Errorf("kv.Transact returned %d items, want 3", n)
	}
	e.wantKeys(items, "item/1", "item/3", "item/4")
	if n, err := countItems(e.ctx, e.db, items); err != nil || n != 3 {
		e.Errorf("countItems on the DB = %d, %v; want 3", n, err)
	}

	// Tx.ReadTransact and Snapshot().ReadTransact run in the same
	// transaction too.
	e.rollback(func(tx kv.Tx) error {
		tx.Set(e.k("item/5"), []byte("own"))
		for _, view := range []struct {
			name string
			t    kv.ReadTransactor
		}{{"transaction", tx}, {"snapshot view", tx.Snapshot()}} {
			n, err := countItems(e.ctx, view.t, items)
			if err != nil {
				return err
			}
			if n != 4 {
				return fmt.Errorf("kvtest: countItems in the %s = %d, want 4", view.name, n)
			}
		}
		return nil
	})
}
