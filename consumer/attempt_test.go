package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
)

// TestMiddlewareTakesNoTypeArguments: the middleware are given to New and
// NewFunc without type arguments, whatever the handler's data and result
// types, and they run in order around it.
func TestMiddlewareTakesNoTypeArguments(t *testing.T) {
	q := newQueue(t, nil)
	ls := leases(t, q, 2)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var outcomes []string
	observe := func(typ, outcome string, d time.Duration) { outcomes = append(outcomes, typ+":"+outcome) }
	mw := []consumer.Middleware{consumer.Logging(log), consumer.Metrics(observe), consumer.Timeout(time.Hour), consumer.Recover()}

	typed, err := consumer.New(func(ctx context.Context, j *consumer.Job[num]) (string, error) {
		return "done", nil
	}, consumer.Options{Concurrency: 1}, mw...)
	if err != nil {
		t.Fatal(err)
	}
	serveLeases(t, typed, q, ls[:1], consumer.EnvelopeOptions{})
	if r := get(t, q, ls[0].ID).Result; string(r) != `"done"` {
		t.Errorf("New's result %s, want \"done\"", r)
	}

	untyped, err := consumer.NewFunc(func(ctx context.Context, j *consumer.Job[num]) error {
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("Timeout gave no deadline")
		}
		return nil
	}, consumer.Options{Concurrency: 1}, mw...)
	if err != nil {
		t.Fatal(err)
	}
	serveLeases(t, untyped, q, ls[1:], consumer.EnvelopeOptions{})
	j := get(t, q, ls[1].ID)
	if j.Outcome != fdbq.Succeeded || len(j.Result) != 0 {
		t.Errorf("NewFunc's job: %s %q, result %q; want succeeded without a result", j.Outcome, j.Error, j.Result)
	}
	if got := strings.Join(outcomes, " "); got != "t:succeeded t:succeeded" {
		t.Errorf("Metrics observed %s", got)
	}
	if n := strings.Count(logs.String(), `msg="job succeeded" type=t`); n != 2 {
		t.Errorf("Logging logged %d successes:\n%s", n, &logs)
	}
}

// TestNewFuncFails: NewFunc's handler's error fails the attempt, and its
// panic is a PanicError to the middleware outside Recover.
func TestNewFuncFails(t *testing.T) {
	q := newQueue(t, nil)
	ls := leases(t, q, 2)
	var errs []error
	keep := func(next consumer.Attempt) consumer.Attempt {
		return func(ctx context.Context, a *consumer.AttemptInfo) error {
			err := next(ctx, a)
			errs = append(errs, err)
			return err
		}
	}
	c, err := consumer.NewFunc(func(ctx context.Context, j *consumer.Job[num]) error {
		if j.Data.N == 0 {
			return errors.New("no good")
		}
		panic("kaboom")
	}, consumer.Options{Concurrency: 1}, keep, consumer.Recover())
	if err != nil {
		t.Fatal(err)
	}
	serveLeases(t, c, q, ls, consumer.EnvelopeOptions{})
	if j := get(t, q, ls[0].ID); j.Outcome != fdbq.Failed || j.Error != "no good" {
		t.Errorf("failing job: %s %q", j.Outcome, j.Error)
	}
	if j := get(t, q, ls[1].ID); j.Outcome != fdbq.Failed || !strings.Contains(j.Error, "kaboom") {
		t.Errorf("panicking job: %s %q", j.Outcome, j.Error)
	}
	var pe *consumer.PanicError
	if len(errs) != 2 || !errors.As(errs[1], &pe) || pe.Value != "kaboom" {
		t.Errorf("errors seen outside Recover: %v", errs)
	}
}

// TestAttemptInfo: a middleware sees the job's metadata as its handler
// does.
func TestAttemptInfo(t *testing.T) {
	q := newQueue(t, nil)
	if _, err := q.Add(context.Background(), q.DB(), fdbq.NewJob{Type: "t", ID: "meta", Priority: 3, MaxAttempts: 2}); err != nil {
		t.Fatal(err)
	}
	ls, err := q.Accept(context.Background(), "t", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 {
		t.Fatalf("accept: %v, %d leases", err, len(ls))
	}
	var seen *consumer.AttemptInfo
	var job consumer.AttemptInfo
	c, err := consumer.NewFunc(func(ctx context.Context, j *consumer.Job[json.RawMessage]) error {
		job = consumer.AttemptInfo{ID: j.ID, Type: j.Type, Attempt: j.Attempt, Snoozes: j.Snoozes, Priority: j.Priority, ScheduledAt: j.ScheduledAt, Lease: j.Lease}
		return nil
	}, consumer.Options{Concurrency: 1}, func(next consumer.Attempt) consumer.Attempt {
		return func(ctx context.Context, a *consumer.AttemptInfo) error {
			seen = a
			return next(ctx, a)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	serveLeases(t, c, q, ls, consumer.EnvelopeOptions{})
	if seen == nil || *seen != job || seen.ID != "meta" || seen.Priority != 3 || seen.Attempt != 1 || seen.Lease != ls[0] {
		t.Errorf("middleware saw %+v, the handler %+v", seen, job)
	}
}

// TestWrapResult: a middleware's error replaces the handler's result;
// without one the result passes through.
func TestWrapResult(t *testing.T) {
	h := func(ctx context.Context, j *consumer.Job[int]) (int, error) { return j.Data * 2, nil }
	refuse := func(next consumer.Attempt) consumer.Attempt {
		return func(ctx context.Context, a *consumer.AttemptInfo) error {
			if err := next(ctx, a); err != nil {
				return err
			}
			return errors.New("refused")
		}
	}
	if r, err := consumer.Wrap(h)(context.Background(), consumer.NewJob(21, consumer.JobOptions{})); r != 42 || err != nil {
		t.Errorf("no middleware: %d, %v", r, err)
	}
	if r, err := consumer.Wrap(h, consumer.Recover())(context.Background(), consumer.NewJob(21, consumer.JobOptions{})); r != 42 || err != nil {
		t.Errorf("Recover: %d, %v", r, err)
	}
	if r, err := consumer.Wrap(h, refuse)(context.Background(), consumer.NewJob(21, consumer.JobOptions{})); r != 0 || err == nil || err.Error() != "refused" {
		t.Errorf("refusing middleware: %d, %v", r, err)
	}
}

// TestNilMiddleware: a nil middleware is refused up front, not found at
// every attempt.
func TestNilMiddleware(t *testing.T) {
	h := func(ctx context.Context, j *consumer.Job[num]) (int, error) { return 0, nil }
	if _, err := consumer.New(h, consumer.Options{}, consumer.Recover(), nil); err == nil || !strings.Contains(err.Error(), "middleware 2 of 2 is nil") {
		t.Errorf("New: %v", err)
	}
	if _, err := consumer.NewFunc(func(context.Context, *consumer.Job[num]) error { return nil }, consumer.Options{}, nil); err == nil {
		t.Error("NewFunc took a nil middleware")
	}
	defer func() {
		if recover() == nil {
			t.Error("Wrap took a nil middleware")
		}
	}()
	consumer.Wrap(h, nil)
}

// ptrKind's Kind reads a field: on the zero value (a nil pointer) it
// panics.
type ptrKind struct{ name string }

func (p *ptrKind) Kind() string { return p.name }

// A data type whose Kind panics on its zero value is refused by New with
// an error that names it, instead of New panicking.
func TestNewRefusesPanickingKind(t *testing.T) {
	_, err := consumer.NewFunc(func(context.Context, *consumer.Job[*ptrKind]) error { return nil }, consumer.Options{})
	if err == nil || !strings.Contains(err.Error(), "Kind method of *consumer_test.ptrKind panicked") {
		t.Fatalf("NewFunc with a panicking Kind: %v", err)
	}
}

// Data that does not decode into the handler's type cancels the job, and
// the middleware see that attempt as any other: Metrics counts it,
// Logging logs it; the handler does not run.
func TestUndecodableDataRunsTheMiddleware(t *testing.T) {
	type words struct {
		N string `json:"n"` // the jobs hold numbers
	}
	q := newQueue(t, nil)
	ls := leases(t, q, 2)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var outcomes []string
	observe := func(typ, outcome string, d time.Duration) { outcomes = append(outcomes, typ+":"+outcome) }
	mw := []consumer.Middleware{consumer.Logging(log), consumer.Metrics(observe)}
	ran := 0
	typed, err := consumer.New(func(ctx context.Context, j *consumer.Job[words]) (string, error) {
		ran++
		return "", nil
	}, consumer.Options{Concurrency: 1}, mw...)
	if err != nil {
		t.Fatal(err)
	}
	untyped, err := consumer.NewFunc(func(ctx context.Context, j *consumer.Job[words]) error {
		ran++
		return nil
	}, consumer.Options{Concurrency: 1}, mw...)
	if err != nil {
		t.Fatal(err)
	}
	serveLeases(t, typed, q, ls[:1], consumer.EnvelopeOptions{})
	serveLeases(t, untyped, q, ls[1:], consumer.EnvelopeOptions{})
	if ran != 0 {
		t.Errorf("the handler ran %d times on data that does not decode", ran)
	}
	for _, l := range ls {
		if j := get(t, q, l.ID); j.Outcome != fdbq.Canceled || !strings.Contains(j.Error, "decode data of t/"+l.ID) {
			t.Errorf("job %s: %s %q; want canceled for its data", l.ID, j.Outcome, j.Error)
		}
	}
	if got := strings.Join(outcomes, " "); got != "t:canceled t:canceled" {
		t.Errorf("Metrics observed %q", got)
	}
	if n := strings.Count(logs.String(), "decode data of t/"); n != 2 {
		t.Errorf("Logging logged %d of the 2 cancels:\n%s", n, &logs)
	}
}
