package fdbq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
)

// The benchmarks run on the durable on-disk embedded store: every commit
// waits for its fsync, shared by the commits that arrive together (group
// commit), so the figures are what a deployment on one machine gets.

const benchType = "bench"

var benchData = json.RawMessage(`{"to":"someone@example.com","template":"welcome"}`)

func benchQueue(b *testing.B) *fdbq.Queue {
	b.Helper()
	db := openDisk(b, b.TempDir())
	q := fdbq.New(db, fdbq.Options{})
	s := fdbq.DefaultTypeSettings()
	s.ActivityTimeout = time.Hour
	if err := q.SetType(context.Background(), db, benchType, s); err != nil {
		b.Fatal(err)
	}
	return q
}

// benchFill adds n jobs in batches of 1000.
func benchFill(b *testing.B, q *fdbq.Queue, n int) {
	b.Helper()
	for i := 0; i < n; i += 1000 {
		jobs := make([]fdbq.NewJob, min(1000, n-i))
		for j := range jobs {
			jobs[j] = fdbq.NewJob{Type: benchType, Data: benchData}
		}
		if _, err := q.AddBatch(context.Background(), q.DB(), jobs); err != nil {
			b.Fatal(err)
		}
	}
}

// benchStats is a copy of a DB's counters, to report what a benchmark's
// timed part cost.
type benchStats struct{ tx, commits, conflicts int64 }

func statsOf(db *kv.DB) benchStats {
	s := db.Stats()
	return benchStats{s.Transactions.Load(), s.Commits.Load(), s.Conflicts.Load()}
}

// report adds jobs/s and the store's work per job to the benchmark's
// results.
func report(b *testing.B, db *kv.DB, before benchStats, jobs int) {
	after := statsOf(db)
	tx, conflicts := after.tx-before.tx, after.conflicts-before.conflicts
	b.ReportMetric(float64(jobs)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64(tx)/float64(jobs), "tx/job")
	b.ReportMetric(float64(after.commits-before.commits)/float64(jobs), "commits/job")
	b.ReportMetric(float64(conflicts)/float64(jobs), "conflicts/job")
	if tx > 0 {
		b.ReportMetric(float64(conflicts)/float64(tx), "conflicts/tx")
	}
}

// BenchmarkAdd measures adds, one job per transaction and 100 per
// transaction, from one goroutine, plain and unique (every job's data
// differs, so each is added: the cost is the digest, the unique entry's
// read and its write); b.N counts jobs.
func BenchmarkAdd(b *testing.B) {
	for _, c := range []struct {
		batch  int
		unique bool
	}{{1, false}, {100, false}, {1, true}, {100, true}} {
		batch := c.batch
		name := fmt.Sprintf("batch=%d", batch)
		if c.unique {
			name += "/unique"
		}
		b.Run(name, func(b *testing.B) {
			q := benchQueue(b)
			ctx := context.Background()
			before := statsOf(q.DB())
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				jobs := make([]fdbq.NewJob, min(batch, b.N-i))
				for j := range jobs {
					jobs[j] = fdbq.NewJob{Type: benchType, Data: benchData}
					if c.unique {
						jobs[j].Data = json.RawMessage(fmt.Sprintf(`{"n":%d,"to":"someone@example.com"}`, i+j))
						jobs[j].Unique = &fdbq.Unique{Fields: []string{"n"}}
					}
				}
				if _, err := q.AddBatch(ctx, q.DB(), jobs); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			report(b, q.DB(), before, b.N)
		})
	}
}

// BenchmarkAcceptFinish measures the worker's path: accept (up to 16 at a
// time, waiting on the watch when idle) and finish each job in its own
// transaction, with 1 and 32 workers; b.N jobs are added before the
// timer starts.
//
// followed=true runs the same with a Follow of the type reading every
// event: what keeping the event log costs a job (an entry per change,
// and the reads of a follower).
func BenchmarkAcceptFinish(b *testing.B) {
	for _, c := range []struct {
		workers  int
		followed bool
	}{{1, false}, {32, false}, {1, true}, {32, true}} {
		name := fmt.Sprintf("workers=%d", c.workers)
		if c.followed {
			name += "/followed"
		}
		workers := c.workers
		b.Run(name, func(b *testing.B) {
			q := benchQueue(b)
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			if c.followed {
				ready := make(chan struct{})
				followed := make(chan error, 1)
				go func() {
					followed <- q.Follow(ctx, fdbq.FollowOptions{Types: []string{benchType}}, func(e fdbq.Event) error {
						if e.Kind == fdbq.EventReady {
							close(ready)
						}
						return nil
					})
				}()
				<-ready
				defer func() { stop(); <-followed }()
			}
			benchFill(b, q, b.N)
			db := q.DB()
			var done atomic.Int64
			var wg sync.WaitGroup
			before := statsOf(db)
			b.ResetTimer()
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						ls, err := q.Accept(ctx, benchType, fdbq.AcceptOptions{Max: 16, Timeout: 100 * time.Millisecond})
						if err != nil {
							if ctx.Err() == nil {
								b.Errorf("accept: %v", err)
								stop()
							}
							return
						}
						for _, l := range ls {
							if err := q.Finish(context.Background(), db, l, nil); err != nil {
								b.Errorf("finish: %v", err)
								stop()
								return
							}
							if done.Add(1) == int64(b.N) {
								stop()
							}
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			report(b, db, before, b.N)
		})
	}
}

// BenchmarkAcceptConflicts measures how concurrent acceptors get in each
// other's way: 1, 8 and 32 goroutines accept one job at a time and do
// nothing else, so every conflict is two acceptors picking the same job.
// With the default window (4 due jobs, one picked at random) at most about
// 4 acceptors can succeed per commit round whatever their number; window=256
// shows what a wider window does. conflicts/tx is the share of accept
// transactions that failed with not_committed; conflicts/job is what each
// accepted job cost in retries.
func BenchmarkAcceptConflicts(b *testing.B) {
	for _, window := range []int{0, 256} {
		for _, acceptors := range []int{1, 8, 32} {
			name := fmt.Sprintf("acceptors=%d", acceptors)
			if window > 0 {
				if acceptors == 1 {
					continue // one acceptor has no one to conflict with
				}
				name += fmt.Sprintf("/window=%d", window)
			}
			b.Run(name, func(b *testing.B) {
				q := benchQueue(b)
				benchFill(b, q, b.N)
				db := q.DB()
				ctx := context.Background()
				var accepted atomic.Int64
				var wg sync.WaitGroup
				before := statsOf(db)
				b.ResetTimer()
				for range acceptors {
					wg.Add(1)
					go func() {
						defer wg.Done()
						// Every job is there from the start, so an accept
						// that finds none means all are taken.
						for {
							ls, err := q.Accept(ctx, benchType, fdbq.AcceptOptions{Window: window})
							if err != nil {
								b.Errorf("accept: %v", err)
								return
							}
							if len(ls) == 0 {
								return
							}
							accepted.Add(int64(len(ls)))
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				if n := accepted.Load(); n != int64(b.N) {
					b.Fatalf("accepted %d of %d jobs", n, b.N)
				}
				report(b, db, before, b.N)
			})
		}
	}
}

// BenchmarkAcceptManyPriorities measures one accept of one job when
// 10,000 jobs not yet due wait at 10,000 priorities of their own, all
// above the due ones (b.N of them, at priority 0): what an accept reads
// must not grow with the number of priorities or scheduled times. It
// reports the store reads of each accept: point reads, range reads and
// the keys those returned.
func BenchmarkAcceptManyPriorities(b *testing.B) {
	q := benchQueue(b)
	ctx := context.Background()
	const priorities = 10_000
	now := time.Now()
	for i := 0; i < priorities; i += 1000 {
		jobs := make([]fdbq.NewJob, 1000)
		for j := range jobs {
			jobs[j] = fdbq.NewJob{Type: benchType, Data: benchData, Priority: i + j + 1, ScheduledAt: now.Add(time.Hour)}
		}
		if _, err := q.AddBatch(ctx, q.DB(), jobs); err != nil {
			b.Fatal(err)
		}
	}
	benchFill(b, q, b.N)
	cdb, counts := countingDB(q.DB())
	cq := fdbq.New(cdb, fdbq.Options{})
	before := statsOf(cdb)
	b.ResetTimer()
	for range b.N {
		ls, err := cq.Accept(ctx, benchType, fdbq.AcceptOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if len(ls) != 1 || ls[0].Priority != 0 {
			b.Fatalf("accepted %d jobs, want one due job", len(ls))
		}
	}
	b.StopTimer()
	report(b, cdb, before, b.N)
	gets, ranges, keys := counts.snapshot()
	b.ReportMetric(float64(gets)/float64(b.N), "gets/op")
	b.ReportMetric(float64(ranges)/float64(b.N), "ranges/op")
	b.ReportMetric(float64(keys)/float64(b.N), "keys/op")
}

// BenchmarkScheduleTick measures what a periodic job costs: a tick
// transaction of a one-second schedule on the durable store, with one tick
// due per transaction (the clock moved a second each time) and with 100
// due (moved 100 seconds, within the grace); b.N counts jobs added.
func BenchmarkScheduleTick(b *testing.B) {
	for _, perTx := range []int{1, 100} {
		b.Run(fmt.Sprintf("ticks=%d", perTx), func(b *testing.B) {
			db := openDisk(b, b.TempDir())
			c := newClock()
			c.now = c.now.Truncate(time.Second)
			q := fdbq.New(db, fdbq.Options{Now: c.Now})
			ctx := context.Background()
			if err := q.SetType(ctx, db, benchType, fdbq.DefaultTypeSettings()); err != nil {
				b.Fatal(err)
			}
			s := fdbq.Schedule{Name: "bench", Every: time.Second, Grace: time.Hour, Job: fdbq.NewJob{Type: benchType, Data: benchData}}
			if err := q.DeclareSchedule(ctx, db, s); err != nil {
				b.Fatal(err)
			}
			before := statsOf(db)
			b.ResetTimer()
			for n := 0; n < b.N; {
				c.Advance(time.Duration(min(perTx, b.N-n)) * time.Second)
				t, err := q.TickSchedule(ctx, db, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if len(t.Jobs) == 0 {
					b.Fatal("no tick")
				}
				n += len(t.Jobs)
			}
			b.StopTimer()
			report(b, db, before, b.N)
		})
	}
}

// benchWorkflow is a fan-out and fan-in of n jobs: a root, n-2 jobs that
// depend on it, and a sink that depends on them all.
func benchWorkflow(id string, n int) fdbq.NewWorkflow {
	w := fdbq.NewWorkflow{ID: id, Jobs: []fdbq.WorkflowJob{{Name: "root", Job: fdbq.NewJob{Type: benchType, Data: benchData}}}}
	var mid []string
	for i := range n - 2 {
		name := fmt.Sprintf("m%d", i)
		mid = append(mid, name)
		w.Jobs = append(w.Jobs, fdbq.WorkflowJob{Name: name, Job: fdbq.NewJob{Type: benchType, Data: benchData}, DependsOn: []string{"root"}})
	}
	return fdbq.NewWorkflow{ID: id, Jobs: append(w.Jobs, fdbq.WorkflowJob{Name: "sink", Job: fdbq.NewJob{Type: benchType, Data: benchData}, DependsOn: mid})}
}

// BenchmarkWorkflow measures what a workflow costs a job: adding
// workflows of 100 jobs (a fan-out and fan-in: root, 98 jobs after it, a
// sink after them), and working them with one worker as
// BenchmarkAcceptFinish does plain jobs (accept up to 16, finish each in
// its own transaction; a finish adds the dependents its job was the last
// dependency of). b.N counts jobs.
func BenchmarkWorkflow(b *testing.B) {
	const size = 100
	b.Run("add", func(b *testing.B) {
		q := benchQueue(b)
		before := statsOf(q.DB())
		b.ResetTimer()
		for i := 0; i < b.N; i += size {
			if _, err := q.AddWorkflow(context.Background(), q.DB(), benchWorkflow(fmt.Sprintf("w%d", i), size)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		report(b, q.DB(), before, b.N)
	})
	b.Run("run", func(b *testing.B) {
		q := benchQueue(b)
		ctx := context.Background()
		n := (b.N + size - 1) / size
		for i := range n {
			if _, err := q.AddWorkflow(ctx, q.DB(), benchWorkflow(fmt.Sprintf("w%d", i), size)); err != nil {
				b.Fatal(err)
			}
		}
		before := statsOf(q.DB())
		b.ResetTimer()
		for done := 0; done < n*size; {
			ls, err := q.Accept(ctx, benchType, fdbq.AcceptOptions{Max: 16})
			if err != nil {
				b.Fatal(err)
			}
			if len(ls) == 0 {
				b.Fatalf("no job due after %d of %d", done, n*size)
			}
			for _, l := range ls {
				if err := q.Finish(ctx, q.DB(), l, nil); err != nil {
					b.Fatal(err)
				}
				done++
			}
		}
		b.StopTimer()
		report(b, q.DB(), before, n*size)
	})
}
