// Package jobstagetest helps test code that uses jobstage: a client over
// an in-memory store in one call, a handler run on one typed job without
// a pipeline (its progress, cancel, snooze and retry observable), and the
// jobs a transaction enqueued.
//
// Open gives a *jobstage.Client closed when the test ends; Run and
// RunResult run a handler as a pipeline would (its data through JSON, a
// panic recovered, a timeout applied) and return a Result: the outcome
// under the names of package consumer, the progress reported, and what
// Cancel, Snooze or RetryAt asked. Enqueued and RequireEnqueued read the
// pending jobs of a kind through a transaction, the caller's own before it
// commits included. Each takes the test's testing.TB and fails the test
// on an error of its own.
//
// The Example tests a handler with Run; ExampleRequireEnqueued checks
// the job a transaction enqueued. Both show a test's body, since an
// Example has no testing.TB to give.
package jobstagetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
)

// Open returns a client over a fresh in-memory store, closed when the
// test ends. cfg, if given, configures it (its Dir and ClusterFile must be
// empty).
func Open(t testing.TB, cfg ...jobstage.Config) *jobstage.Client {
	t.Helper()
	var c jobstage.Config
	if len(cfg) > 0 {
		c = cfg[0]
	}
	if c.Dir != "" || c.ClusterFile != "" {
		t.Fatal("jobstagetest.Open: the store is in memory; leave Dir and ClusterFile empty")
	}
	client, err := jobstage.Open(context.Background(), c)
	if err != nil {
		t.Fatalf("jobstagetest.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := client.Close(); err != nil {
			t.Errorf("jobstagetest: closing the client: %v", err)
		}
	})
	return client
}

// RunOptions configure Run; zero fields keep the defaults.
type RunOptions struct {
	ID       string // default "test-job"
	Attempt  int    // default 1
	Snoozes  int
	Priority int
	// Context is the handler's parent context; default
	// context.Background().
	Context context.Context
	// Timeout bounds the attempt as WorkOptions.Timeout does.
	Timeout time.Duration
}

// Result is what one attempt of a handler did.
type Result struct {
	// Err is what the handler returned (a panic is a
	// *consumer.PanicError).
	Err error
	// Outcome is how a pipeline would name the attempt's end:
	// consumer.OutcomeSucceeded, OutcomeFailed, OutcomeCanceled,
	// OutcomeSnoozed, OutcomePanicked or OutcomeTimeout.
	Outcome string
	// Progress is every progress the handler reported, in order, as JSON.
	Progress []json.RawMessage
	// CancelReason is Cancel's reason (Outcome canceled).
	CancelReason string
	// SnoozedFor is Snooze's duration (Outcome snoozed).
	SnoozedFor time.Duration
	// RetryAt is RetryAt's time (Outcome failed), zero otherwise.
	RetryAt time.Time
}

// Run runs h on one job with args, as a pipeline would but without a
// store: args go through JSON as stored data does (data that does not
// decode cancels the job), a panic becomes the attempt's error, and
// progress is recorded instead of sent with a heartbeat (from any of the
// handler's goroutines; after the handler returned it fails with
// fdbq.ErrHalt, as in a pipeline). o may be nil.
func Run[T jobstage.Args](t testing.TB, h func(ctx context.Context, job *jobstage.Job[T]) error, args T, o *RunOptions) *Result {
	t.Helper()
	r, _ := RunResult(t, func(ctx context.Context, job *jobstage.Job[T]) (struct{}, error) {
		return struct{}{}, h(ctx, job)
	}, args, o)
	return r
}

// RunResult is Run for a handler with a result; the result is returned
// as the handler returned it.
func RunResult[T jobstage.Args, R any](t testing.TB, h consumer.Handler[T, R], args T, o *RunOptions) (*Result, R) {
	t.Helper()
	if o == nil {
		o = &RunOptions{}
	}
	if o.ID == "" {
		o.ID = "test-job"
	}
	ctx := o.Context
	if ctx == nil {
		ctx = context.Background()
	}
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	res := &Result{}
	// mu guards res against progress reported from the handler's other
	// goroutines; ended is set once the handler returned: a pipeline's
	// lease is gone then, and so a late progress is refused as it would
	// be there, instead of racing with the caller's reading of res.
	var mu sync.Mutex
	ended := false
	var zero R
	kind, err := jobstage.KindOf[T]()
	if err != nil {
		t.Fatalf("jobstagetest: %v", err)
	}
	data, err := json.Marshal(args)
	if err != nil {
		t.Fatalf("jobstagetest: encode the args: %v", err)
	}
	var decoded T
	if err := json.Unmarshal(data, &decoded); err != nil {
		res.Err = consumer.Cancel(fmt.Sprintf("data does not decode into %T: %v", decoded, err))
		res.finish(ctx)
		return res, zero
	}
	job := consumer.NewJob(decoded, consumer.JobOptions{
		ID: o.ID, Type: kind, Attempt: o.Attempt, Snoozes: o.Snoozes, Priority: o.Priority,
		Progress: func(_ context.Context, p json.RawMessage) error {
			mu.Lock()
			defer mu.Unlock()
			if ended {
				return fmt.Errorf("%w: jobstagetest: progress of %s after its handler returned", fdbq.ErrHalt, o.ID)
			}
			res.Progress = append(res.Progress, p)
			return nil
		},
	})
	// A panic becomes the attempt's error as in a pipeline: Recover's
	// *consumer.PanicError.
	out, err := consumer.Wrap(h, consumer.Recover())(ctx, job)
	res.Err = err
	mu.Lock()
	defer mu.Unlock()
	ended = true
	res.finish(ctx)
	return res, out
}

func (r *Result) finish(ctx context.Context) {
	r.Outcome = consumer.AttemptOutcome(ctx, r.Err)
	var end *consumer.EndError
	if errors.As(r.Err, &end) {
		switch end.How {
		case fdbq.AttemptCanceled:
			r.CancelReason = end.Reason
		case fdbq.AttemptSnoozed:
			r.SnoozedFor = end.After
		case fdbq.AttemptFailed:
			r.RetryAt = end.At
		}
	}
}

// Enqueued returns the pending jobs of T's kind as tr sees them: given
// the caller's transaction before it commits, the jobs it enqueued too
// (a transaction reads its own writes). It lists at most 10,000.
func Enqueued[T jobstage.Args](t testing.TB, tr kv.ReadTransactor, c *jobstage.Client) []*jobstage.Info[T] {
	t.Helper()
	kind, err := jobstage.KindOf[T]()
	if err != nil {
		t.Fatalf("jobstagetest: %v", err)
	}
	var out []*jobstage.Info[T]
	cursor := ""
	for len(out) < 10_000 {
		page, err := c.Queue().List(context.Background(), tr, kind, fdbq.ListOptions{State: fdbq.Pending, Limit: 1000, Cursor: cursor})
		if errors.Is(err, fdbq.ErrUnknownType) {
			return nil
		}
		if err != nil {
			t.Fatalf("jobstagetest: list the %s jobs: %v", kind, err)
		}
		for _, j := range page.Jobs {
			i, err := jobstage.InfoOf[T](j)
			if err != nil {
				t.Fatalf("jobstagetest: %v", err)
			}
			out = append(out, i)
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	return out
}

// RequireEnqueued fails the test unless tr sees exactly one pending job
// of T's kind, and returns it.
func RequireEnqueued[T jobstage.Args](t testing.TB, tr kv.ReadTransactor, c *jobstage.Client) *jobstage.Info[T] {
	t.Helper()
	jobs := Enqueued[T](t, tr, c)
	if len(jobs) != 1 {
		kind, _ := jobstage.KindOf[T]() // Enqueued checked it
		t.Fatalf("jobstagetest: %d pending jobs of kind %s, want 1", len(jobs), kind)
	}
	return jobs[0]
}
