package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

func (e *env) list(t testing.TB, s fdbq.State) []*fdbq.Job {
	t.Helper()
	page, err := e.q.List(context.Background(), e.db, "t", fdbq.ListOptions{State: s, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return page.Jobs
}

// TestDrainReleasesBufferedJobs: Stop hands the jobs a consumer accepted
// but did not start back to pending at once, while running handlers are
// still blocked, without counting their attempt; the running ones finish.
func TestDrainReleasesBufferedJobs(t *testing.T) {
	e := newEnv(t, envOptions{})
	const n, conc, maxDemand = 10, 2, 6
	e.add(t, newJobs(jobIDs("j", n), "")...)
	started := make(chan string, n)
	release := make(chan struct{})
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (string, error) {
		started <- j.ID
		select {
		case <-release:
			return "done " + j.ID, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}, consumer.Options{Concurrency: conc, MaxDemand: maxDemand})
	p := e.start(t, pipeline.From(e.producer(producer.Options{})).To(c))

	running := map[string]bool{}
	for range conc {
		running[recv(t, started, "a handler")] = true
	}
	e.waitStore(t, "max demand accepted", func() bool { return e.count(t, fdbq.Running) == maxDemand })
	accepted := e.list(t, fdbq.Running)
	if len(accepted) != maxDemand {
		t.Fatalf("%d running, want %d", len(accepted), maxDemand)
	}
	if f := p.InFlight(); f > maxDemand {
		t.Fatalf("in flight %d, max demand %d", f, maxDemand)
	}

	stopped := make(chan error, 1)
	go func() { stopped <- p.Stop(context.Background()) }()

	// The buffered jobs are pending again while the handlers still block:
	// the drain did not wait for the handlers, nor for the activity monitor.
	e.waitStore(t, "buffered jobs released", func() bool {
		return e.count(t, fdbq.Pending) == n-conc && e.count(t, fdbq.Running) == conc
	})
	select {
	case err := <-stopped:
		t.Fatalf("stop returned (%v) while handlers were blocked", err)
	default:
	}
	for _, j := range e.list(t, fdbq.Running) {
		if !running[j.ID] {
			t.Fatalf("job %s is running but no handler started it", j.ID)
		}
	}

	close(release)
	if err := recv(t, stopped, "stop"); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if f := p.InFlight(); f != 0 {
		t.Fatalf("in flight after stop: %d", f)
	}
	released := 0
	for _, a := range accepted {
		j := e.get(t, a.ID)
		if running[a.ID] {
			if j.State != fdbq.Finished || j.Outcome != fdbq.Succeeded {
				t.Errorf("running job %s ended %s/%s %q", a.ID, j.State, j.Outcome, j.Error)
			}
			continue
		}
		released++
		if j.State != fdbq.Pending || j.Attempts != 0 {
			t.Errorf("buffered job %s: %s with %d attempts, want pending with 0", a.ID, j.State, j.Attempts)
		}
	}
	if released != maxDemand-conc {
		t.Fatalf("%d buffered jobs, want %d", released, maxDemand-conc)
	}
	if pend := e.count(t, fdbq.Pending); pend != n-conc {
		t.Fatalf("%d pending after stop, want %d", pend, n-conc)
	}
	for range 2 {
		if err := p.Stop(context.Background()); err != nil {
			t.Fatalf("stop again: %v", err)
		}
	}

	// A new pipeline picks the released jobs up.
	all := make(chan string, n)
	c2 := mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (int, error) {
		all <- j.ID
		return j.Attempt, nil
	}, consumer.Options{Concurrency: 4})
	e.start(t, pipeline.From(e.producer(producer.Options{})).To(c2))
	var rest []string
	for range n - conc {
		rest = append(rest, recv(t, all, "the rest"))
	}
	sort.Strings(rest)
	for _, j := range e.waitFinished(t, rest...) {
		if j.Outcome != fdbq.Succeeded || j.Attempts != 1 {
			t.Errorf("job %s: %s after %d attempts", j.ID, j.Outcome, j.Attempts)
		}
	}
}

// TestDrainTimeoutCancelsHandlers: a handler still running when the drain
// deadline passes has its context cancelled with ErrStopping, and its job
// goes back to pending without counting the attempt.
func TestDrainTimeoutCancelsHandlers(t *testing.T) {
	for _, viaCtx := range []bool{false, true} {
		name := "DrainTimeout"
		if viaCtx {
			name = "StopContext"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			e.add(t, fdbq.NewJob{ID: "slow"})
			started := make(chan struct{}, 1)
			causes := make(chan error, 1)
			c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (string, error) {
				started <- struct{}{}
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return "", ctx.Err()
			}, consumer.Options{Concurrency: 1})
			o := pipeline.Options{DrainTimeout: 200 * time.Millisecond}
			if viaCtx {
				o.DrainTimeout = time.Hour
			}
			p := e.start(t, pipeline.From(e.producer(producer.Options{})).WithOptions(o).To(c))
			recv(t, started, "the handler")

			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			if viaCtx {
				cancel()
				ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
			}
			err := p.Stop(ctx)
			cancel()
			if viaCtx {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("stop past its context: %v", err)
				}
			} else if err != nil {
				t.Fatalf("stop: %v", err)
			}
			if cause := recv(t, causes, "the handler's cancellation"); !errors.Is(cause, consumer.ErrStopping) {
				t.Fatalf("handler's context cause: %v, want ErrStopping", cause)
			}
			// A later Stop waits for the drain to end.
			if err := p.Stop(context.Background()); err != nil {
				t.Fatalf("second stop: %v", err)
			}
			j := e.get(t, "slow")
			if j.State != fdbq.Pending || j.Attempts != 0 {
				t.Fatalf("job after drain timeout: %s with %d attempts (%q), want pending with 0", j.State, j.Attempts, j.Error)
			}
		})
	}
}
