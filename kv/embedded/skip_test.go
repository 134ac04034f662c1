package embedded_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
)

// The skip cache lets scans from a range's start seek past deleted keys at
// its head. These tests check it never hides a live key: not one inserted
// into the skipped part later, and not one an older snapshot still sees.
func TestSkipCacheNeverHidesLiveKeys(t *testing.T) {
	db := jobtest.OpenDB(t)
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

// Transactions that set many keys at once, among them versionstamped
// ones (which reach the committer after the others, out of key order),
// over ranges that scans from many starts have learnt: every scan still
// finds the first live key after its start. (The committer shortens each
// skip entry to the least key a batch sets inside it; a search that
// assumed the keys sorted would miss one.) Seeded: JOBSTAGE_SEED replays
// a failure.
func TestSkipCacheManyBeginsAndUnorderedSets(t *testing.T) {
	seed := jobtest.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	db := jobtest.OpenDB(t)
	ctx := context.Background()
	const n = 400
	key := func(i int) string { return fmt.Sprintf("q/%04d", i) }
	end := []byte("q0")
	live := map[string]bool{}
	firstFrom := func(b string) string {
		first := ""
		for k := range live {
			if k >= b && (first == "" || k < first) {
				first = k
			}
		}
		return first
	}
	scan := func(r kv.Range, limit int) []kv.KeyValue {
		t.Helper()
		kvs, err := kv.ReadTransact(ctx, db, func(tx kv.ReadTx) ([]kv.KeyValue, error) {
			return tx.GetRange(r, kv.RangeOptions{Limit: limit})
		})
		if err != nil {
			t.Fatal(err)
		}
		return kvs
	}
	begins := make([]string, 40)
	for i := range begins {
		begins[i] = key(rng.IntN(n))
	}
	for round := range 300 {
		set, clear := map[string]bool{}, map[string]bool{}
		for range 1 + rng.IntN(30) {
			set[key(rng.IntN(n))] = true
		}
		for range rng.IntN(40) {
			if k := key(rng.IntN(n)); !set[k] {
				clear[k] = true
			}
		}
		stamped := -1
		if rng.IntN(2) == 0 {
			stamped = rng.IntN(n)
		}
		if err := db.Transact(ctx, func(tx kv.Tx) error {
			for k := range set {
				tx.Set([]byte(k), []byte("v"))
			}
			for k := range clear {
				tx.Clear([]byte(k))
			}
			if stamped >= 0 {
				prefix := key(stamped) + "/"
				k := append([]byte(prefix), make([]byte, 10)...)
				k = binary.LittleEndian.AppendUint32(k, uint32(len(prefix)))
				tx.SetVersionstampedKey(k, []byte("stamped"))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for k := range set {
			live[k] = true
		}
		for k := range clear {
			delete(live, k)
		}
		if stamped >= 0 {
			prefix := key(stamped) + "/"
			for _, e := range scan(kv.Range{Begin: []byte(prefix), End: []byte(key(stamped) + "0")}, 0) {
				live[string(e.Key)] = true
			}
		}
		for _, b := range begins {
			got := ""
			if kvs := scan(kv.Range{Begin: []byte(b), End: end}, 1); len(kvs) > 0 {
				got = string(kvs[0].Key)
			}
			if want := firstFrom(b); got != want {
				t.Fatalf("seed %d, round %d: a scan from %s found %q, want %q", seed, round, b, got, want)
			}
		}
	}
}
