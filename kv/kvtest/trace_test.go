package kvtest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/kvtest"
	"github.com/jobstage/jobstage/kv/tuple"
)

// tracing returns a DB over a TracingBackend over a fresh in-memory store.
func tracing(t *testing.T, o kv.Options) (*kv.DB, *kvtest.TracingBackend) {
	t.Helper()
	return kvtest.NewTracingDB(open(t, true), o)
}

func TestTraceRecordsCommittedWrites(t *testing.T) {
	db, tr := tracing(t, kv.Options{})
	ctx := context.Background()
	key := []byte("k/set")
	stampedKey, err := tuple.Tuple{"k", "vs", tuple.IncompleteVersionstamp(7)}.PackWithVersionstamp(nil)
	if err != nil {
		t.Fatal(err)
	}
	var stamp *kv.Future[kv.Versionstamp]
	err = db.Transact(ctx, func(tx kv.Tx) error {
		tx.Set(key, []byte("value"))
		tx.Clear([]byte("k/clear"))
		tx.ClearRange(kv.Range{Begin: []byte("k/range/"), End: []byte("k/range0")})
		tx.Add([]byte("k/add"), 1)
		tx.Atomic(kv.MutationMax, []byte("k/max"), kv.EncodeInt64(3))
		tx.SetVersionstampedValue([]byte("k/vsv"), make([]byte, 14))
		tx.SetVersionstampedKey(stampedKey, []byte("x"))
		// A nested function's writes go through the wrapper too.
		if err := tx.Transact(ctx, func(tx kv.Tx) error {
			tx.Set([]byte("k/nested"), nil)
			return nil
		}); err != nil {
			return err
		}
		stamp = tx.Versionstamp()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	key[0] = 'X' // the trace holds its own copies

	vs, err := stamp.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	txns := tr.Take()
	if len(txns) != 1 {
		t.Fatalf("%d transactions traced, want 1", len(txns))
	}
	if txns[0].Stamp != vs {
		t.Errorf("stamp %x, want the commit's %x", txns[0].Stamp, vs)
	}
	// The versionstamped key as stored.
	var stored []byte
	err = db.ReadTransact(ctx, func(tx kv.ReadTx) error {
		kvs, err := tx.GetRange(tuple.Sub("k", "vs").Range(), kv.RangeOptions{})
		if err == nil && len(kvs) == 1 {
			stored = kvs[0].Key
		}
		return err
	})
	if err != nil || stored == nil {
		t.Fatalf("reading the versionstamped key back: %v", err)
	}
	want := []struct {
		kind kvtest.WriteKind
		op   kv.MutationType
		key  string
		size int32
	}{
		{kvtest.WriteSet, 0, "k/set", 5},
		{kvtest.WriteClear, 0, "k/clear", 0},
		{kvtest.WriteClearRange, 0, "k/range/", 0},
		{kvtest.WriteAtomic, kv.MutationAdd, "k/add", 8},
		{kvtest.WriteAtomic, kv.MutationMax, "k/max", 8},
		{kvtest.WriteVersionstampedValue, 0, "k/vsv", 10},
		{kvtest.WriteVersionstampedKey, 0, string(stored), 1},
		{kvtest.WriteSet, 0, "k/nested", 0},
	}
	ws := txns[0].Writes
	if len(ws) != len(want) {
		t.Fatalf("%d writes traced, want %d: %+v", len(ws), len(want), ws)
	}
	for i, w := range want {
		got := ws[i]
		if got.Kind != w.kind || got.Op != w.op || string(got.Key) != w.key || got.Size != w.size {
			t.Errorf("write %d: %v %v %q size %d, want %v %v %q size %d", i, got.Kind, got.Op, got.Key, got.Size, w.kind, w.op, w.key, w.size)
		}
	}
	if n := tr.Writes(); n != int64(len(want)) {
		t.Errorf("Writes() = %d, want %d", n, len(want))
	}
	if again := tr.Take(); len(again) != 0 {
		t.Errorf("a second Take returned %d transactions, want none", len(again))
	}
}

func TestTraceLeavesOutWhatDidNotCommit(t *testing.T) {
	db, tr := tracing(t, kv.Options{})
	ctx := context.Background()
	boom := errors.New("boom")
	if err := db.Transact(ctx, func(tx kv.Tx) error {
		tx.Set([]byte("failed"), nil)
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	tx, err := db.CreateTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx.Set([]byte("cancelled"), nil)
	tx.Cancel()

	// A conflict: b reads what a writes after b's read version.
	a, _ := db.CreateTransaction(ctx)
	b, _ := db.CreateTransaction(ctx)
	if _, err := b.Get([]byte("contended")); err != nil {
		t.Fatal(err)
	}
	a.Set([]byte("contended"), []byte("a"))
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Set([]byte("conflicted"), nil)
	if err := b.Commit(); !errors.Is(err, kv.ErrNotCommitted) {
		t.Fatalf("b's commit: %v, want a conflict", err)
	}
	// A read-only transaction has nothing to trace.
	if err := db.Transact(ctx, func(tx kv.Tx) error { _, err := tx.Get([]byte("x")); return err }); err != nil {
		t.Fatal(err)
	}

	txns := tr.Take()
	if len(txns) != 1 || len(txns[0].Writes) != 1 || string(txns[0].Writes[0].Key) != "contended" {
		t.Fatalf("traced %+v, want a's write alone", txns)
	}
}

func TestTraceConcurrentCommitsInOrder(t *testing.T) {
	db, tr := tracing(t, kv.Options{})
	ctx := context.Background()
	const workers, each = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				err := db.Transact(ctx, func(tx kv.Tx) error {
					tx.Add([]byte("counter"), 1)
					tx.Set(fmt.Appendf(nil, "w/%d/%d", w, i), nil)
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	txns := tr.Take()
	if len(txns) != workers*each {
		t.Fatalf("%d transactions traced, want %d", len(txns), workers*each)
	}
	seen := make(map[string]bool)
	for i, txn := range txns {
		if i > 0 && bytes.Compare(txns[i-1].Stamp[:], txn.Stamp[:]) >= 0 {
			t.Fatalf("transaction %d's stamp %x does not follow %x", i, txn.Stamp, txns[i-1].Stamp)
		}
		if len(txn.Writes) != 2 {
			t.Fatalf("transaction %d has %d writes, want 2", i, len(txn.Writes))
		}
		seen[string(txn.Writes[1].Key)] = true
	}
	if len(seen) != workers*each {
		t.Errorf("%d distinct keys traced, want %d", len(seen), workers*each)
	}
}

func TestTraceCommitMarkersFollowTheInnerBackend(t *testing.T) {
	ctx := context.Background()
	for _, always := range []bool{false, true} {
		db, tr := tracing(t, kv.Options{AlwaysMarkers: always})
		if !tr.CommitsAtMostOnce() {
			t.Fatal("the embedded store commits at most once; the wrapper says otherwise")
		}
		if err := db.Transact(ctx, func(tx kv.Tx) error { tx.Set([]byte("k"), nil); return nil }); err != nil {
			t.Fatal(err)
		}
		txns := tr.Take()
		markers := 0
		for _, w := range txns[0].Writes {
			// The marker itself; a sweep of old ones may come with it.
			if w.Kind == kvtest.WriteVersionstampedValue && bytes.HasPrefix(w.Key, kv.DefaultMarkerPrefix) {
				markers++
			}
		}
		if want := map[bool]int{false: 0, true: 1}[always]; markers != want {
			t.Errorf("AlwaysMarkers %v: %d commit markers traced, want %d", always, markers, want)
		}
	}
}

// BenchmarkTraceWrites measures what tracing adds to a transaction of ten
// writes: compare with BenchmarkTraceWrites/off.
func BenchmarkTraceWrites(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			s := openBench(b)
			db := kv.NewDB(s, kv.Options{})
			if on {
				db, _ = kvtest.NewTracingDB(db, kv.Options{})
			}
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				err := db.Transact(ctx, func(tx kv.Tx) error {
					for j := range 10 {
						tx.Set(fmt.Appendf(nil, "bench/%d/%d", i, j), []byte("v"))
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// openBench returns a fresh in-memory store, closed when b ends.
func openBench(b *testing.B) kv.Backend {
	b.Helper()
	s, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}
