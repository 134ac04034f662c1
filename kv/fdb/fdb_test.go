//go:build fdb

package fdb_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jobstage/jobstage/kv"
	kvfdb "github.com/jobstage/jobstage/kv/fdb"
	"github.com/jobstage/jobstage/kv/kvtest"
)

// clusterFile returns the cluster file to test against, or skips the test.
func clusterFile(t *testing.T) string {
	t.Helper()
	cf := os.Getenv("JOBSTAGE_FDB_CLUSTER_FILE")
	if cf == "" {
		t.Skip("JOBSTAGE_FDB_CLUSTER_FILE is not set: set it to the cluster file of a " +
			"FoundationDB 7.3+ cluster (e.g. /etc/foundationdb/fdb.cluster) to run these tests")
	}
	return cf
}

func open(t *testing.T) *kvfdb.Store {
	t.Helper()
	s, err := kvfdb.Open(clusterFile(t), kvfdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	clusterFile(t)
	newDB := func(t *testing.T) *kv.DB {
		return kv.NewDB(open(t), kv.Options{})
	}
	kvtest.Run(t, newDB, kvtest.Features{TransactionLifetime: 5 * time.Second})
}

// TestConformanceFaulty runs the suite through the fault injector on a
// cluster: commit-once and every retry path against FoundationDB itself.
func TestConformanceFaulty(t *testing.T) {
	clusterFile(t)
	newDB := func(t *testing.T) *kv.DB {
		return kv.NewDB(open(t), kv.Options{})
	}
	kvtest.RunFaulty(t, newDB, kvtest.Features{TransactionLifetime: 5 * time.Second})
}

// A transaction whose context ends fails with an error that matches both
// the context's error and transaction_cancelled.
func TestContextCancelsTransaction(t *testing.T) {
	s := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Cancel()
	cancel()
	// The cancellation runs on its own goroutine: wait for it to land.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err = tx.Get([]byte("jobstage-kvfdb-test"))
		if err != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, kv.ErrTransactionCancelled) {
		t.Fatalf("Get after ctx cancel: %v, want context.Canceled and transaction_cancelled", err)
	}
}

// Stores on one cluster file share the bindings' database handle; closing
// one leaves the other usable, and Close fails the Store's transactions.
func TestSharedHandleAndClose(t *testing.T) {
	a, b := open(t), open(t)
	ctx := context.Background()
	tx, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Get([]byte("jobstage-kvfdb-test")); !errors.Is(err, kv.ErrClosed) || !errors.Is(err, kv.ErrTransactionCancelled) {
		t.Fatalf("Get after Close: %v, want kv.ErrClosed and transaction_cancelled", err)
	}
	if _, err := a.Begin(ctx); !errors.Is(err, kv.ErrClosed) {
		t.Fatalf("Begin after Close: %v, want kv.ErrClosed", err)
	}
	err = kv.NewDB(b, kv.Options{}).ReadTransact(ctx, func(tx kv.ReadTx) error {
		_, err := tx.Get([]byte("jobstage-kvfdb-test"))
		return err
	})
	if err != nil {
		t.Fatalf("read through the other Store: %v", err)
	}
}

func TestInvalidMutationType(t *testing.T) {
	s := open(t)
	tx, err := s.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Cancel()
	tx.Atomic(kv.MutationType(99), []byte("jobstage-kvfdb-test"), []byte{1})
	if _, err := tx.Get([]byte("jobstage-kvfdb-test")); !errors.Is(err, kv.ErrInvalidMutationType) {
		t.Fatalf("Get: %v, want invalid_mutation_type", err)
	}
	if err := tx.Commit(); !errors.Is(err, kv.ErrInvalidMutationType) {
		t.Fatalf("Commit: %v, want invalid_mutation_type", err)
	}
}
