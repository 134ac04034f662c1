package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// TestCommitSkipsHalted drives one batch through commit directly, so the
// batch is known: a stale lease among good ones is answered with ErrHalt,
// and the good ones commit together, in one transaction.
func TestCommitSkipsHalted(t *testing.T) {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	defer db.Close()
	q := fdbq.New(db, fdbq.Options{})
	ctx := context.Background()
	if err := q.SetType(ctx, db, "t", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	const n = 8
	for i := range n {
		if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "t", ID: fmt.Sprint("j", i), MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := q.Accept(ctx, "t", fdbq.AcceptOptions{Max: n, Window: 1})
	if err != nil || len(ls) != n {
		t.Fatalf("accept: %d, %v", len(ls), err)
	}
	// Two stale leases: one canceled, one removed, in the middle of the
	// batch so that good ones come before and after them.
	if err := q.Cancel(ctx, db, "t", ls[3].ID); err != nil {
		t.Fatal(err)
	}
	if err := q.Remove(ctx, db, "t", ls[5].ID); err != nil {
		t.Fatal(err)
	}
	b := NewBatchFinisher(q, 0) // not started: the test calls commit itself
	var batch []*finishReq
	answers := make([]chan error, len(ls))
	for i, l := range ls {
		answers[i] = make(chan error, 1)
		r := &finishReq{ctx: ctx, lease: l, ending: fdbq.Ending{How: fdbq.AttemptSucceeded, Result: json.RawMessage(`true`)},
			done: func(_ fdbq.Ended, err error) { answers[i] <- err }}
		if i == 6 {
			r.ending = fdbq.Ending{How: fdbq.AttemptFailed, Cause: "bad luck"}
		}
		batch = append(batch, r)
	}
	commits0 := db.Stats().Commits.Load()
	// commit filters its argument in place; keep our own order.
	b.commit(append([]*finishReq(nil), batch...))
	if c := db.Stats().Commits.Load() - commits0; c != 1 {
		t.Errorf("%d commits for one batch, want 1", c)
	}
	for i := range batch {
		err := <-answers[i]
		if i == 3 || i == 5 {
			if !errors.Is(err, fdbq.ErrHalt) {
				t.Errorf("stale lease %d: %v, want ErrHalt", i, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("lease %d: %v", i, err)
			continue
		}
		j, err := q.Get(ctx, db, "t", ls[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		want := fdbq.Succeeded
		if i == 6 {
			want = fdbq.Failed
		}
		if j.Outcome != want {
			t.Errorf("job %d: %s, want %s", i, j.Outcome, want)
		}
	}
	if j, _ := q.Get(ctx, db, "t", ls[3].ID); j.Outcome != fdbq.Canceled {
		t.Errorf("canceled job became %s", j.Outcome)
	}
}

// TestLargeOutcomes: outcomes whose results together pass the store's
// transaction limit all commit, in more than one transaction: given to a
// running finisher (its byte budget splits the batch) and to commit
// directly as one batch (a transaction refused as too large is split).
func TestLargeOutcomes(t *testing.T) {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	defer db.Close()
	q := fdbq.New(db, fdbq.Options{})
	ctx := context.Background()
	if err := q.SetType(ctx, db, "t", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	const n = 160
	result := json.RawMessage(`"` + strings.Repeat("x", 80_000) + `"`)
	accept := func(prefix string) []*fdbq.Lease {
		for i := range n {
			if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "t", ID: fmt.Sprint(prefix, i)}); err != nil {
				t.Fatal(err)
			}
		}
		ls, err := q.Accept(ctx, "t", fdbq.AcceptOptions{Max: n})
		if err != nil || len(ls) != n {
			t.Fatalf("accept: %d, %v", len(ls), err)
		}
		return ls
	}
	finished := func(ls []*fdbq.Lease, errs []error) {
		t.Helper()
		for i, l := range ls {
			if errs[i] != nil {
				t.Fatalf("outcome of %s: %v", l.ID, errs[i])
			}
			if j, err := q.Get(ctx, db, "t", l.ID); err != nil || j.State != fdbq.Finished {
				t.Fatalf("job %s: %v, %v", l.ID, j, err)
			}
		}
	}

	ls := accept("a")
	b := NewBatchFinisher(q, 0)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Go(func() { _, errs[i] = b.End(ctx, l, fdbq.Ending{How: fdbq.AttemptSucceeded, Result: result}) })
	}
	wg.Wait()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	finished(ls, errs)

	ls = accept("b")
	answers := make(chan error, n)
	var batch []*finishReq
	for _, l := range ls {
		batch = append(batch, &finishReq{ctx: ctx, lease: l, ending: fdbq.Ending{How: fdbq.AttemptSucceeded, Result: result},
			done: func(_ fdbq.Ended, err error) { answers <- err }})
	}
	commits0 := db.Stats().Commits.Load()
	NewBatchFinisher(q, 0).commit(batch)
	for i := range errs {
		errs[i] = <-answers
	}
	finished(ls, errs)
	if c := db.Stats().Commits.Load() - commits0; c < 2 {
		t.Errorf("%d commits for %d outcomes of %d bytes each", c, n, len(result))
	}
}
