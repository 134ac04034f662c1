package embedded

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// panicValue is what the transactional functions of TestPanicCancelsTransaction
// panic with: a pointer, so the test can tell the very value from a copy.
type panicValue struct{ entry string }

// TestPanicCancelsTransaction: a transactional function that panics, through
// any entry point, leaves no transaction open — no snapshot pinned in the
// store, none open in Pebble once a later commit moved on — and the panic
// reaches the caller with its own value; the store then works as before.
func TestPanicCancelsTransaction(t *testing.T) {
	// A lifetime the test never reaches, so that the expiry timer cannot
	// release a leaked snapshot before it is counted.
	s, err := Open("", Options{InMemory: true, TransactionLifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := kv.NewDB(s, kv.Options{})
	ctx := context.Background()
	key := []byte("k")

	entries := []struct {
		name string
		run  func(v *panicValue)
	}{
		{"DB.Transact", func(v *panicValue) {
			db.Transact(ctx, func(tx kv.Tx) error {
				tx.Set(key, []byte("panicked"))
				if _, err := tx.Get(key); err != nil {
					return err
				}
				panic(v)
			})
		}},
		{"DB.ReadTransact", func(v *panicValue) {
			db.ReadTransact(ctx, func(tx kv.ReadTx) error {
				if _, err := tx.Get(key); err != nil {
					return err
				}
				panic(v)
			})
		}},
		{"kv.Transact", func(v *panicValue) {
			kv.Transact(ctx, db, func(tx kv.Tx) (int, error) {
				tx.Set(key, []byte("panicked"))
				panic(v)
			})
		}},
		{"kv.ReadTransact", func(v *panicValue) {
			kv.ReadTransact(ctx, db, func(tx kv.ReadTx) (int, error) {
				if _, err := tx.Get(key); err != nil {
					return 0, err
				}
				panic(v)
			})
		}},
		{"Tx.Transact", func(v *panicValue) {
			db.Transact(ctx, func(tx kv.Tx) error {
				return tx.Transact(ctx, func(tx kv.Tx) error {
					tx.Set(key, []byte("panicked"))
					panic(v)
				})
			})
		}},
		{"Tx.Snapshot.ReadTransact", func(v *panicValue) {
			db.Transact(ctx, func(tx kv.Tx) error {
				return tx.Snapshot().ReadTransact(ctx, func(tx kv.ReadTx) error {
					if _, err := tx.Get(key); err != nil {
						return err
					}
					panic(v)
				})
			})
		}},
	}
	for i, e := range entries {
		t.Run(e.name, func(t *testing.T) {
			want := &panicValue{entry: e.name}
			if got := recovered(func() { e.run(want) }); got != want {
				t.Fatalf("recovered %#v, want the function's own panic value %p", got, want)
			}
			if snaps, _ := s.pinned(); snaps != 0 {
				t.Fatalf("after the panic transactions pin %d snapshots, want 0", snaps)
			}

			// The store goes on: a write commits and is read back, and
			// the panicking function's write is nowhere.
			val := []byte{byte(i)}
			if err := db.Transact(ctx, func(tx kv.Tx) error { tx.Set(key, val); return nil }); err != nil {
				t.Fatalf("transaction after the panic: %v", err)
			}
			got, err := kv.ReadTransact(ctx, db, func(tx kv.ReadTx) ([]byte, error) { return tx.Get(key) })
			if err != nil || string(got) != string(val) {
				t.Fatalf("read after the panic: %q, %v; want %q", got, err, val)
			}
			// The commit published a new snapshot and closed every older
			// one that no transaction holds: only the current one is open.
			if n := s.db.Metrics().Snapshots.Count; n != 1 {
				t.Fatalf("Pebble has %d open snapshots, want 1 (the current version's)", n)
			}
		})
	}
}

// TestPanicFailsVersionstamp: a versionstamp future taken in a function
// that panicked is ready at once with transaction_cancelled, so nobody
// waits on it forever.
func TestPanicFailsVersionstamp(t *testing.T) {
	s, err := Open("", Options{InMemory: true, TransactionLifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := kv.NewDB(s, kv.Options{})
	ctx := context.Background()

	var stamp *kv.Future[kv.Versionstamp]
	want := &panicValue{entry: "versionstamp"}
	got := recovered(func() {
		db.Transact(ctx, func(tx kv.Tx) error {
			tx.Set([]byte("k"), []byte("v"))
			stamp = tx.Versionstamp()
			panic(want)
		})
	})
	if got != want {
		t.Fatalf("recovered %#v, want %p", got, want)
	}
	select {
	case <-stamp.Ready():
	default:
		t.Fatal("the versionstamp of a call whose function panicked is not ready")
	}
	if _, err := stamp.Get(ctx); !errors.Is(err, kv.ErrTransactionCancelled) {
		t.Fatalf("versionstamp after the panic: %v, want transaction_cancelled", err)
	}
}

// recovered runs f and returns the value it panicked with (nil if none).
func recovered(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}
