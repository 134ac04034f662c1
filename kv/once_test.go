package kv_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/kvtest"
)

func openMem(t *testing.T) *embedded.Store {
	t.Helper()
	s, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// plain hides the embedded store's AtMostOnceBackend, so DB.Transact
// writes it commit markers as it would to FoundationDB.
type plain struct{ kv.Backend }

func counter(t *testing.T, db *kv.DB) int64 {
	t.Helper()
	v, err := kv.ReadTransact(context.Background(), db, func(tx kv.ReadTx) ([]byte, error) { return tx.Get([]byte("counter")) })
	if err != nil {
		t.Fatal(err)
	}
	return kv.DecodeInt64(v)
}

// lateCommit answers the first commit with code at once and applies it a
// little later, as FoundationDB's client can after cluster_version_changed
// (the commit it abandoned is still in flight).
type lateCommit struct {
	kv.Backend
	code  int
	mu    sync.Mutex
	fired bool
	late  sync.WaitGroup
}

func (b *lateCommit) Begin(ctx context.Context) (kv.Transaction, error) {
	tx, err := b.Backend.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &lateTx{Transaction: tx, b: b}, nil
}

type lateTx struct {
	kv.Transaction
	b *lateCommit
}

func (t *lateTx) Commit() error {
	t.b.mu.Lock()
	first := !t.b.fired
	t.b.fired = true
	t.b.mu.Unlock()
	if !first {
		return t.Transaction.Commit()
	}
	t.b.late.Add(1)
	go func() {
		defer t.b.late.Done()
		<-time.After(20 * time.Millisecond)
		_ = t.Transaction.Commit()
	}()
	return &kv.Error{Code: t.b.code, Detail: "answered while the commit is in flight"}
}

// TestClusterVersionChangedIsNotResolved: cluster_version_changed may
// come while the commit is still in flight, so reading the marker proves
// nothing; Transact must not run fn again, and says the outcome is
// unknown.
func TestClusterVersionChangedIsNotResolved(t *testing.T) {
	b := &lateCommit{Backend: plain{openMem(t)}, code: kv.CodeClusterVersionChanged}
	db := kv.NewDB(b, kv.Options{})
	runs := 0
	err := db.Transact(context.Background(), func(tx kv.Tx) error { runs++; tx.Add([]byte("counter"), 1); return nil })
	b.late.Wait()
	if !errors.Is(err, kv.ErrCommitUnknownResult) || !kv.IsMaybeCommitted(err) || kv.IsRetryable(err) {
		t.Errorf("Transact after cluster_version_changed: %v, want an unknown outcome, not retryable", err)
	}
	if runs != 1 || counter(t, db) != 1 {
		t.Errorf("fn ran %d times, counter %d: want 1 and 1", runs, counter(t, db))
	}
}

// TestVersionstampAfterTransact: a versionstamp asked for after Transact
// returned fails at once, as a backend answers once the commit started;
// one taken inside fn is the committed attempt's even when the caller's
// context ended right after the commit.
func TestVersionstampAfterTransact(t *testing.T) {
	s := openMem(t)
	db := kv.NewDB(plain{s}, kv.Options{})
	var saved kv.Tx
	if err := db.Transact(context.Background(), func(tx kv.Tx) error { saved = tx; tx.Set([]byte("k"), []byte("v")); return nil }); err != nil {
		t.Fatal(err)
	}
	f := saved.Versionstamp()
	select {
	case <-f.Ready():
		if _, err := f.Get(context.Background()); !errors.Is(err, kv.ErrUsedDuringCommit) {
			t.Errorf("versionstamp asked for after Transact: %v, want used_during_commit", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("versionstamp asked for after Transact never resolves")
	}

	for i := range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		db := kv.NewDB(cancelAfterCommit{plain{s}, cancel}, kv.Options{})
		var f *kv.Future[kv.Versionstamp]
		if err := db.Transact(ctx, func(tx kv.Tx) error {
			tx.Set([]byte("k"), []byte("v"))
			f = tx.Versionstamp()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Get(context.Background()); err != nil {
			t.Fatalf("call %d: versionstamp of a committed call whose context ended after the commit: %v", i, err)
		}
	}
}

// cancelAfterCommit cancels a context right after each commit.
type cancelAfterCommit struct {
	kv.Backend
	cancel context.CancelFunc
}

func (b cancelAfterCommit) Begin(ctx context.Context) (kv.Transaction, error) {
	tx, err := b.Backend.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return cancelTx{tx, b.cancel}, nil
}

type cancelTx struct {
	kv.Transaction
	cancel context.CancelFunc
}

func (t cancelTx) Commit() error { err := t.Transaction.Commit(); t.cancel(); return err }

// TestMarkerDoesNotOverflowTransaction: a call whose own writes fill the
// transaction to the limit commits; what kv adds (the marker, clears of
// old markers) must not push it over.
func TestMarkerDoesNotOverflowTransaction(t *testing.T) {
	db := kv.NewDB(plain{openMem(t)}, kv.Options{})
	ctx := context.Background()
	// Garbage markers to piggyback, from earlier calls.
	for range 10 {
		if err := db.Transact(ctx, func(tx kv.Tx) error { tx.Set([]byte("g"), nil); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	value := bytes.Repeat([]byte("x"), kv.MaxValueSize-8)
	fill := func(tx kv.Tx) error {
		n := 0
		for i := 0; n < kv.MaxTransactionSize; i++ {
			k := binary.BigEndian.AppendUint64(nil, uint64(i))
			v := value[:min(len(value), kv.MaxTransactionSize-n-len(k))]
			tx.Set(k, v)
			n += len(k) + len(v)
		}
		return nil
	}
	if err := db.Transact(ctx, fill); err != nil {
		t.Fatalf("a call whose writes are exactly the transaction limit: %v", err)
	}
}

// TestUnknownWithoutMarkerIsReported: on a backend that needs no markers
// (the embedded store refuses all work after answering
// commit_unknown_result), the call stops at once and says the outcome is
// unknown.
func TestUnknownWithoutMarkerIsReported(t *testing.T) {
	s := openMem(t)
	fb := kvtest.NewFaultyBackend(s, kvtest.FaultOptions{Seed: 1, UnknownAppliedRate: 1})
	db := kv.NewDB(atMostOnce{fb}, kv.Options{})
	runs := 0
	err := db.Transact(context.Background(), func(tx kv.Tx) error { runs++; tx.Add([]byte("counter"), 1); return nil })
	if !errors.Is(err, kv.ErrCommitUnknownResult) || runs != 1 {
		t.Fatalf("Transact: %v after %d runs, want commit_unknown_result after 1", err, runs)
	}
}

type atMostOnce struct{ kv.Backend }

func (atMostOnce) CommitsAtMostOnce() bool { return true }

// What an attempt keeps (kv.Memo) is shared by the operations of that
// attempt, and a retry starts without it: a retry reads at a new version,
// and what the failed attempt read may be stale.
func TestMemoPerAttempt(t *testing.T) {
	db := kv.NewDB(plain{openMem(t)}, kv.Options{})
	type key struct{}
	attempts, made := 0, 0
	mk := func() any { made++; return new(int) }
	err := db.Transact(context.Background(), func(tx kv.Tx) error {
		attempts++
		a := kv.Memo(tx, key{}, mk).(*int)
		var b *int
		if err := tx.Transact(context.Background(), func(tx kv.Tx) error {
			b = kv.Memo(tx, key{}, mk).(*int)
			return nil
		}); err != nil {
			return err
		}
		if a != b {
			t.Fatal("two operations of one attempt got two values")
		}
		if *a != 0 {
			t.Fatalf("attempt %d found the value of an earlier attempt", attempts)
		}
		*a = attempts
		if attempts == 1 {
			return kv.ErrNotCommitted // retried
		}
		return nil
	})
	if err != nil || attempts != 2 || made != 2 {
		t.Fatalf("err %v, %d attempts, %d values made; want nil, 2, 2", err, attempts, made)
	}
	if v := kv.Memo(nil, key{}, func() any { return 7 }); v != 7 {
		t.Fatalf("Memo of a Tx that keeps nothing: %v", v)
	}
}
