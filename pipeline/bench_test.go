package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// BenchmarkThroughput measures no-op jobs end to end on the durable
// on-disk embedded store (every commit fsynced): b.N jobs enqueued with
// AddBatch (1000 per transaction), then burnt down by a pipeline. It
// reports jobs/s for the whole run and for the burn-down alone, the
// burn-down's CPU time per job, and store transactions, commits and
// conflicts per job.
//
//	go test -run '^$' -bench Throughput -benchtime 20000x ./pipeline/
//
// A handler holds its slot until its outcome is committed, so on a store
// whose commits wait for an fsync the throughput is about concurrency /
// commit latency; the benchmark runs two concurrencies to show it.
func BenchmarkThroughput(b *testing.B) {
	for _, conc := range []int{16, 256} {
		for _, batch := range []bool{false, true} {
			b.Run(fmt.Sprintf("concurrency=%d/BatchFinish=%v", conc, batch), func(b *testing.B) {
				benchThroughput(b, conc, batch)
			})
		}
	}
}

func benchThroughput(b *testing.B, conc int, batchFinish bool) {
	e := newEnv(b, envOptions{dir: b.TempDir()})
	ctx := context.Background()
	n := b.N
	var handled atomic.Int64
	done := make(chan struct{})
	c := mustConsumer(b, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (struct{}, error) {
		if handled.Add(1) == int64(n) {
			close(done)
		}
		return struct{}{}, nil
	}, consumer.Options{Concurrency: conc, MaxDemand: 2 * conc, MinDemand: conc})
	p, err := pipeline.From(e.producer(producer.Options{BatchLimit: 256})).
		WithOptions(pipeline.Options{BatchFinish: batchFinish}).To(c).Build()
	if err != nil {
		b.Fatal(err)
	}
	st := e.db.Stats()
	b.ResetTimer()
	start := time.Now()
	tx0, commits0, conflicts0 := st.Transactions.Load(), st.Commits.Load(), st.Conflicts.Load()

	const chunk = 1000
	jobs := make([]fdbq.NewJob, 0, chunk)
	for i := 0; i < n; i++ {
		jobs = append(jobs, fdbq.NewJob{Type: "t", ID: fmt.Sprint("b", i)})
		if len(jobs) == chunk || i == n-1 {
			if _, err := e.q.AddBatch(ctx, e.db, jobs); err != nil {
				b.Fatal(err)
			}
			jobs = jobs[:0]
		}
	}
	enqueued := time.Now()
	cpu0 := processCPU()
	txAdd := st.Transactions.Load() - tx0
	if err := p.Start(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("handled %d of %d", handled.Load(), n)
	}
	// Stop returns once every handler's outcome is committed.
	if err := p.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	end := time.Now()
	burnCPU := processCPU() - cpu0
	b.StopTimer()
	tx, commits := st.Transactions.Load()-tx0, st.Commits.Load()-commits0
	conflicts := st.Conflicts.Load() - conflicts0
	if fin := e.count(b, fdbq.Finished); fin != int64(n) {
		b.Fatalf("%d of %d finished", fin, n)
	}
	b.ReportMetric(float64(n)/end.Sub(start).Seconds(), "jobs/s")
	b.ReportMetric(float64(n)/end.Sub(enqueued).Seconds(), "burn-jobs/s")
	b.ReportMetric(float64(tx)/float64(n), "tx/job")
	b.ReportMetric(float64(tx-txAdd)/float64(n), "work-tx/job")
	b.ReportMetric(float64(commits)/float64(n), "commits/job")
	b.ReportMetric(float64(conflicts)/float64(n), "conflicts/job")
	if burnCPU > 0 {
		// CPU time rather than wall time: on a shared machine the other
		// processes slow the burn-down, but hardly change what it costs.
		b.ReportMetric(float64(burnCPU.Microseconds())/float64(n), "burn-cpu-µs/job")
	}
}

// BenchmarkEnqueueToStart measures the latency from the call that adds a
// job to its handler starting, with the pipeline idle (parked on the
// type's watch key) before each add, on the durable on-disk store. The
// add's own durable commit is part of it; wake-p50/p99 start from the
// add's return.
//
//	go test -run '^$' -bench EnqueueToStart -benchtime 500x ./pipeline/
func BenchmarkEnqueueToStart(b *testing.B) {
	e := newEnv(b, envOptions{dir: b.TempDir()})
	ctx := context.Background()
	starts := make(chan time.Time, 1)
	c := mustConsumer(b, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (struct{}, error) {
		starts <- time.Now()
		return struct{}{}, nil
	}, consumer.Options{Concurrency: 4})
	p, err := pipeline.From(e.producer(producer.Options{})).To(c).Build()
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer p.Stop(ctx)
	total := make([]time.Duration, 0, b.N)
	wake := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// Idle: the producer has parked on its watch, and the previous
		// job's outcome is committed.
		e.spy.waitArmed(b, i+1)
		if i > 0 {
			e.waitFinished(b, fmt.Sprint("l", i-1))
		}
		b.StartTimer()
		t0 := time.Now()
		if _, err := e.q.Add(ctx, e.db, fdbq.NewJob{Type: "t", ID: fmt.Sprint("l", i)}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		s := recv(b, starts, "the handler")
		total = append(total, s.Sub(t0))
		wake = append(wake, s.Sub(t1))
	}
	b.StopTimer()
	b.ReportMetric(percentileMs(total, 50), "p50-ms")
	b.ReportMetric(percentileMs(total, 99), "p99-ms")
	b.ReportMetric(percentileMs(wake, 50), "wake-p50-ms")
	b.ReportMetric(percentileMs(wake, 99), "wake-p99-ms")
}

func percentileMs(ds []time.Duration, p int) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, (len(s)*p+99)/100-1)
	return float64(s[max(i, 0)]) / float64(time.Millisecond)
}
