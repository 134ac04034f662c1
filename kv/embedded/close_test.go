package embedded

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// TestCloseFailsEveryWatch: Close fails every watch that is still
// pending: those registered, those of transactions still open, and those
// of a read-only transaction whose commit is registering them as Close
// runs; none is left pending and no reservation is left counted.
func TestCloseFailsEveryWatch(t *testing.T) {
	ctx := context.Background()
	for iter := range 20 {
		s, err := Open("", Options{InMemory: true})
		if err != nil {
			t.Fatal(err)
		}
		committing, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		open, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ws := make([]kv.Watch, 0, 2001)
		for i := range 2000 {
			ws = append(ws, committing.Watch(fmt.Appendf(nil, "k%05d", i)))
		}
		ws = append(ws, open.Watch([]byte("k")))
		done := make(chan error, 1)
		go func() { done <- committing.Commit() }()
		// Close at a different point of the registration each time.
		for range iter * 50 {
			if _, err := open.Get([]byte("k")); err != nil {
				break
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		<-done
		for i, w := range ws {
			select {
			case <-w.Ready():
			case <-time.After(10 * time.Second):
				t.Fatalf("iteration %d: watch %d still pending after Close", iter, i)
			}
		}
		if err := ws[len(ws)-1].Wait(ctx); !errors.Is(err, kv.ErrClosed) {
			t.Fatalf("iteration %d: watch of a transaction open at Close: %v, want kv.ErrClosed", iter, err)
		}
		if _, n := s.pinned(); n != 0 {
			t.Fatalf("iteration %d: %d watch reservations counted after Close", iter, n)
		}
	}
}

// TestReadOnlyCommitNeverTooLarge: a transaction that wrote nothing has
// nothing to send, so its commit succeeds however many read conflicts it
// gathered (FoundationDB returns from a read-only commit before it checks
// the size).
func TestReadOnlyCommitNeverTooLarge(t *testing.T) {
	s, err := Open("", Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tx, err := s.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, kv.MaxKeySize)
	for i := range kv.MaxTransactionSize/kv.MaxKeySize + 2 {
		key[0], key[1], key[2] = 'r', byte(i), byte(i>>8)
		if _, err := tx.Get(key); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("read-only commit with over %d bytes of read conflicts: %v", kv.MaxTransactionSize, err)
	}
}
