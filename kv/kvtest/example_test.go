package kvtest_test

import (
	"context"
	"fmt"
	"log"
	"testing"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/kvtest"
)

// A backend's author runs the suite from a test of the backend's package,
// once as it is and once under injected faults. (An Example cannot be
// given a *testing.T: this one is compiled, not run.) newDB returns a fresh
// store per test here; it could as well return one shared database,
// since every test works under a key prefix of its own.
func ExampleRun() {
	newDB := func(t *testing.T) *kv.DB {
		st, err := embedded.Open(t.TempDir(), embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		db := kv.NewDB(st, kv.Options{})
		t.Cleanup(func() { db.Close() })
		return db
	}
	// The lifetime the backend enforces: the too-old tests wait just past
	// it.
	features := kvtest.Features{TransactionLifetime: embedded.DefaultTransactionLifetime}

	// In the backend's _test.go file:
	//
	//	func TestConformance(t *testing.T) { kvtest.Run(t, newDB, features) }
	//	func TestConformanceFaulty(t *testing.T) { kvtest.RunFaulty(t, newDB, features) }
	_, _ = newDB, features
}

// A layer's own tests run through the same faults as the suite: a
// FaultyBackend makes commits conflict and answer commit_unknown_result,
// applied or not, and DB.Transact still commits each call exactly once.
func Example() {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	defer db.Close()
	faulty, fb := kvtest.NewFaultyDB(db, kvtest.FaultOptions{
		Seed:                  1, // the same seed gives the same faults
		ConflictRate:          0.2,
		UnknownNotAppliedRate: 0.1,
		UnknownAppliedRate:    0.2,
	})
	defer faulty.Close()
	ctx := context.Background()

	for range 100 {
		err := faulty.Transact(ctx, func(tx kv.Tx) error {
			v, err := tx.Get([]byte("count"))
			if err != nil {
				return err
			}
			tx.Set([]byte("count"), kv.EncodeInt64(kv.DecodeInt64(v)+1))
			return nil
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	v, err := kv.ReadTransact(ctx, db, func(tx kv.ReadTx) ([]byte, error) {
		return tx.Get([]byte("count"))
	})
	if err != nil {
		log.Fatal(err)
	}
	c := fb.Counts()
	fmt.Println("count:", kv.DecodeInt64(v))
	fmt.Println("faults injected:", c.Conflicts > 0, c.UnknownNotApplied > 0, c.UnknownApplied > 0)
	// Output:
	// count: 100
	// faults injected: true true true
}
