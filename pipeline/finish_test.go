package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/kvtest"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// TestBatchFinish runs many jobs through a pipeline with and without
// Options.BatchFinish; all finish either way. The commits per job are
// reported, not asserted: they depend on how outcomes happen to coincide.
func TestBatchFinish(t *testing.T) {
	const n = 1000
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprint("BatchFinish=", batch), func(t *testing.T) {
			e := newEnv(t, envOptions{})
			all := jobIDs("f", n)
			e.add(t, newJobs(all, `{"x":1}`)...)
			var handled atomic.Int64
			done := make(chan struct{})
			c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[map[string]int]) (int, error) {
				if handled.Add(1) == n {
					close(done)
				}
				return j.Data["x"], nil
			}, consumer.Options{Concurrency: 32, MaxDemand: 64})
			st := e.db.Stats()
			tx0, commits0 := st.Transactions.Load(), st.Commits.Load()
			e.start(t, pipeline.From(e.producer(producer.Options{})).WithOptions(pipeline.Options{BatchFinish: batch}).To(c))
			recv(t, done, "all handlers")
			e.waitStore(t, "all finished", func() bool { return e.count(t, fdbq.Finished) == n })
			tx, commits := st.Transactions.Load()-tx0, st.Commits.Load()-commits0
			succeeded := 0
			page, err := e.q.List(context.Background(), e.db, "t", fdbq.ListOptions{State: fdbq.Finished, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range page.Jobs {
				if j.Outcome == fdbq.Succeeded && string(j.Result) == "1" && j.Attempts == 1 {
					succeeded++
				}
			}
			if succeeded != n {
				t.Fatalf("%d of %d jobs succeeded once", succeeded, n)
			}
			// The count includes the waits' own transactions (a handful).
			t.Logf("BatchFinish=%v: %.2f commits and %.2f transactions per job (accept+finish)", batch, float64(commits)/n, float64(tx)/n)
		})
	}
}

// TestPipelineUnderStoreFaults runs a pipeline over a store that fails
// commits with conflicts, transaction_too_old and commit_unknown_result
// (applied or not): every job is handled exactly once and succeeds.
func TestPipelineUnderStoreFaults(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprint("BatchFinish=", batch), func(t *testing.T) {
			st, err := embedded.Open("", embedded.Options{InMemory: true})
			if err != nil {
				t.Fatal(err)
			}
			fo := kvtest.DefaultFaultOptions(int64(len(t.Name())))
			fo.DelayRate = 0
			// High enough that the faults the test is about happen even in
			// a run that needs only ~100 commits (batched finishes).
			fo.UnknownAppliedRate, fo.ConflictRate = 0.08, 0.08
			faulty := kvtest.NewFaultyBackend(st, fo)
			db := kv.NewDB(faulty, kv.Options{})
			defer db.Close()
			q := fdbq.New(db, fdbq.Options{})
			ctx := context.Background()
			faulty.SetEnabled(false)
			if err := q.SetType(ctx, db, "t", fdbq.DefaultTypeSettings()); err != nil {
				t.Fatal(err)
			}
			const n = 300
			all := jobIDs("u", n)
			if _, err := q.AddBatch(ctx, db, func() []fdbq.NewJob {
				js := newJobs(all, "")
				for i := range js {
					js[i].Type = "t"
				}
				return js
			}()); err != nil {
				t.Fatal(err)
			}
			faulty.SetEnabled(true)

			var mu sync.Mutex
			runs := map[string]int{}
			done := make(chan struct{})
			c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (string, error) {
				mu.Lock()
				defer mu.Unlock()
				runs[j.ID]++
				if len(runs) == n && runs[j.ID] == 1 {
					close(done)
				}
				return "ok", nil
			}, consumer.Options{Concurrency: 8, MaxDemand: 16})
			p, err := pipeline.From(producer.New(q, "t", producer.Options{BatchLimit: 10})).
				WithOptions(pipeline.Options{BatchFinish: batch}).To(c).Build()
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Start(ctx); err != nil {
				t.Fatal(err)
			}
			recv(t, done, "every job handled")
			wctx, cancel := context.WithTimeout(ctx, waitLimit)
			defer cancel()
			res, err := q.Wait(wctx, "t", all, fdbq.Finished)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			faulty.SetEnabled(false)
			for _, r := range res {
				if r.Err != nil || r.Job.Outcome != fdbq.Succeeded || r.Job.Attempts != 1 {
					t.Errorf("job: %+v %v", r.Job, r.Err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range all {
				if runs[id] != 1 {
					t.Errorf("job %s handled %d times", id, runs[id])
				}
			}
			fc := faulty.Counts()
			t.Logf("faults: %+v", fc)
			if fc.UnknownApplied == 0 || fc.Conflicts == 0 {
				t.Errorf("the faults this test is about did not happen: %+v", fc)
			}
		})
	}
}
