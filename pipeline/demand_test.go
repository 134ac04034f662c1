package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/internal/lifecycletest"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// TestBackpressure checks the GenStage contract on the store: with 10·M
// jobs pending behind a slow consumer of max demand M, the pipeline never
// holds more than M of them running (accepted), whatever the concurrency.
func TestBackpressure(t *testing.T) {
	for _, tc := range []struct{ conc, maxDemand int }{{4, 4}, {2, 6}, {1, 3}} {
		t.Run(fmt.Sprintf("concurrency%d_demand%d", tc.conc, tc.maxDemand), func(t *testing.T) {
			testBackpressure(t, tc.conc, tc.maxDemand)
		})
	}
}

func testBackpressure(t *testing.T, conc, maxDemand int) {
	e := newEnv(t, envOptions{})
	n := 10 * maxDemand
	all := jobIDs("j", n)
	e.add(t, newJobs(all, "")...)

	releases := make(map[string]chan struct{}, n)
	for _, id := range all {
		releases[id] = make(chan struct{})
	}
	started := make(chan string, n)
	var handling, maxHandling atomic.Int64
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (int, error) {
		h := handling.Add(1)
		for m := maxHandling.Load(); h > m && !maxHandling.CompareAndSwap(m, h); m = maxHandling.Load() {
		}
		defer handling.Add(-1)
		started <- j.ID
		select {
		case <-releases[j.ID]:
			return 0, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}, consumer.Options{Concurrency: conc, MaxDemand: maxDemand})

	// Sample the running count after every change to a job of the type,
	// reading it in the transaction that arms the next watch, so that no
	// state between two samples goes unseen for long.
	samplerCtx, stopSampler := context.WithCancel(context.Background())
	var maxRunning atomic.Int64
	// sampled signals each reading: a reading follows every change, but
	// may come after later changes, so the test waits for the sampler to
	// see a state it holds before moving on from it.
	sampled := make(chan struct{}, 1)
	samplerDone := make(chan error, 1)
	release := jobtest.HoldChanges(t, e.db, "t") // every change moves the key the sampler watches
	t.Cleanup(release)
	go func() {
		samplerDone <- func() error {
			for {
				w, err := kv.Transact(samplerCtx, e.db, func(tx kv.Tx) (kv.Watch, error) {
					n, err := e.q.Count(samplerCtx, tx, "t", fdbq.Running)
					if err != nil {
						return nil, err
					}
					for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
					}
					select {
					case sampled <- struct{}{}:
					default:
					}
					return tx.Watch(queueKey(tagChange, "t")), nil
				})
				if samplerCtx.Err() != nil {
					return nil
				}
				if err != nil {
					return err
				}
				err = w.Wait(samplerCtx)
				w.Cancel()
				if samplerCtx.Err() != nil {
					return nil
				}
				if err != nil {
					return err
				}
			}
		}()
	}()

	p := e.start(t, pipeline.From(e.producer(producer.Options{})).To(c))

	check := func(when string) int64 {
		t.Helper()
		run := e.count(t, fdbq.Running)
		if run > int64(maxDemand) {
			t.Fatalf("%s: %d jobs running in the store, max demand %d", when, run, maxDemand)
		}
		if f := p.InFlight(); f > maxDemand {
			t.Fatalf("%s: pipeline holds %d jobs, max demand %d", when, f, maxDemand)
		}
		if h := handling.Load(); h > int64(conc) {
			t.Fatalf("%s: %d handlers running, concurrency %d", when, h, conc)
		}
		return run
	}

	var queue []string
	for range conc {
		queue = append(queue, recv(t, started, "the first handlers"))
	}
	// The consumer asked for maxDemand up front and the producer accepted
	// that many in one transaction; nothing more was accepted while the
	// handlers are blocked.
	e.waitStore(t, "the first batch", func() bool { return e.count(t, fdbq.Running) == int64(maxDemand) })
	if run := check("first batch"); run != int64(maxDemand) {
		t.Fatalf("first batch: %d running, want %d", run, maxDemand)
	}
	if pend := e.count(t, fdbq.Pending); pend != int64(n-maxDemand) {
		t.Fatalf("first batch: %d pending, want %d", pend, n-maxDemand)
	}
	// The first batch stays running until a handler is released.
	for maxRunning.Load() < int64(maxDemand) {
		recv(t, sampled, "the sampler reading the first batch")
	}
	for done := 0; done < n; done++ {
	drain:
		for {
			select {
			case id := <-started:
				queue = append(queue, id)
			default:
				break drain
			}
		}
		if len(queue) == 0 {
			queue = append(queue, recv(t, started, "the next handler"))
		}
		check(fmt.Sprintf("before release %d", done))
		id := queue[0]
		queue = queue[1:]
		close(releases[id])
		if j := e.waitFinished(t, id)[0]; j.Outcome != fdbq.Succeeded {
			t.Fatalf("job %s: %s %q", id, j.Outcome, j.Error)
		}
		check(fmt.Sprintf("after release %d", done))
	}
	stopSampler()
	if err := <-samplerDone; err != nil {
		t.Fatal(err)
	}
	if m := maxRunning.Load(); m > int64(maxDemand) || m < int64(maxDemand) {
		t.Fatalf("running jobs peaked at %d, want exactly max demand %d", m, maxDemand)
	}
	if m := maxHandling.Load(); m != int64(conc) {
		t.Fatalf("handlers peaked at %d, want concurrency %d", m, conc)
	}
	if fin := e.count(t, fdbq.Finished); fin != int64(n) {
		t.Fatalf("%d finished, want %d", fin, n)
	}
}

// assertIdle checks that nothing touches the store or the queue's clock for
// a while. Absence of activity has no event to wait for, so this one check
// watches the counters across a fixed interval.
func assertIdle(t *testing.T, e *env, when string) {
	t.Helper()
	tx0, clock0 := e.db.Stats().Transactions.Load(), e.clock.reads.Load()
	armed0, _ := e.spy.armedWatches()
	time.Sleep(300 * time.Millisecond)
	tx1, clock1 := e.db.Stats().Transactions.Load(), e.clock.reads.Load()
	armed1, _ := e.spy.armedWatches()
	if tx1 != tx0 {
		t.Errorf("%s: idle pipeline made %d store transactions", when, tx1-tx0)
	}
	if clock1 != clock0 {
		t.Errorf("%s: idle pipeline read the queue's clock %d times (a timer or poll)", when, clock1-clock0)
	}
	if armed1 != armed0 {
		t.Errorf("%s: idle producer re-armed its watch %d times", when, armed1-armed0)
	}
}

// TestIdlePipelineMakesNoTransactions: a pipeline whose producer has
// demand and nothing to accept waits on the type's watch key and makes no
// store transactions, before and after it handled a job.
func TestIdlePipelineMakesNoTransactions(t *testing.T) {
	e := newEnv(t, envOptions{})
	handled := make(chan string, 1)
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (string, error) {
		handled <- j.ID
		return "ok", nil
	}, consumer.Options{Concurrency: 2, MaxDemand: 4})
	// The activity monitor is left out: what is counted is the pipeline's
	// own work (the monitor's idle tests are fdbq's: TestSpinMonitorIdle,
	// TestMonitorIdle…).
	p := e.start(t, pipeline.From(e.producer(producer.Options{})).To(c).WithOptions(pipeline.Options{NoRecovery: true}))

	e.spy.waitArmed(t, 1) // the producer found nothing and parked
	assertIdle(t, e, "empty queue")
	if d := p.Demand(); d != 4 {
		t.Errorf("idle demand %d, want max demand 4", d)
	}

	e.add(t, fdbq.NewJob{ID: "one"})
	if id := recv(t, handled, "the job"); id != "one" {
		t.Fatalf("handled %q", id)
	}
	if j := e.waitFinished(t, "one")[0]; j.Outcome != fdbq.Succeeded {
		t.Fatalf("job: %s %q", j.Outcome, j.Error)
	}
	// The add woke the first watch; after the accept the producer, still
	// holding demand, looked again, found nothing and armed a second one.
	e.spy.waitArmed(t, 2)
	assertIdle(t, e, "after one job")
	// One job delivered; 3 outstanding is above min demand 2, so the
	// consumer has not asked again.
	if d := p.Demand(); d != 3 {
		t.Errorf("demand after one job %d, want 3", d)
	}
}

// TestWatchWakesIdlePipeline: with the pipeline parked on the type's watch
// key (no scheduled jobs, so no timer), an added job starts at once, and
// the only store transactions in between are the add and the accept.
func TestWatchWakesIdlePipeline(t *testing.T) {
	e := newEnv(t, envOptions{})
	type start struct {
		id  string
		tx  int64
		now time.Time
	}
	starts := make(chan start, 1)
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (bool, error) {
		starts <- start{j.ID, e.db.Stats().Transactions.Load(), time.Now()}
		return true, nil
	}, consumer.Options{Concurrency: 1})
	// No monitor: the transactions counted are the pipeline's.
	e.start(t, pipeline.From(e.producer(producer.Options{})).To(c).WithOptions(pipeline.Options{NoRecovery: true}))

	const rounds = 5
	for i := range rounds {
		e.spy.waitArmed(t, i+1)
		tx0 := e.db.Stats().Transactions.Load()
		t0 := time.Now()
		id := fmt.Sprint("wake", i)
		e.add(t, fdbq.NewJob{ID: id})
		s := recv(t, starts, "the handler")
		if s.id != id {
			t.Fatalf("handled %q, want %q", s.id, id)
		}
		// The add and the accept that takes the job; meanwhile the
		// producer's other accept loops may look once without waiting and
		// one of them takes over the watch.
		if n := s.tx - tx0; n > 4 {
			t.Errorf("round %d: %d store transactions between add and start, want ≤ 4 (add, accept, a look, a re-watch)", i, n)
		}
		lat := s.now.Sub(t0)
		if lat > 5*time.Second {
			t.Errorf("round %d: enqueue to start took %v", i, lat)
		}
		t.Logf("round %d: enqueue→start %v, %d transactions", i, lat, s.tx-tx0)
		e.waitFinished(t, id)
	}
}

// TestPipelineLifecycle covers Start and Stop misuse, and the lifecycle of
// every long-running part.
func TestPipelineLifecycle(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (int, error) { return 0, nil }, consumer.Options{})
	build := func(*testing.T) lifecycletest.Part {
		p, err := pipeline.From(e.producer(producer.Options{})).To(c).Build()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := build(t).(*pipeline.Pipeline)
	ctx := context.Background()
	if d := p.Demand(); d != 0 {
		t.Fatalf("demand before start: %d", d)
	}
	lifecycletest.Run(t, "pipeline.Pipeline", build)

	// Unknown types and bad declarations fail early.
	bad, err := pipeline.From(producer.New(e.q, "nope", producer.Options{})).To(c).Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Start(ctx); err == nil {
		t.Fatal("start with an unregistered type succeeded")
	}
	// A failed start leaves the pipeline unstarted: once the type is
	// registered, it starts.
	if err := e.q.SetType(ctx, e.q.DB(), "nope", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	if err := bad.Start(ctx); err != nil {
		t.Fatalf("start after the type was registered: %v", err)
	}
	if err := bad.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pipeline.From().To(c).Build(); err == nil {
		t.Fatal("pipeline without producers built")
	}
	if _, err := pipeline.From(e.producer(producer.Options{})).Build(); err == nil {
		t.Fatal("pipeline without consumers built")
	}
	c4 := mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (int, error) { return 0, nil }, consumer.Options{Concurrency: 4})
	if _, err := pipeline.From(e.producer(producer.Options{})).Dispatch(pipeline.PartitionDispatcher(func(*fdbq.Lease) string { return "" })).To(c4).Build(); err == nil {
		t.Fatal("partition dispatch to a concurrent consumer built")
	}
}

// TestRun: Run serves until its context ends, then drains: jobs buffered
// but not started go back to pending.
func TestRun(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.add(t, newJobs(jobIDs("r", 6), "")...)
	started := make(chan string, 6)
	release := make(chan struct{})
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (int, error) {
		started <- j.ID
		<-release
		return 1, nil
	}, consumer.Options{Concurrency: 1, MaxDemand: 4})
	p, err := pipeline.From(e.producer(producer.Options{})).To(c).Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	first := recv(t, started, "the first job")
	e.waitStore(t, "max demand accepted", func() bool { return e.count(t, fdbq.Running) == 4 })
	cancel()
	e.waitStore(t, "buffered jobs released", func() bool { return e.count(t, fdbq.Running) == 1 })
	close(release)
	if err := recv(t, ran, "Run to return"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if j := e.get(t, first); j.Outcome != fdbq.Succeeded {
		t.Fatalf("running job: %s", j.Outcome)
	}
	if n := e.count(t, fdbq.Pending); n != 5 {
		t.Fatalf("%d pending after Run, want 5", n)
	}
}
