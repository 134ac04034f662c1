package fdbq_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
)

// deadlineCommits is a backend whose commits, once armed, wait for the
// context their transaction began with to end and fail with its error:
// a wait's timeout that passes between its read and its commit.
type deadlineCommits struct {
	kv.Backend
	armed atomic.Bool
}

func (b *deadlineCommits) Begin(ctx context.Context) (kv.Transaction, error) {
	tx, err := b.Backend.Begin(ctx)
	if err != nil || !b.armed.Load() {
		return tx, err
	}
	return &deadlineTx{Transaction: tx, ctx: ctx}, nil
}

type deadlineTx struct {
	kv.Transaction
	ctx context.Context
}

func (t *deadlineTx) Commit() error {
	<-t.ctx.Done()
	t.Transaction.Cancel()
	return t.ctx.Err()
}

// WaitWorkflow whose timeout passes while its read commits answers what
// the workflow is, as a timeout at any other point does, not the commit's
// context error.
func TestWaitWorkflowTimeoutDuringCommit(t *testing.T) {
	q0, _ := newQueue(t)
	ctx := context.Background()
	if _, err := q0.AddWorkflow(ctx, q0.DB(), diamond("w", fdbq.CancelDependents)); err != nil {
		t.Fatal(err)
	}
	b := &deadlineCommits{Backend: q0.DB().Backend()}
	q := fdbq.New(kv.NewDB(b, kv.Options{}), fdbq.Options{})
	b.armed.Store(true)
	in, err := q.WaitWorkflow(ctx, "w", 20*time.Millisecond)
	if err != nil {
		t.Fatalf("WaitWorkflow: %v", err)
	}
	if in == nil || in.ID != "w" || in.Done || len(in.Jobs) != 4 {
		t.Fatalf("WaitWorkflow answered %+v", in)
	}
}
