package embedded

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// pinned returns how many snapshots transactions hold and how many watches
// are counted against the limit.
func (s *Store) pinned() (snapshots, watches int) {
	s.mu.Lock()
	for _, r := range s.mu.live {
		snapshots += r.refs
	}
	s.mu.Unlock()
	s.watches.mu.Lock()
	watches = s.watches.count
	s.watches.mu.Unlock()
	return snapshots, watches
}

// TestAbandonedTransactionExpires: a transaction that is neither committed
// nor cancelled gives up its snapshot and its watches' reservations once
// it outlives the transaction lifetime; its watch fails with
// transaction_too_old, and so does every later use of it.
func TestAbandonedTransactionExpires(t *testing.T) {
	const lifetime = 100 * time.Millisecond
	s, err := Open("", Options{InMemory: true, TransactionLifetime: lifetime, MaxWatches: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := kv.NewDB(s, kv.Options{})
	ctx := context.Background()
	if err := db.Transact(ctx, func(tx kv.Tx) error { tx.Set([]byte("k"), []byte("v")); return nil }); err != nil {
		t.Fatal(err)
	}

	abandoned, err := db.CreateTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := abandoned.Get([]byte("k")); err != nil {
		t.Fatal(err)
	}
	w1, w2 := abandoned.Watch([]byte("k")), abandoned.Watch([]byte("other"))
	// A later commit makes the abandoned transaction's snapshot an old one.
	if err := db.Transact(ctx, func(tx kv.Tx) error { tx.Set([]byte("k"), []byte("v2")); return nil }); err != nil {
		t.Fatal(err)
	}
	if snaps, watches := s.pinned(); snaps != 1 || watches != 2 {
		t.Fatalf("open transaction pins %d snapshots and %d watches, want 1 and 2", snaps, watches)
	}
	for _, w := range []kv.Watch{w1, w2} {
		select {
		case <-w.Ready():
		case <-time.After(10 * time.Second):
			t.Fatal("watch of an abandoned transaction still pending 10 s after its lifetime")
		}
		if err := w.Wait(ctx); !errors.Is(err, kv.ErrTransactionTooOld) {
			t.Fatalf("watch of an expired transaction: %v, want transaction_too_old", err)
		}
	}
	// The watches fail inside the expiry, under the transaction's lock:
	// once a read of it returns, the expiry is over.
	if _, err := abandoned.Get([]byte("k")); !errors.Is(err, kv.ErrTransactionTooOld) {
		t.Fatalf("read of an expired transaction: %v, want transaction_too_old", err)
	}
	if snaps, watches := s.pinned(); snaps != 0 || watches != 0 {
		t.Fatalf("after the lifetime, %d snapshots and %d watches are still held", snaps, watches)
	}
	abandoned.Set([]byte("k"), []byte("late"))
	if err := abandoned.Commit(); !errors.Is(err, kv.ErrTransactionTooOld) {
		t.Fatalf("commit of an expired transaction: %v, want transaction_too_old", err)
	}
	// The reservations are back: the watch limit of 2 admits two more.
	if err := db.Transact(ctx, func(tx kv.Tx) error {
		tx.Watch([]byte("a")).Cancel()
		tx.Watch([]byte("b")).Cancel()
		return nil
	}); err != nil {
		t.Fatalf("watches after the expired ones were released: %v", err)
	}
}
