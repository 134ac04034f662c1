// Package bench measures jobstage end to end on the embedded store, as
// `jobstage bench` reports it: how fast jobs are inserted, how fast a
// pipeline works them off (burn-down), how many jobs a pipeline works per
// second while they are being inserted (continuous), and how long a job
// waits from its insertion to its handler's start when the pipeline is
// idle (latency).
//
// Every figure is measured on the durable store: each commit is fsynced
// before it returns, as in production. Handlers do nothing, so the figures
// are the framework's own cost.
package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// Options configure a run. Zero values take the defaults.
type Options struct {
	// Dir is the store's data directory; empty: a temporary directory,
	// removed at the end. A directory that holds a store is refused, so
	// that a run never mixes with other jobs.
	Dir string
	// Jobs is how many jobs the burn-down inserts and works; 0: no
	// burn-down.
	Jobs int
	// Duration, when > 0, adds a continuous run of that length: jobs are
	// inserted in batches while the pipeline works them.
	Duration time.Duration
	// Concurrency is the consumer's handler limit; default 256.
	Concurrency int
	// InsertBatch is how many jobs one insert transaction adds; default
	// 1,000 (continuous: 100).
	InsertBatch int
	// Latency is how many enqueue→start samples to take, one at a time on
	// an idle pipeline; 0: none.
	Latency int
	// PerJobFinish commits every job's outcome in its own transaction
	// instead of batching the outcomes of jobs that end together.
	PerJobFinish bool
	// Backlog, when > 0, adds the fairness run: a backlog of that many
	// jobs of one key, and FairSamples (default 200) jobs of another key
	// timed from add to start while a pipeline works the backlog.
	Backlog     int
	FairSamples int
	// Shares, when > 0, adds the weighted run: three keys of weights 1, 2
	// and 1, backlogged with that many jobs each, of which that many are
	// worked.
	Shares int
	// Types, when > 1, makes the burn-down a mixed run: Jobs spread over
	// that many types, each worked by a pipeline of its own.
	Types int
	// Express is the pipelines' pipeline.Options.Express: 0 the default,
	// negative none.
	Express int
	// Acceptors is the pipelines' producer.Options.Acceptors, the accepts
	// each keeps in flight; 0: producer.DefaultAcceptors.
	Acceptors int
	// Zones is the zone count of the types the run declares
	// (fdbq.TypeSettings.Zones); 0: fdbq.DefaultZones.
	Zones int
	// Progress, if set, gets a line per phase and per second of work.
	Progress io.Writer
}

// Result is what a run measured.
type Result struct {
	Concurrency int  `json:"concurrency"`
	Acceptors   int  `json:"acceptors"`
	BatchFinish bool `json:"batch_finish"`

	Jobs               int     `json:"jobs"`
	InsertSeconds      float64 `json:"insert_seconds"`
	InsertJobsPerSec   float64 `json:"insert_jobs_per_sec"`
	WorkSeconds        float64 `json:"work_seconds"`
	WorkJobsPerSec     float64 `json:"work_jobs_per_sec"`
	WorkTxPerJob       float64 `json:"work_transactions_per_job"`
	WorkConflictsPerTx float64 `json:"work_conflicts_per_transaction"`

	ContinuousSeconds    float64 `json:"continuous_seconds,omitempty"`
	ContinuousWorked     int64   `json:"continuous_worked,omitempty"`
	ContinuousJobsPerSec float64 `json:"continuous_jobs_per_sec,omitempty"`

	LatencySamples int     `json:"latency_samples"`
	LatencyP50Ms   float64 `json:"latency_p50_ms,omitempty"`
	LatencyP90Ms   float64 `json:"latency_p90_ms,omitempty"`
	LatencyP99Ms   float64 `json:"latency_p99_ms,omitempty"`
	LatencyMaxMs   float64 `json:"latency_max_ms,omitempty"`
	// The same samples measured from the add's return (its commit
	// durable): the watch's wake-up, the accept and the dispatch.
	CommittedP50Ms float64 `json:"latency_from_commit_p50_ms,omitempty"`
	CommittedP99Ms float64 `json:"latency_from_commit_p99_ms,omitempty"`

	MixedTypes      int     `json:"mixed_types,omitempty"`
	MixedJobs       int     `json:"mixed_jobs,omitempty"`
	MixedSeconds    float64 `json:"mixed_seconds,omitempty"`
	MixedJobsPerSec float64 `json:"mixed_jobs_per_sec,omitempty"`

	Fairness FairnessResult `json:"fairness,omitzero"`
}

func (o *Options) defaults() error {
	if o.Jobs < 0 || o.Latency < 0 || o.Duration < 0 || o.Backlog < 0 || o.FairSamples < 0 || o.Shares < 0 || o.Types < 0 {
		return fmt.Errorf("bench: jobs, duration, latency samples, backlog, samples, shares and types must be ≥ 0")
	}
	if o.Jobs == 0 && o.Duration == 0 && o.Latency == 0 && o.Backlog == 0 && o.Shares == 0 {
		return fmt.Errorf("bench: nothing to measure: give jobs, a duration, latency samples, a backlog or shares")
	}
	if o.Types > 1 && o.Jobs == 0 {
		return fmt.Errorf("bench: a mixed run of %d types needs jobs", o.Types)
	}
	if o.FairSamples == 0 {
		o.FairSamples = 200
	}
	if o.Concurrency == 0 {
		o.Concurrency = 256
	}
	if o.Concurrency < 0 {
		return fmt.Errorf("bench: concurrency must be ≥ 1, not %d", o.Concurrency)
	}
	if o.InsertBatch < 0 {
		return fmt.Errorf("bench: insert batch must be ≥ 1, not %d", o.InsertBatch)
	}
	return nil
}

// Run runs the benchmark: the burn-down, then the continuous run, then the
// latency samples, each on an empty job type.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "jobstage-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	} else if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("bench: %s is not empty; give an empty or new directory", dir)
	}
	st, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		return nil, err
	}
	db := kv.NewDB(st, kv.Options{})
	defer db.Close()
	q := fdbq.New(db, fdbq.Options{})
	if err := q.CheckLayout(ctx, db); err != nil {
		return nil, err
	}
	r := &Result{Concurrency: o.Concurrency, Acceptors: cmp.Or(o.Acceptors, producer.DefaultAcceptors), BatchFinish: !o.PerJobFinish}
	b := &run{o: o, q: q, db: db, r: r}

	if o.Jobs > 0 && o.Types > 1 {
		if err := b.mixed(ctx); err != nil {
			return nil, err
		}
	} else if o.Jobs > 0 {
		if err := b.burnDown(ctx, "burn", o.Jobs); err != nil {
			return nil, err
		}
	}
	if o.Duration > 0 {
		if err := b.continuous(ctx, "cont", o.Duration); err != nil {
			return nil, err
		}
	}
	if o.Latency > 0 {
		if err := b.latency(ctx, "lat", o.Latency); err != nil {
			return nil, err
		}
	}
	if o.Backlog > 0 {
		if err := b.newKey(ctx, "fair"); err != nil {
			return nil, err
		}
	}
	if o.Shares > 0 {
		if err := b.shares(ctx, "shares"); err != nil {
			return nil, err
		}
	}
	return r, nil
}

type run struct {
	o  Options
	q  *fdbq.Queue
	db *kv.DB
	r  *Result
}

func (b *run) progress(format string, args ...any) {
	if b.o.Progress != nil {
		fmt.Fprintf(b.o.Progress, format+"\n", args...)
	}
}

// setType registers a fresh job type whose jobs never retry: a bench job
// that fails is an error of the run, not something to hide in retries.
func (b *run) setType(ctx context.Context, name string) error {
	return b.q.SetType(ctx, b.db, name, b.settings())
}

// settings are the settings of the types a run declares: one attempt
// each, and the run's zone count.
func (b *run) settings() fdbq.TypeSettings {
	s := fdbq.DefaultTypeSettings()
	s.Retry.MaxAttempts = 1
	if b.o.Zones > 0 {
		s.Zones = b.o.Zones
	}
	return s
}

// pipeline builds a pipeline of the no-op handler over typ; handled is
// called after each handler returns.
func (b *run) pipeline(typ string, conc int, handled func()) (*pipeline.Pipeline, error) {
	return b.keyedPipeline(typ, conc, func(string) { handled() })
}

func (b *run) insert(ctx context.Context, typ, prefix string, from, n, batch int) error {
	jobs := make([]fdbq.NewJob, 0, batch)
	for i := from; i < from+n; i++ {
		jobs = append(jobs, fdbq.NewJob{Type: typ, ID: fmt.Sprintf("%s%d", prefix, i), Data: json.RawMessage(`{"n":1}`)})
		if len(jobs) == batch || i == from+n-1 {
			if _, err := b.q.AddBatch(ctx, b.db, jobs); err != nil {
				return err
			}
			jobs = jobs[:0]
		}
	}
	return nil
}

func (b *run) burnDown(ctx context.Context, typ string, n int) error {
	if err := b.setType(ctx, typ); err != nil {
		return err
	}
	batch := b.o.InsertBatch
	if batch == 0 {
		batch = 1000
	}
	b.progress("burn-down: inserting %d jobs (%d per transaction)", n, batch)
	t0 := time.Now()
	if err := b.insert(ctx, typ, "j", 0, n, batch); err != nil {
		return err
	}
	ins := time.Since(t0)
	b.r.Jobs = n
	b.r.InsertSeconds = ins.Seconds()
	b.r.InsertJobsPerSec = float64(n) / ins.Seconds()
	b.progress("burn-down: inserted in %.2fs (%.0f jobs/s); working them with concurrency %d",
		ins.Seconds(), b.r.InsertJobsPerSec, b.o.Concurrency)

	var handled atomic.Int64
	done := make(chan struct{})
	p, err := b.pipeline(typ, b.o.Concurrency, func() {
		if handled.Add(1) == int64(n) {
			close(done)
		}
	})
	if err != nil {
		return err
	}
	st := b.db.Stats()
	tx0, conf0 := st.Transactions.Load(), st.Conflicts.Load()
	t1 := time.Now()
	if err := p.Start(ctx); err != nil {
		return err
	}
	stopTicks := b.tick(&handled, t1)
	var waitErr error
	select {
	case <-done:
	case <-ctx.Done():
		waitErr = ctx.Err()
	}
	stopTicks()
	// Stop returns once every handler's outcome is committed.
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Stop(stopCtx); err != nil {
		return err
	}
	work := time.Since(t1)
	if waitErr != nil {
		return waitErr
	}
	fin, err := b.q.Count(ctx, b.db, typ, fdbq.Finished)
	if err != nil {
		return err
	}
	if fin != int64(n) {
		return fmt.Errorf("bench: %d of %d jobs finished", fin, n)
	}
	tx, conf := st.Transactions.Load()-tx0, st.Conflicts.Load()-conf0
	b.r.WorkSeconds = work.Seconds()
	b.r.WorkJobsPerSec = float64(n) / work.Seconds()
	b.r.WorkTxPerJob = float64(tx) / float64(n)
	if tx > 0 {
		b.r.WorkConflictsPerTx = float64(conf) / float64(tx)
	}
	b.progress("burn-down: %d jobs worked in %.2fs (%.0f jobs/s)", n, work.Seconds(), b.r.WorkJobsPerSec)
	return nil
}

// tick reports progress once a second until the returned func is called.
func (b *run) tick(handled *atomic.Int64, since time.Time) func() {
	if b.o.Progress == nil {
		return func() {}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last := int64(0)
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				h := handled.Load()
				b.progress("  %5.1fs  %9d worked  %8d jobs/s", now.Sub(since).Seconds(), h, h-last)
				last = h
			}
		}
	}()
	return func() { close(stop); wg.Wait() }
}

// continuous inserts jobs in batches from two inserters while a pipeline
// works them, for d, and counts the jobs worked. The inserters keep the
// backlog under a bound, so the figure is the work rate, not the insert
// rate.
func (b *run) continuous(ctx context.Context, typ string, d time.Duration) error {
	if err := b.setType(ctx, typ); err != nil {
		return err
	}
	batch := b.o.InsertBatch
	if batch == 0 {
		batch = 100
	}
	// slots bounds the backlog: an inserter takes a slot per job before
	// inserting it, a handler gives one back.
	const backlog = 20_000
	slots := make(chan struct{}, backlog)
	var handled atomic.Int64
	p, err := b.pipeline(typ, b.o.Concurrency, func() {
		handled.Add(1)
		<-slots
	})
	if err != nil {
		return err
	}
	b.progress("continuous: inserting and working for %s (concurrency %d, %d jobs per insert)", d, b.o.Concurrency, batch)
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		return err
	}
	t0 := time.Now()
	stopTicks := b.tick(&handled, t0)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	var next atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				for range batch {
					select {
					case slots <- struct{}{}:
					case <-runCtx.Done():
						return
					}
				}
				from := int(next.Add(int64(batch))) - batch
				if err := b.insert(runCtx, typ, "c", from, batch, batch); err != nil {
					if runCtx.Err() == nil {
						errs <- err
					}
					return
				}
			}
		}()
	}
	<-runCtx.Done()
	worked := handled.Load()
	elapsed := time.Since(t0)
	wg.Wait()
	stopTicks()
	stopCtx, cancelStop := context.WithTimeout(context.Background(), time.Minute)
	defer cancelStop()
	if err := p.Stop(stopCtx); err != nil {
		return err
	}
	select {
	case err := <-errs:
		return err
	default:
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	b.r.ContinuousSeconds = elapsed.Seconds()
	b.r.ContinuousWorked = worked
	b.r.ContinuousJobsPerSec = float64(worked) / elapsed.Seconds()
	b.progress("continuous: %d jobs worked in %.2fs (%.0f jobs/s)", worked, elapsed.Seconds(), b.r.ContinuousJobsPerSec)
	return nil
}

// latency adds n jobs one at a time, each once the pipeline is idle again,
// and measures from the add's call to its handler's start (the add's own
// durable commit is part of the figure) and from the add's return.
func (b *run) latency(ctx context.Context, typ string, n int) error {
	if err := b.setType(ctx, typ); err != nil {
		return err
	}
	starts := make(chan time.Time, 1)
	p, err := b.pipeline(typ, 4, func() { starts <- time.Now() })
	if err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p.Stop(stopCtx)
	}()
	b.progress("latency: %d jobs, one at a time, into an idle pipeline", n)
	samples := make([]time.Duration, 0, n)
	committed := make([]time.Duration, 0, n)
	for i := range n {
		// Let the previous job's outcome commit and the producer park on
		// the type's watch key again.
		time.Sleep(2 * time.Millisecond)
		t0 := time.Now()
		if _, err := b.q.Add(ctx, b.db, fdbq.NewJob{Type: typ, ID: fmt.Sprint("l", i)}); err != nil {
			return err
		}
		t1 := time.Now()
		select {
		case s := <-starts:
			samples = append(samples, s.Sub(t0))
			committed = append(committed, max(s.Sub(t1), 0))
		case <-time.After(time.Minute):
			return fmt.Errorf("bench: job l%d did not start within a minute", i)
		case <-ctx.Done():
			return ctx.Err()
		}
		if _, err := b.q.WaitOne(ctx, typ, fmt.Sprint("l", i), fdbq.Finished); err != nil {
			return err
		}
	}
	slices.Sort(samples)
	b.r.LatencySamples = n
	b.r.LatencyP50Ms, b.r.LatencyP90Ms, b.r.LatencyP99Ms = percentileMs(samples, 50), percentileMs(samples, 90), percentileMs(samples, 99)
	b.r.LatencyMaxMs = float64(samples[len(samples)-1]) / float64(time.Millisecond)
	slices.Sort(committed)
	b.r.CommittedP50Ms, b.r.CommittedP99Ms = percentileMs(committed, 50), percentileMs(committed, 99)
	return nil
}

// Print writes r as a table.
func (r *Result) Print(w io.Writer) {
	fmt.Fprintf(w, "jobstage bench — embedded store, durable (fsync per commit), no-op handler, concurrency %d, %d acceptors, batch finish %v\n",
		r.Concurrency, r.Acceptors, r.BatchFinish)
	if r.Jobs > 0 {
		fmt.Fprintf(w, "burn-down   %9d jobs  insert %8.0f jobs/s (%.2fs)  work %8.0f jobs/s (%.2fs)  %.2f tx/job  %.4f conflicts/tx\n",
			r.Jobs, r.InsertJobsPerSec, r.InsertSeconds, r.WorkJobsPerSec, r.WorkSeconds, r.WorkTxPerJob, r.WorkConflictsPerTx)
	}
	if r.ContinuousSeconds > 0 {
		fmt.Fprintf(w, "continuous  %9d jobs  work %8.0f jobs/s over %.1fs while inserting\n",
			r.ContinuousWorked, r.ContinuousJobsPerSec, r.ContinuousSeconds)
	}
	if r.LatencySamples > 0 {
		fmt.Fprintf(w, "latency     %9d jobs  enqueue→start p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  max %.2f ms; from the add's commit p50 %.2f ms  p99 %.2f ms\n",
			r.LatencySamples, r.LatencyP50Ms, r.LatencyP90Ms, r.LatencyP99Ms, r.LatencyMaxMs, r.CommittedP50Ms, r.CommittedP99Ms)
	}
	if r.MixedTypes > 0 {
		fmt.Fprintf(w, "mixed       %9d jobs  of %d types, a pipeline each: work %8.0f jobs/s (%.2fs)\n",
			r.MixedJobs, r.MixedTypes, r.MixedJobsPerSec, r.MixedSeconds)
	}
	if f := r.Fairness; f.Samples > 0 {
		fmt.Fprintf(w, "new key     %9d jobs  against a backlog of %d of another key worked at %.0f jobs/s: enqueue→start p50 %.2f ms  p99 %.2f ms  max %.2f ms (from the add's commit: p50 %.2f ms  p99 %.2f ms)\n",
			f.Samples, f.Backlog, f.BacklogRate, f.NewP50Ms, f.NewP99Ms, f.NewMaxMs, f.NewCommittedP50Ms, f.NewCommittedP99Ms)
	}
	if f := r.Fairness; f.SharesJobs > 0 {
		fmt.Fprintf(w, "weights     %9d jobs  of keys a:b:c weighted 1:2:1, shares %.3f : %.3f : %.3f\n",
			f.SharesJobs, f.Shares["a"], f.Shares["b"], f.Shares["c"])
	}
}
