package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// TestHaltCancelsHandler: a job canceled while its handler runs loses its
// lock; the next heartbeat (a third of a 300 ms activity timeout) sees that
// and cancels the handler's context with ErrHalted, and nothing of the
// handler's outcome is committed: the job stays canceled.
func TestHaltCancelsHandler(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.ActivityTimeout = 300 * time.Millisecond
	e := newEnv(t, envOptions{settings: &s})
	e.add(t, fdbq.NewJob{ID: "doomed", Data: json.RawMessage(`{"n":1}`)})

	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	outcomes := make(chan string, 1)
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (string, error) {
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		// What a handler returns after a halt must not be committed,
		// success or not.
		return "finished anyway", nil
	}, consumer.Options{Concurrency: 1}, consumer.Metrics(func(typ, outcome string, d time.Duration) {
		outcomes <- outcome
	}))
	p := e.start(t, pipeline.From(e.producer(producer.Options{})).To(c))
	recv(t, started, "the handler")

	// Heartbeats keep the job alive well past its activity timeout.
	hb0 := e.get(t, "doomed").HeartbeatAt
	e.waitStore(t, "two heartbeats", func() bool {
		j := e.get(t, "doomed")
		return j.State == fdbq.Running && j.HeartbeatAt.Sub(hb0) >= 150*time.Millisecond
	})

	if err := e.q.Cancel(context.Background(), e.db, "t", "doomed"); err != nil {
		t.Fatal(err)
	}
	if cause := recv(t, causes, "the halt"); !errors.Is(cause, consumer.ErrHalted) {
		t.Fatalf("handler's context cause %v, want ErrHalted", cause)
	}
	if o := recv(t, outcomes, "the metrics"); o != consumer.OutcomeHalted {
		t.Errorf("metrics outcome %q, want %q", o, consumer.OutcomeHalted)
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	j := e.get(t, "doomed")
	if j.State != fdbq.Finished || j.Outcome != fdbq.Canceled || len(j.Result) != 0 || j.Error != "" {
		t.Fatalf("halted job: %s/%s result %s error %q, want canceled with nothing committed", j.State, j.Outcome, j.Result, j.Error)
	}
}

// TestHandlerPanicFailsAttempt: a panic fails the attempt with the panic
// value and the stack, and the pipeline goes on.
func TestHandlerPanicFailsAttempt(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.add(t, fdbq.NewJob{ID: "bad", MaxAttempts: 1}, fdbq.NewJob{ID: "good", MaxAttempts: 1})
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (string, error) {
		if j.ID == "bad" {
			explode(j.ID)
		}
		return "fine", nil
	}, consumer.Options{Concurrency: 1})
	e.start(t, pipeline.From(e.producer(producer.Options{})).To(c))
	got := e.waitFinished(t, "bad", "good")
	bad, good := got[0], got[1]
	if bad.Outcome != fdbq.Failed {
		t.Fatalf("panicking job: %s", bad.Outcome)
	}
	for _, want := range []string{"panicked", "boom in bad", "goroutine ", "handler_test.go", "explode"} {
		if !strings.Contains(bad.Error, want) {
			t.Errorf("error of the panicking job lacks %q:\n%s", want, bad.Error)
		}
	}
	if good.Outcome != fdbq.Succeeded || string(good.Result) != `"fine"` {
		t.Fatalf("job after the panic: %s %s", good.Outcome, good.Result)
	}
}

func explode(id string) { panic(fmt.Sprintf("boom in %s", id)) }

// TestJobTimeout: Options.JobTimeout gives the handler a deadline; an
// attempt that runs into it fails with a timeout message.
func TestJobTimeout(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.add(t, fdbq.NewJob{ID: "slow", MaxAttempts: 1})
	const timeout = 100 * time.Millisecond
	deadlines := make(chan time.Duration, 1)
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (string, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			deadlines <- -1
			return "", errors.New("no deadline")
		}
		deadlines <- time.Until(dl)
		<-ctx.Done()
		return "", ctx.Err()
	}, consumer.Options{Concurrency: 1, JobTimeout: timeout})
	e.start(t, pipeline.From(e.producer(producer.Options{})).To(c))
	if d := recv(t, deadlines, "the handler"); d <= 0 || d > timeout {
		t.Fatalf("handler's deadline in %v, want within %v", d, timeout)
	}
	j := e.waitFinished(t, "slow")[0]
	if j.Outcome != fdbq.Failed || !strings.Contains(j.Error, "timed out after 100ms") || !strings.Contains(j.Error, "deadline exceeded") {
		t.Fatalf("timed-out job: %s %q", j.Outcome, j.Error)
	}
}

// TestRetryPolicy: a handler failing twice then succeeding, under a retry
// policy of 3 attempts with a constant 1 ms backoff, ends succeeded after
// 3 attempts; the retries are scheduled, so the producer wakes on its
// timer for the next scheduled job.
func TestRetryPolicy(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.Retry = fdbq.RetryPolicy{MaxAttempts: 3, Backoff: fdbq.Constant, Base: time.Millisecond}
	e := newEnv(t, envOptions{settings: &s})
	e.add(t, fdbq.NewJob{ID: "flaky"}, fdbq.NewJob{ID: "hopeless"})
	var mu sync.Mutex
	attempts := map[string][]int{}
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (int, error) {
		mu.Lock()
		attempts[j.ID] = append(attempts[j.ID], j.Attempt)
		mu.Unlock()
		if j.ID == "hopeless" || j.Attempt < 3 {
			return 0, fmt.Errorf("attempt %d failed", j.Attempt)
		}
		return j.Attempt, nil
	}, consumer.Options{Concurrency: 2})
	e.start(t, pipeline.From(e.producer(producer.Options{})).To(c))
	got := e.waitFinished(t, "flaky", "hopeless")
	if j := got[0]; j.Outcome != fdbq.Succeeded || j.Attempts != 3 || string(j.Result) != "3" {
		t.Errorf("flaky job: %s after %d attempts, result %s", j.Outcome, j.Attempts, j.Result)
	}
	if j := got[1]; j.Outcome != fdbq.Failed || j.Attempts != 3 || j.Error != "attempt 3 failed" {
		t.Errorf("hopeless job: %s after %d attempts, error %q", j.Outcome, j.Attempts, j.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range []string{"flaky", "hopeless"} {
		if fmt.Sprint(attempts[id]) != "[1 2 3]" {
			t.Errorf("attempts of %s seen by the handler: %v", id, attempts[id])
		}
	}
}

// TestTypedData: the handler sees the job's JSON data decoded into its
// type, and data that does not decode fails the attempt.
func TestTypedData(t *testing.T) {
	type order struct {
		Item  string `json:"item"`
		Count int    `json:"count"`
	}
	e := newEnv(t, envOptions{})
	e.add(t,
		fdbq.NewJob{ID: "ok", Data: json.RawMessage(`{"item":"pen","count":3}`), Priority: 7},
		fdbq.NewJob{ID: "wrong", Data: json.RawMessage(`{"count":"three"}`), MaxAttempts: 5},
	)
	seen := make(chan consumer.Job[order], 2)
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[order]) (map[string]int, error) {
		seen <- *j
		return map[string]int{j.Data.Item: j.Data.Count}, nil
	}, consumer.Options{Concurrency: 1})
	e.start(t, pipeline.From(e.producer(producer.Options{})).To(c))
	got := e.waitFinished(t, "ok", "wrong")
	j := recv(t, seen, "the handler")
	if j.ID != "ok" || j.Data != (order{"pen", 3}) || j.Type != "t" || j.Attempt != 1 || j.Priority != 7 || j.Lease == nil {
		t.Fatalf("handler saw %+v", j)
	}
	if string(got[0].Result) != `{"pen":3}` {
		t.Errorf("result %s", got[0].Result)
	}
	// Data that does not decode would not decode at the next attempt
	// either: the job is canceled at once, its attempts left unused.
	if got[1].Outcome != fdbq.Canceled || got[1].Attempts != 1 || !strings.Contains(got[1].Error, "decode data") {
		t.Errorf("undecodable job: %s after %d attempts, %q", got[1].Outcome, got[1].Attempts, got[1].Error)
	}
	select {
	case j := <-seen:
		t.Errorf("handler ran on undecodable data: %+v", j)
	default:
	}
}
