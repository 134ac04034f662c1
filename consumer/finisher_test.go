package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
)

// TestBatchFinisher: outcomes submitted together commit in fewer
// transactions than jobs; one whose lock is gone gets ErrHalt without
// failing the others.
func TestBatchFinisher(t *testing.T) {
	q := newQueue(t, nil)
	const n = 64
	ls := leases(t, q, n)
	const stale = 17
	if err := q.Cancel(context.Background(), q.DB(), "t", ls[stale].ID); err != nil {
		t.Fatal(err)
	}
	b := consumer.NewBatchFinisher(q, 16)
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	commits0 := q.DB().Stats().Commits.Load()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := fdbq.Ending{How: fdbq.AttemptSucceeded, Result: json.RawMessage(fmt.Sprint(i))}
			if i%4 == 3 {
				e = fdbq.Ending{How: fdbq.AttemptFailed, Cause: fmt.Sprint("failure ", i)}
			}
			_, errs[i] = b.End(context.Background(), l, e)
		}()
	}
	wg.Wait()
	commits := q.DB().Stats().Commits.Load() - commits0
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		j := get(t, q, ls[i].ID)
		switch {
		case i == stale:
			if !errors.Is(err, fdbq.ErrHalt) || j.Outcome != fdbq.Canceled {
				t.Errorf("stale lease: %v, job %s", err, j.Outcome)
			}
		case err != nil:
			t.Errorf("job %d: %v", i, err)
		case i%4 == 3:
			if j.Outcome != fdbq.Failed || j.Error != fmt.Sprint("failure ", i) {
				t.Errorf("job %d: %s %q", i, j.Outcome, j.Error)
			}
		default:
			if j.Outcome != fdbq.Succeeded || string(j.Result) != fmt.Sprint(i) {
				t.Errorf("job %d: %s %s", i, j.Outcome, j.Result)
			}
		}
	}
	t.Logf("%d outcomes in %d commits", n, commits)
	if commits >= n {
		t.Errorf("%d commits for %d outcomes: nothing was batched", commits, n)
	}
	if _, err := b.End(context.Background(), ls[0], fdbq.Ending{}); !errors.Is(err, consumer.ErrFinisherClosed) {
		t.Fatalf("finish after close: %v", err)
	}
}
