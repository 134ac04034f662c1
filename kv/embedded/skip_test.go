package embedded_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// The skip cache lets scans from a range's start seek past deleted keys at
// its head. These tests check it never hides a live key: not one inserted
// into the skipped part later, and not one an older snapshot still sees.
func TestSkipCacheNeverHidesLiveKeys(t *testing.T) {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	defer db.Close()
	ctx := context.Background()
	key := func(i int) []byte { return fmt.Appendf(nil, "q/%04d", i) }
	r := kv.Range{Begin: []byte("q/"), End: []byte("q0")}
	first := func(tr kv.ReadTransactor) string {
		t.Helper()
		kvs, err := kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) ([]kv.KeyValue, error) {
			return tx.GetRange(r, kv.RangeOptions{Limit: 1})
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(kvs) == 0 {
			return ""
		}
		return string(kvs[0].Key)
	}
	bump := func() { // a commit, so the committer admits proposals
		t.Helper()
		if err := db.Transact(ctx, func(tx kv.Tx) error { tx.Add([]byte("tick"), 1); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Transact(ctx, func(tx kv.Tx) error {
		for i := 0; i < 100; i++ {
			tx.Set(key(i), []byte("v"))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// An old snapshot taken while q/0000 is live.
	old, err := db.CreateTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Cancel()

	// Consume the head in steps; each scan learns the new head.
	for i := 0; i < 50; i++ {
		if err := db.Transact(ctx, func(tx kv.Tx) error { tx.Clear(key(i)); return nil }); err != nil {
			t.Fatal(err)
		}
		if got, want := first(db), string(key(i+1)); got != want {
			t.Fatalf("after clearing %d: first %q, want %q", i, got, want)
		}
		bump()
	}
	if got := first(old); got != string(key(0)) {
		t.Fatalf("old snapshot sees first %q, want %q", got, key(0))
	}
	// A key inserted into the skipped head is seen at once.
	if err := db.Transact(ctx, func(tx kv.Tx) error { tx.Set(key(7), []byte("back")); return nil }); err != nil {
		t.Fatal(err)
	}
	if got := first(db); got != string(key(7)) {
		t.Fatalf("after re-inserting q/0007: first %q", got)
	}
	bump()
	// And a key inserted before the range's first live key after a scan at
	// an older version proposed an entry is seen too.
	if err := db.Transact(ctx, func(tx kv.Tx) error { tx.Clear(key(7)); return nil }); err != nil {
		t.Fatal(err)
	}
	stale, err := db.CreateTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Transact(ctx, func(tx kv.Tx) error { tx.Set(key(3), []byte("late")); return nil }); err != nil {
		t.Fatal(err)
	}
	// The stale reader proposes "nothing before q/0050" at its version;
	// the committer must refuse it, since q/0003 was written after.
	if kvs, err := stale.GetRange(r, kv.RangeOptions{Limit: 1}); err != nil || string(kvs[0].Key) != string(key(50)) {
		t.Fatalf("stale reader: %v %v", kvs, err)
	}
	stale.Cancel()
	bump()
	if got := first(db); got != string(key(3)) {
		t.Fatalf("first %q, want %q", got, key(3))
	}
	// Emptying the whole range and refilling it.
	if err := db.Transact(ctx, func(tx kv.Tx) error { tx.ClearRange(r); return nil }); err != nil {
		t.Fatal(err)
	}
	if got := first(db); got != "" {
		t.Fatalf("empty range has %q", got)
	}
	bump()
	if err := db.Transact(ctx, func(tx kv.Tx) error { tx.Set(key(1), []byte("x")); return nil }); err != nil {
		t.Fatal(err)
	}
	if got := first(db); got != string(key(1)) {
		t.Fatalf("refilled range: first %q", got)
	}
}
