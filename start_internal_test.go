package jobstage

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

type slowKind struct{}

func (slowKind) Kind() string { return "slow" }

// downBackend is a store that is down: its first Begin runs hook, and
// every Begin fails.
type downBackend struct {
	kv.Backend
	hook func()
}

var errDown = errors.New("store down")

func (b *downBackend) Begin(context.Context) (kv.Transaction, error) {
	if b.hook != nil {
		b.hook()
		b.hook = nil
	}
	return nil, errDown
}

// A Start cut short midway — its context ends while a pipeline cannot
// start — stops what it started before it returns, the context ended or
// not: no handler runs on, and no job stays held, past the failed Start.
func TestStartFailingMidwayStopsWhatStarted(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := Open(context.Background(), Config{Logger: quiet, NoRecovery: true, DrainTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	running := make(chan struct{})
	if err := Work(c, func(ctx context.Context, _ *Job[slowKind]) error {
		close(running)
		<-ctx.Done()
		// Work that takes a moment to wind down once interrupted.
		time.Sleep(100 * time.Millisecond)
		return ctx.Err()
	}, nil); err != nil {
		t.Fatal(err)
	}
	job, err := Enqueue(context.Background(), c, slowKind{}, nil)
	if err != nil {
		t.Fatal(err)
	}

	// A second kind whose pipeline cannot start: its store is down, and
	// the caller gives up on Start meanwhile.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mem, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	down := kv.NewDB(&downBackend{Backend: mem, hook: func() { <-running; cancel() }}, kv.Options{RetryLimit: -1})
	defer down.Close()
	cons, err := consumer.New(func(context.Context, *consumer.Job[json.RawMessage]) (struct{}, error) { return struct{}{}, nil }, consumer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.From(producer.New(fdbq.New(down, fdbq.Options{Logger: quiet}), "other", producer.Options{Logger: quiet})).
		To(cons).WithOptions(pipeline.Options{Logger: quiet}).Build()
	if err != nil {
		t.Fatal(err)
	}
	c.workers = append(c.workers, &worker{kind: "other", settings: fdbq.DefaultTypeSettings(), build: func() (*pipeline.Pipeline, error) { return p, nil }})

	if err := c.Start(ctx); err == nil {
		t.Fatal("Start with a pipeline that cannot start succeeded")
	}
	j, err := c.q.Get(context.Background(), c.db, "slow", job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != fdbq.Pending || j.Attempts != 0 {
		t.Errorf("after the failed Start the job is %s after %d attempts; want pending again, the interrupted attempt not counted", j.State, j.Attempts)
	}
}

type echoKind struct{ N int }

func (echoKind) Kind() string { return "echo" }

// A Start that failed can be tried again: the second builds new
// pipelines and a new monitor (each runs once), and works the jobs.
func TestStartAgainAfterAFailedStart(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := Open(context.Background(), Config{Logger: quiet, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := Work(c, func(ctx context.Context, j *Job[echoKind]) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	job, err := Enqueue(context.Background(), c, echoKind{N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A second kind whose pipeline cannot start the first time: its
	// store is down. It starts after the first kind's pipeline did.
	mem, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	down := kv.NewDB(&downBackend{Backend: mem}, kv.Options{RetryLimit: -1})
	defer down.Close()
	builds := 0
	c.workers = append(c.workers, &worker{kind: "other", settings: fdbq.DefaultTypeSettings(), build: func() (*pipeline.Pipeline, error) {
		builds++
		q := c.q
		if builds == 1 {
			q = fdbq.New(down, fdbq.Options{Logger: quiet})
		}
		cons, err := consumer.NewFunc(func(context.Context, *consumer.Job[json.RawMessage]) error { return nil }, consumer.Options{})
		if err != nil {
			return nil, err
		}
		return pipeline.From(producer.New(q, "other", producer.Options{Logger: quiet})).
			To(cons).WithOptions(pipeline.Options{Logger: quiet, NoRecovery: true}).Build()
	}})

	if err := c.Start(context.Background()); !errors.Is(err, errDown) {
		t.Fatalf("first Start: %v, want the store's error", err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("Start after a failed Start: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := Wait[echoKind](ctx, c, job.ID)
	if err != nil || got.Outcome != fdbq.Succeeded || got.Data.N != 1 {
		t.Fatalf("job after the second Start: %+v, %v", got, err)
	}
	if err := c.Start(context.Background()); err == nil {
		t.Fatal("a third Start, after one that succeeded, succeeded")
	}
}
