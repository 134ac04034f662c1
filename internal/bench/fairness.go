package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// FairnessResult is what the fairness runs measured.
type FairnessResult struct {
	// Backlog is the pending jobs of the key "backlog" while the jobs of
	// the key "new" were added one at a time, Samples of them, each timed
	// from its add's call to its handler's start, with the pipeline
	// working the backlog at full speed.
	Backlog  int     `json:"backlog"`
	Samples  int     `json:"samples"`
	NewP50Ms float64 `json:"new_key_p50_ms"`
	NewP99Ms float64 `json:"new_key_p99_ms"`
	NewMaxMs float64 `json:"new_key_max_ms"`
	// The same samples from the add's return (its commit durable): the
	// express accept and the dispatch, without the add's own commit.
	NewCommittedP50Ms float64 `json:"new_key_from_commit_p50_ms"`
	NewCommittedP99Ms float64 `json:"new_key_from_commit_p99_ms"`
	BacklogRate       float64 `json:"backlog_jobs_per_sec"`

	// SharesJobs is how many jobs were worked of three backlogged keys of
	// weights 1, 2 and 1, and Shares each key's share of them.
	SharesJobs int                `json:"shares_jobs,omitempty"`
	Shares     map[string]float64 `json:"shares,omitempty"`
}

// keyedPipeline builds a pipeline of the no-op handler over typ that
// calls handled with each job's key.
func (b *run) keyedPipeline(typ string, conc int, handled func(key string)) (*pipeline.Pipeline, error) {
	c, err := consumer.New(func(ctx context.Context, j *consumer.Job[json.RawMessage]) (struct{}, error) {
		handled(j.Key)
		return struct{}{}, nil
	}, consumer.Options{Concurrency: conc, MaxDemand: 2 * conc, MinDemand: conc})
	if err != nil {
		return nil, err
	}
	return pipeline.From(producer.New(b.q, typ, producer.Options{BatchLimit: 256, Acceptors: b.o.Acceptors})).
		To(c).
		WithOptions(pipeline.Options{BatchFinish: !b.o.PerJobFinish, Express: b.o.Express}).
		Build()
}

// insertKeyed adds n jobs of key to typ, batch to a transaction.
func (b *run) insertKeyed(ctx context.Context, typ, key string, n, batch int) error {
	jobs := make([]fdbq.NewJob, 0, batch)
	for i := range n {
		jobs = append(jobs, fdbq.NewJob{Type: typ, ID: fmt.Sprintf("%s-%d", key, i), Key: key, Data: json.RawMessage(`{"n":1}`)})
		if len(jobs) == batch || i == n-1 {
			if _, err := b.q.AddBatch(ctx, b.db, jobs); err != nil {
				return err
			}
			jobs = jobs[:0]
		}
	}
	return nil
}

// newKey times the jobs of a new key against a backlog: it inserts
// o.Backlog jobs of the key "backlog", starts a pipeline, and once it
// works at full speed adds o.FairSamples jobs of the key "new", one at a
// time, each after the last one started.
func (b *run) newKey(ctx context.Context, typ string) error {
	if err := b.setType(ctx, typ); err != nil {
		return err
	}
	b.progress("fairness: inserting a backlog of %d jobs of one key", b.o.Backlog)
	if err := b.insertKeyed(ctx, typ, "backlog", b.o.Backlog, 1000); err != nil {
		return err
	}
	starts := make(chan time.Time, 1)
	var worked atomic.Int64
	progressed := make(chan struct{}, 1) // a job of the backlog was worked
	// At full speed once the first jobs are worked.
	warm, warmed := int64(min(b.o.Backlog/4, 10_000)), make(chan struct{})
	p, err := b.keyedPipeline(typ, b.o.Concurrency, func(key string) {
		if key == "new" {
			starts <- time.Now()
			return
		}
		if worked.Add(1) == warm {
			close(warmed)
		}
		select {
		case progressed <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return err
	}
	defer stopPipeline(p)
	if err := startUntil(ctx, p, warmed); err != nil {
		return err
	}
	b.progress("fairness: %d jobs of a new key, one at a time, against the backlog", b.o.FairSamples)
	samples := make([]time.Duration, 0, b.o.FairSamples)
	committed := make([]time.Duration, 0, b.o.FairSamples)
	w0, t0 := worked.Load(), time.Now()
	for i := range b.o.FairSamples {
		at := time.Now()
		if _, err := b.q.Add(ctx, b.db, fdbq.NewJob{Type: typ, ID: fmt.Sprint("new-", i), Key: "new"}); err != nil {
			return err
		}
		added := time.Now()
		select {
		case s := <-starts:
			samples = append(samples, s.Sub(at))
			committed = append(committed, max(s.Sub(added), 0))
		case <-time.After(time.Minute):
			return fmt.Errorf("bench: job new-%d did not start within a minute", i)
		case <-ctx.Done():
			return ctx.Err()
		}
		if worked.Load() >= int64(b.o.Backlog) {
			return fmt.Errorf("bench: the backlog ran out after %d samples; give a larger one", i)
		}
	}
	// The backlog's rate over the samples, and on until one of its jobs
	// was worked: a few samples can take less time than a loaded
	// machine's pause, and a rate of 0 would then say nothing.
	deadline := time.After(time.Minute)
	for worked.Load() == w0 {
		select {
		case <-progressed:
		case <-deadline:
			return fmt.Errorf("bench: no job of the backlog was worked within a minute of the samples")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r := &b.r.Fairness
	r.Backlog, r.Samples = b.o.Backlog, len(samples)
	r.BacklogRate = float64(worked.Load()-w0) / time.Since(t0).Seconds()
	slices.Sort(samples)
	r.NewP50Ms, r.NewP99Ms = percentileMs(samples, 50), percentileMs(samples, 99)
	r.NewMaxMs = percentileMs(samples, 100)
	slices.Sort(committed)
	r.NewCommittedP50Ms, r.NewCommittedP99Ms = percentileMs(committed, 50), percentileMs(committed, 99)
	return nil
}

// shares backlogs three keys of weights 1, 2 and 1 with o.Shares jobs
// each, works o.Shares jobs in all, and reports each key's share of them.
func (b *run) shares(ctx context.Context, typ string) error {
	s := b.settings()
	s.Keys = map[string]fdbq.KeyPolicy{"b": {Weight: 2}}
	if err := b.q.SetType(ctx, b.db, typ, s); err != nil {
		return err
	}
	b.progress("fairness: three keys of weights 1:2:1, %d jobs each", b.o.Shares)
	for _, key := range []string{"a", "b", "c"} {
		if err := b.insertKeyed(ctx, typ, key, b.o.Shares, 1000); err != nil {
			return err
		}
	}
	var (
		mu    sync.Mutex
		count = map[string]int{}
		total int
		done  = make(chan struct{})
	)
	p, err := b.keyedPipeline(typ, b.o.Concurrency, func(key string) {
		mu.Lock()
		defer mu.Unlock()
		if total == b.o.Shares {
			return
		}
		count[key]++
		if total++; total == b.o.Shares {
			close(done)
		}
	})
	if err != nil {
		return err
	}
	defer stopPipeline(p)
	if err := startUntil(ctx, p, done); err != nil {
		return err
	}
	r := &b.r.Fairness
	r.SharesJobs, r.Shares = b.o.Shares, map[string]float64{}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range count {
		r.Shares[k] = float64(n) / float64(b.o.Shares)
	}
	return nil
}

// startUntil starts p and returns once done is closed or ctx ends.
func startUntil(ctx context.Context, p *pipeline.Pipeline, done <-chan struct{}) error {
	if err := p.Start(ctx); err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func stopPipeline(p *pipeline.Pipeline) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p.Stop(ctx)
}

// percentileMs is the p-th percentile of sorted samples, in ms.
func percentileMs(samples []time.Duration, p int) float64 {
	i := min(len(samples)-1, max(0, (len(samples)*p+99)/100-1))
	return float64(samples[i]) / float64(time.Millisecond)
}

// mixed inserts o.Jobs jobs spread over o.Types types and works them with
// a pipeline per type, each of an equal part of the concurrency, at once.
func (b *run) mixed(ctx context.Context) error {
	n, types := b.o.Jobs, b.o.Types
	per := max(n/types, 1)
	conc := max(b.o.Concurrency/types, 4)
	b.progress("mixed: inserting %d jobs of each of %d types", per, types)
	var handled atomic.Int64
	done := make(chan struct{})
	var pipes []*pipeline.Pipeline
	for i := range types {
		typ := fmt.Sprintf("mixed-%02d", i)
		if err := b.setType(ctx, typ); err != nil {
			return err
		}
		if err := b.insert(ctx, typ, "m", 0, per, 1000); err != nil {
			return err
		}
		p, err := b.pipeline(typ, conc, func() {
			if handled.Add(1) == int64(per*types) {
				close(done)
			}
		})
		if err != nil {
			return err
		}
		pipes = append(pipes, p)
	}
	t0 := time.Now()
	for _, p := range pipes {
		if err := p.Start(ctx); err != nil {
			return err
		}
		defer stopPipeline(p)
	}
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	b.r.MixedTypes, b.r.MixedJobs = types, per*types
	b.r.MixedSeconds = time.Since(t0).Seconds()
	b.r.MixedJobsPerSec = float64(per*types) / b.r.MixedSeconds
	return nil
}
