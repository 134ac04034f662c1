package jobstagetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/jobstagetest"
)

type Charge struct {
	Card   string `json:"card"`
	Cents  int    `json:"cents"`
	Broken bool   `json:"-"`
}

func (Charge) Kind() string { return "charge" }

var later = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

// charge is the handler under test: it reports progress, and chooses how
// the attempt ends from its data.
func charge(ctx context.Context, j *jobstage.Job[Charge]) error {
	if err := j.Progress(ctx, map[string]string{"step": "authorize"}); err != nil {
		return err
	}
	switch {
	case j.Data.Card == "expired":
		return jobstage.Cancel("card expired")
	case j.Data.Card == "busy" && j.Snoozes < 3:
		return jobstage.Snooze(time.Minute)
	case j.Data.Card == "limited":
		return jobstage.RetryAt(later, errors.New("rate limited"))
	case j.Data.Card == "panic":
		panic("no card reader")
	case j.Data.Cents <= 0:
		return errors.New("nothing to charge")
	}
	return j.Progress(ctx, map[string]string{"step": "captured"})
}

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     Charge
		opts     *jobstagetest.RunOptions
		outcome  string
		progress int
		check    func(t *testing.T, r *jobstagetest.Result)
	}{
		{name: "succeeded", args: Charge{Card: "ok", Cents: 5}, outcome: consumer.OutcomeSucceeded, progress: 2},
		{name: "failed", args: Charge{Card: "ok"}, outcome: consumer.OutcomeFailed, progress: 1,
			check: func(t *testing.T, r *jobstagetest.Result) {
				if r.Err == nil || r.Err.Error() != "nothing to charge" {
					t.Errorf("error %v", r.Err)
				}
			}},
		{name: "canceled", args: Charge{Card: "expired"}, outcome: consumer.OutcomeCanceled, progress: 1,
			check: func(t *testing.T, r *jobstagetest.Result) {
				if r.CancelReason != "card expired" {
					t.Errorf("reason %q", r.CancelReason)
				}
			}},
		{name: "snoozed", args: Charge{Card: "busy", Cents: 1}, opts: &jobstagetest.RunOptions{Snoozes: 2}, outcome: consumer.OutcomeSnoozed, progress: 1,
			check: func(t *testing.T, r *jobstagetest.Result) {
				if r.SnoozedFor != time.Minute {
					t.Errorf("snoozed for %v", r.SnoozedFor)
				}
			}},
		{name: "snoozed enough", args: Charge{Card: "busy", Cents: 1}, opts: &jobstagetest.RunOptions{Snoozes: 3}, outcome: consumer.OutcomeSucceeded, progress: 2},
		{name: "retry at", args: Charge{Card: "limited"}, outcome: consumer.OutcomeFailed, progress: 1,
			check: func(t *testing.T, r *jobstagetest.Result) {
				if !r.RetryAt.Equal(later) {
					t.Errorf("retry at %v", r.RetryAt)
				}
			}},
		{name: "panicked", args: Charge{Card: "panic"}, outcome: consumer.OutcomePanicked, progress: 1,
			check: func(t *testing.T, r *jobstagetest.Result) {
				var p *consumer.PanicError
				if !errors.As(r.Err, &p) || p.Value != "no card reader" {
					t.Errorf("error %v", r.Err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := jobstagetest.Run(t, charge, tc.args, tc.opts)
			if r.Outcome != tc.outcome {
				t.Errorf("outcome %s, want %s (error %v)", r.Outcome, tc.outcome, r.Err)
			}
			if len(r.Progress) != tc.progress {
				t.Errorf("progress %s, want %d reports", r.Progress, tc.progress)
			}
			if len(r.Progress) > 0 && string(r.Progress[0]) != `{"step":"authorize"}` {
				t.Errorf("first progress %s", r.Progress[0])
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

// The handler sees the data as a pipeline would give it: through JSON.
func TestRunDecodesThroughJSON(t *testing.T) {
	var seen Charge
	r := jobstagetest.Run(t, func(_ context.Context, j *jobstage.Job[Charge]) error {
		seen = j.Data
		if j.Type != "charge" || j.Attempt != 1 {
			t.Errorf("job %s, attempt %d", j.Type, j.Attempt)
		}
		return nil
	}, Charge{Card: "c", Cents: 3, Broken: true}, nil)
	if r.Err != nil || seen.Broken || seen.Cents != 3 {
		t.Fatalf("handler saw %+v, err %v", seen, r.Err)
	}
}

// RunResult returns the handler's result; a timeout is observable.
func TestRunResultAndTimeout(t *testing.T) {
	r, out := jobstagetest.RunResult(t, func(ctx context.Context, j *jobstage.Job[Charge]) (json.RawMessage, error) {
		return json.RawMessage(`"receipt"`), nil
	}, Charge{}, nil)
	if r.Err != nil || string(out) != `"receipt"` {
		t.Fatalf("result %s, err %v", out, r.Err)
	}
	r = jobstagetest.Run(t, func(ctx context.Context, j *jobstage.Job[Charge]) error {
		<-ctx.Done()
		return ctx.Err()
	}, Charge{}, &jobstagetest.RunOptions{Timeout: time.Millisecond})
	if r.Outcome != consumer.OutcomeTimeout || !strings.Contains(r.Err.Error(), "deadline") {
		t.Fatalf("timed-out run: %s, %v", r.Outcome, r.Err)
	}
}

// Progress outside a pipeline, on a job no one made for it, is an error,
// not a panic.
func TestProgressOutsidePipeline(t *testing.T) {
	var j jobstage.Job[Charge]
	if err := j.Progress(context.Background(), 1); err == nil {
		t.Fatal("Progress of a bare job succeeded")
	}
}

// Progress from the handler's other goroutines is recorded while the
// handler runs; after it returned, progress is refused with fdbq.ErrHalt,
// as a pipeline refuses it once the attempt's lease is gone, and does not
// reach the Result the caller reads (the race detector watches).
func TestRunProgressFromGoroutines(t *testing.T) {
	late := make(chan error)
	r := jobstagetest.Run(t, func(ctx context.Context, j *jobstage.Job[Charge]) error {
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := j.Progress(ctx, i); err != nil {
					t.Errorf("progress while the handler runs: %v", err)
				}
			}()
		}
		wg.Wait()
		go func() { late <- j.Progress(context.Background(), "late") }()
		return nil
	}, Charge{Card: "ok", Cents: 1}, nil)
	n := len(r.Progress) // read while the late progress may be on its way
	if err := <-late; !errors.Is(err, fdbq.ErrHalt) {
		t.Errorf("progress after the handler returned: %v, want ErrHalt", err)
	}
	if n != 4 || len(r.Progress) != 4 {
		t.Errorf("%d then %d progress reports, want the handler's 4", n, len(r.Progress))
	}
}

// Enqueued decodes as Get does: a job added with no data (null) is its
// kind's zero value, not a failed test.
func TestEnqueuedEmptyData(t *testing.T) {
	c := jobstagetest.Open(t)
	ctx := context.Background()
	if _, err := jobstage.Enqueue(ctx, c, Charge{Card: "registers the kind"}, &jobstage.EnqueueOptions{ID: "first"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Queue().Add(ctx, c.DB(), fdbq.NewJob{Type: "charge", ID: "empty"}); err != nil {
		t.Fatal(err)
	}
	jobs := jobstagetest.Enqueued[Charge](t, c.DB(), c)
	if len(jobs) != 2 {
		t.Fatalf("%d jobs, want 2", len(jobs))
	}
	for _, j := range jobs {
		if j.ID == "empty" && j.Data != (Charge{}) {
			t.Errorf("job with no data: %+v", j.Data)
		}
	}
}
