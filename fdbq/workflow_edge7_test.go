package fdbq_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// WaitWorkflow releases its watch however it returns: with a store that
// allows 4 watches, 100 waits that time out, are canceled, or see the
// workflow done all succeed.
func TestWorkflowWaitNoWatchLeak(t *testing.T) {
	st, err := embedded.Open("", embedded.Options{InMemory: true, MaxWatches: 4})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	t.Cleanup(func() { db.Close() })
	q := fdbq.New(db, fdbq.Options{})
	ctx := context.Background()
	if err := q.SetType(ctx, db, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	if _, err := q.AddWorkflow(ctx, db, diamond("w", fdbq.CancelDependents)); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		switch i % 3 {
		case 0:
			if _, err := q.WaitWorkflow(ctx, "w", time.Millisecond); err != nil {
				t.Fatalf("wait %d: %v", i, err)
			}
		case 1:
			c, cancel := context.WithTimeout(ctx, time.Millisecond)
			if _, err := q.WaitWorkflow(c, "w", -1); err != nil {
				t.Fatalf("wait %d: %v", i, err)
			}
			cancel()
		case 2:
			if _, err := q.WaitWorkflow(ctx, "w", 0); err != nil {
				t.Fatalf("wait %d: %v", i, err)
			}
		}
	}
}
