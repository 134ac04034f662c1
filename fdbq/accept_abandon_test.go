package fdbq_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// unknownThenGone answers the commit it is armed for with
// commit_unknown_result after it applied, and ends the caller's context
// there: the caller gives up before kv.DB can tell the commit applied.
type unknownThenGone struct {
	kv.Backend
	armed  atomic.Bool
	cancel context.CancelFunc
}

func (b *unknownThenGone) Begin(ctx context.Context) (kv.Transaction, error) {
	tx, err := b.Backend.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &unknownThenGoneTx{Transaction: tx, b: b}, nil
}

type unknownThenGoneTx struct {
	kv.Transaction
	b *unknownThenGone
}

func (t *unknownThenGoneTx) Commit() error {
	err := t.Transaction.Commit()
	if err == nil && t.b.armed.CompareAndSwap(true, false) {
		t.b.cancel()
		return kv.ErrCommitUnknownResult
	}
	return err
}

// TestAcceptAbandonedAfterAnUnknownCommit: an accept whose caller gives
// up while its commit's result is unknown, and which did commit, gives
// its jobs back: they are pending again, the attempt not counted, not
// running under a lock nobody holds until the activity monitor takes them
// back (an accept returns its jobs or takes none).
func TestAcceptAbandonedAfterAnUnknownCommit(t *testing.T) {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	b := &unknownThenGone{Backend: st}
	db := kv.NewDB(b, kv.Options{})
	defer db.Close()
	q := fdbq.New(db, fdbq.Options{})
	ctx := context.Background()
	if err := q.SetType(ctx, db, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"j1", "j2"} {
		if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	actx, cancel := context.WithCancel(ctx)
	b.cancel = cancel
	b.armed.Store(true)
	ls, err := q.Accept(actx, "email", fdbq.AcceptOptions{Max: 2})
	if len(ls) != 0 || !errors.Is(err, kv.ErrCommitUnknownResult) {
		t.Fatalf("accept: %d jobs, %v; want none and the unknown result", len(ls), err)
	}
	for _, id := range []string{"j1", "j2"} {
		j, err := q.Get(ctx, db, "email", id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != fdbq.Pending || j.Attempts != 0 {
			t.Errorf("job %s: %s after %d attempts, want pending after none", id, j.State, j.Attempts)
		}
	}
	if again, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 2}); err != nil || len(again) != 2 {
		t.Fatalf("accept again: %d jobs, %v", len(again), err)
	}
}
