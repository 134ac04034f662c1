package fdbq_test

import (
	"context"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
)

// List(Running) inside the caller's transaction after a Heartbeat of one of
// the listed jobs in that transaction lists them: the renewal's
// versionstamp is in a key of its own, which List does not read. A range
// read over a versionstamped value the transaction wrote would answer
// accessed_unreadable (1036), on the embedded store as on FoundationDB
// (RYWIterator::kv throws accessed_unreadable for an unreadable write-map
// entry, and snapshot reads see the transaction's writes from API version
// 300 on).
func TestListRunningAfterHeartbeatInTransaction(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	addJob(t, q, fdbq.NewJob{ID: "a"})
	addJob(t, q, fdbq.NewJob{ID: "b"})
	ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 2})
	if len(ls) != 2 {
		t.Fatalf("accepted %d", len(ls))
	}
	var listed int
	err := q.DB().Transact(ctx, func(tx kv.Tx) error {
		if err := q.Heartbeat(ctx, tx, ls[0], fdbq.HeartbeatOptions{}); err != nil {
			return err
		}
		page, err := q.List(ctx, tx, "email", fdbq.ListOptions{State: fdbq.Running})
		if err != nil {
			return err
		}
		listed = len(page.Jobs)
		return nil
	})
	if err != nil || listed != 2 {
		t.Fatalf("List(Running) after a Heartbeat in the same transaction: %d jobs, %v", listed, err)
	}
}
