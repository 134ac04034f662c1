package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
)

// Random batches of endings — each way to end an attempt, a result that
// is not JSON or does not fit, leases whose job was removed, canceled or
// taken by another worker meanwhile — submitted at once to a
// BatchFinisher: each answer is the one End alone would give, the
// refused ones fail alone, the stored jobs agree with the answers, and
// each ending sent again is a replay that writes nothing.
func TestBatchFinisherRandomEndings(t *testing.T) {
	seed := jobtest.Seed(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay: JOBSTAGE_SEED=%d go test -race ./consumer -run '^TestBatchFinisherRandomEndings$'", seed)
		}
	})
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	ctx := context.Background()
	later := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	big := json.RawMessage(`"` + strings.Repeat("x", fdbq.MaxDataSize) + `"`)
	const (
		succeed = iota
		fail
		failAt
		cancel
		snooze
		notJSON
		tooLarge
		removed
		canceledByOperator
		takenBack
		kinds
	)
	for round := range 4 {
		s := fdbq.DefaultTypeSettings()
		s.Retry = fdbq.RetryPolicy{MaxAttempts: 3, Backoff: fdbq.Constant, Base: time.Minute}
		q := newQueue(t, &s)
		n := 1 + rng.IntN(40)
		jobs := make([]fdbq.NewJob, n)
		for i := range jobs {
			jobs[i] = fdbq.NewJob{Type: "t", ID: fmt.Sprintf("j%03d", i), MaxAttempts: 3}
		}
		if _, err := q.AddBatch(ctx, q.DB(), jobs); err != nil {
			t.Fatal(err)
		}
		ls, err := q.Accept(ctx, "t", fdbq.AcceptOptions{Max: n})
		if err != nil || len(ls) != n {
			t.Fatalf("accepted %d of %d: %v", len(ls), n, err)
		}
		kind := make([]int, n)
		for i, l := range ls {
			kind[i] = rng.IntN(kinds)
			var err error
			switch kind[i] {
			case removed:
				err = q.Remove(ctx, q.DB(), "t", l.ID)
			case canceledByOperator:
				err = q.Cancel(ctx, q.DB(), "t", l.ID)
			case takenBack:
				// Canceled, requeued and accepted by another worker: the
				// job runs, under another lock.
				err = q.Cancel(ctx, q.DB(), "t", l.ID)
				if err == nil {
					err = q.Requeue(ctx, q.DB(), "t", l.ID)
				}
				if err == nil {
					var other []*fdbq.Lease
					other, err = q.Accept(ctx, "t", fdbq.AcceptOptions{Max: 1})
					if err == nil && (len(other) != 1 || other[0].ID != l.ID) {
						err = fmt.Errorf("accepted %d leases after the requeue of %s", len(other), l.ID)
					}
				}
			}
			if err != nil {
				t.Fatalf("round %d: set up %s: %v", round, l.ID, err)
			}
		}
		ending := func(i int) fdbq.Ending {
			switch kind[i] {
			case fail:
				return fdbq.Ending{How: fdbq.AttemptFailed, Cause: fmt.Sprint("failure ", i)}
			case failAt:
				return fdbq.Ending{How: fdbq.AttemptFailed, Cause: fmt.Sprint("failure ", i), At: later}
			case cancel:
				return fdbq.Ending{How: fdbq.AttemptCanceled, Cause: fmt.Sprint("canceled ", i)}
			case snooze:
				return fdbq.Ending{How: fdbq.AttemptSnoozed, At: later}
			case notJSON:
				return fdbq.Ending{How: fdbq.AttemptSucceeded, Result: json.RawMessage(`{"`)}
			case tooLarge:
				return fdbq.Ending{How: fdbq.AttemptSucceeded, Result: big}
			}
			return fdbq.Ending{How: fdbq.AttemptSucceeded, Result: json.RawMessage(fmt.Sprint(i))}
		}
		b := consumer.NewBatchFinisher(q, 1+rng.IntN(16))
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		answers := make([]fdbq.Ended, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, l := range ls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i], errs[i] = b.End(ctx, l, ending(i))
			}()
		}
		wg.Wait()
		for i, l := range ls {
			what := fmt.Sprintf("round %d, %s (kind %d)", round, l.ID, kind[i])
			got, err := answers[i], errs[i]
			j, gerr := q.Get(ctx, q.DB(), "t", l.ID)
			switch kind[i] {
			case removed:
				if !errors.Is(err, fdbq.ErrHalt) || !errors.Is(gerr, fdbq.ErrNotFound) {
					t.Errorf("%s: %v; job: %v", what, err, gerr)
				}
				continue
			case canceledByOperator, takenBack:
				if !errors.Is(err, fdbq.ErrHalt) {
					t.Errorf("%s: %v, want ErrHalt", what, err)
				}
				continue
			}
			if gerr != nil {
				t.Fatalf("%s: %v", what, gerr)
			}
			switch kind[i] {
			case notJSON, tooLarge:
				want := fdbq.ErrInvalidJob
				if kind[i] == tooLarge {
					want = fdbq.ErrDataTooLarge
				}
				if !errors.Is(err, want) || j.State != fdbq.Running {
					t.Errorf("%s: %v, job %s; want %v and the job still running", what, err, j.State, want)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: %v", what, err)
				continue
			}
			if got.State != j.State || got.Outcome != j.Outcome || got.Attempts != j.Attempts || got.Replayed ||
				got.State == fdbq.Pending && !got.At.Equal(j.ScheduledAt) {
				t.Errorf("%s: answered %+v; stored %s/%s, %d attempts, at %v", what, got, j.State, j.Outcome, j.Attempts, j.ScheduledAt)
			}
			var ok bool
			switch kind[i] {
			case succeed:
				ok = j.Outcome == fdbq.Succeeded && string(j.Result) == fmt.Sprint(i)
			case fail:
				ok = j.State == fdbq.Pending && got.Retried && j.Attempts == 1 && j.Error == fmt.Sprint("failure ", i)
			case failAt:
				ok = j.State == fdbq.Pending && got.Retried && j.ScheduledAt.Equal(later)
			case cancel:
				ok = j.Outcome == fdbq.Canceled && j.Error == fmt.Sprint("canceled ", i)
			case snooze:
				ok = j.State == fdbq.Pending && j.Snoozes == 1 && j.Attempts == 0 && j.ScheduledAt.Equal(later)
			}
			if !ok {
				t.Errorf("%s: stored %+v", what, j)
			}
			again, err := b.End(ctx, l, ending(i))
			if err != nil || !again.Replayed || again.State != got.State || again.Outcome != got.Outcome {
				t.Errorf("%s: sent again: %+v, %v; first %+v", what, again, err, got)
			}
		}
		if err := b.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
