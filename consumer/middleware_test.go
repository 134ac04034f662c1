package consumer_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
)

func job(id string) *consumer.Job[int] { return &consumer.Job[int]{ID: id, Type: "t", Attempt: 2} }

// with returns a function that wraps a handler of int jobs in mw.
func with(mw ...consumer.Middleware) func(consumer.Handler[int, int]) consumer.Handler[int, int] {
	return func(h consumer.Handler[int, int]) consumer.Handler[int, int] { return consumer.Wrap(h, mw...) }
}

func TestLoggingMiddleware(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := with(consumer.Logging(log))(func(ctx context.Context, j *consumer.Job[int]) (int, error) {
		if j.ID == "bad" {
			return 0, errors.New("nope")
		}
		return j.Data + 1, nil
	})
	if r, err := h(context.Background(), job("good")); r != 1 || err != nil {
		t.Fatalf("good: %d, %v", r, err)
	}
	if _, err := h(context.Background(), job("bad")); err == nil || err.Error() != "nope" {
		t.Fatalf("bad: %v", err)
	}
	out := buf.String()
	for _, want := range []string{
		`level=DEBUG msg="job started" type=t id=good attempt=2`,
		`level=DEBUG msg="job succeeded" type=t id=good attempt=2 duration=`,
		`level=WARN msg="job failed" type=t id=bad attempt=2 duration=`,
		`err=nope`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}

func TestTimeoutMiddleware(t *testing.T) {
	const d = 20 * time.Millisecond
	// A handler that watches its context ends with the deadline.
	h := with(consumer.Timeout(d))(func(ctx context.Context, j *consumer.Job[int]) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if _, err := h(context.Background(), job("a")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("watching handler: %v", err)
	}
	// A handler that ignores its context and succeeds late still fails:
	// it exceeded its time.
	h = with(consumer.Timeout(d))(func(ctx context.Context, j *consumer.Job[int]) (int, error) {
		<-ctx.Done() // stands for work that overran; the handler does not look at ctx's error
		return 42, nil
	})
	r, err := h(context.Background(), job("b"))
	if err == nil || !strings.Contains(err.Error(), "timed out after 20ms") || r != 0 {
		t.Fatalf("late handler: %d, %v", r, err)
	}
	// In time: untouched.
	h = with(consumer.Timeout(time.Hour))(func(ctx context.Context, j *consumer.Job[int]) (int, error) {
		if _, ok := ctx.Deadline(); !ok {
			return 0, errors.New("no deadline")
		}
		return 7, nil
	})
	if r, err := h(context.Background(), job("c")); r != 7 || err != nil {
		t.Fatalf("quick handler: %d, %v", r, err)
	}
}

func TestRecoverMiddleware(t *testing.T) {
	h := with(consumer.Recover())(func(ctx context.Context, j *consumer.Job[int]) (int, error) {
		panic(errors.New("deep trouble"))
	})
	r, err := h(context.Background(), job("p"))
	if err == nil || r != 0 {
		t.Fatalf("recovered: %d, %v", r, err)
	}
	for _, want := range []string{"panicked: deep trouble", "goroutine ", "middleware_test.go"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%s", want, err)
		}
	}
}

func TestMetricsMiddleware(t *testing.T) {
	type obs struct {
		typ, outcome string
		d            time.Duration
	}
	var got []obs
	observe := func(typ, outcome string, d time.Duration) { got = append(got, obs{typ, outcome, d}) }
	halted, halt := context.WithCancelCause(context.Background())
	halt(consumer.ErrHalted)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		h    consumer.Handler[int, int]
		want string
	}{
		{"ok", context.Background(), func(ctx context.Context, j *consumer.Job[int]) (int, error) { return 1, nil }, consumer.OutcomeSucceeded},
		{"fail", context.Background(), func(ctx context.Context, j *consumer.Job[int]) (int, error) { return 0, errors.New("x") }, consumer.OutcomeFailed},
		{"timeout", context.Background(), with(consumer.Timeout(time.Millisecond))(func(ctx context.Context, j *consumer.Job[int]) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}), consumer.OutcomeTimeout},
		{"halted", halted, func(ctx context.Context, j *consumer.Job[int]) (int, error) { return 0, context.Cause(ctx) }, consumer.OutcomeHalted},
		// Whatever a halted handler returns is not committed: not a success.
		{"halted-nil", halted, func(ctx context.Context, j *consumer.Job[int]) (int, error) { return 1, nil }, consumer.OutcomeHalted},
	} {
		got = nil
		h := with(consumer.Metrics(observe))(tc.h)
		_, _ = h(tc.ctx, job(tc.name))
		if len(got) != 1 || got[0].typ != "t" || got[0].outcome != tc.want || got[0].d < 0 {
			t.Errorf("%s: observed %+v, want one %q", tc.name, got, tc.want)
		}
	}
}

// TestMiddlewareOrder: the first middleware given wraps outermost.
func TestMiddlewareOrder(t *testing.T) {
	q := newQueue(t, nil)
	ls := leases(t, q, 1)
	var trace []string
	mark := func(name string) consumer.Middleware {
		return func(next consumer.Attempt) consumer.Attempt {
			return func(ctx context.Context, a *consumer.AttemptInfo) error {
				trace = append(trace, name+">")
				err := next(ctx, a)
				trace = append(trace, "<"+name)
				return err
			}
		}
	}
	c, err := consumer.New(func(ctx context.Context, j *consumer.Job[num]) (int, error) {
		trace = append(trace, "handler")
		return 0, nil
	}, consumer.Options{Concurrency: 1}, mark("a"), mark("b"))
	if err != nil {
		t.Fatal(err)
	}
	in := make(chan *consumer.Envelope, 1)
	in <- consumer.NewEnvelope(context.Background(), q, ls[0], consumer.EnvelopeOptions{})
	close(in)
	serve(t, c, in)
	if s := strings.Join(trace, " "); s != "a> b> handler <b <a" {
		t.Fatalf("order: %s", s)
	}
}

// TestLoggingStopIsNoFailure: a handler interrupted by a stopping pipeline
// (its context's cause ErrStopping) is logged as interrupted, not failed:
// its job goes back to pending.
func TestLoggingStopIsNoFailure(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	h := with(consumer.Logging(log))(func(ctx context.Context, j *consumer.Job[int]) (int, error) {
		<-ctx.Done()
		return 0, errors.New("handlers: exec: sh killed")
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(consumer.ErrStopping)
	if _, err := h(ctx, job("s")); err == nil {
		t.Fatal("no error")
	}
	out := buf.String()
	if strings.Contains(out, "job failed") || !strings.Contains(out, `level=INFO msg="job interrupted by the stop; it goes back to pending" type=t id=s`) {
		t.Errorf("log:\n%s", out)
	}
}
