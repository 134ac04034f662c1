package fdbq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/kvtest"
)

// openDisk opens a durable embedded store in dir; the test closes it.
func openDisk(t testing.TB, dir string) *kv.DB {
	t.Helper()
	st, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	t.Cleanup(func() { db.Close() })
	return db
}

const concType = "conc"

// concSettings: an activity timeout far beyond the test's length, so the
// only way a job can reach two workers is a bug in Accept or Finish, not a
// recycle.
func concSettings() fdbq.TypeSettings {
	s := fdbq.DefaultTypeSettings()
	s.ActivityTimeout = time.Hour
	return s
}

func concID(i int) string { return fmt.Sprintf("job-%06d", i) }

// concIndex is the number in a job id; the ids are the test's own, so a
// bad one is a corrupt record and panics.
func concIndex(id string) int {
	i, err := strconv.Atoi(strings.TrimPrefix(id, "job-"))
	if err != nil {
		panic(fmt.Sprintf("unexpected job id %q", id))
	}
	return i
}

// concLedger records, per job, what the workers saw.
type concLedger struct {
	mu sync.Mutex
	// delivered counts the leases Accept returned for the job. Without
	// recycling each job must be delivered once: a second lease means two
	// workers ran it.
	delivered []int
	// finishedBy is the lock of every lease whose Finish returned nil.
	finishedBy [][]string
	// acceptGaveUp counts accepts that failed at the retry limit, every
	// attempt a conflict with other acceptors.
	acceptGaveUp atomic.Int64
	// repeats counts second finishes by the same lease (concRun).
	repeats atomic.Int64
}

// sleepCtx waits for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func newLedger(n int) *concLedger {
	return &concLedger{delivered: make([]int, n), finishedBy: make([][]string, n)}
}

// concRun is one run of the concurrency test.
type concRun struct {
	jobs, workers, max, window, addBatch int
	// repeatFinish: every tenth job's worker finishes it a second time
	// with the same lease, as a worker retrying a finish whose outcome it
	// did not learn would.
	repeatFinish bool
	// groups > 0 spreads the workers over that many accept groups, as
	// several processes each running a producer would be.
	groups int
	// scheduled > 0 schedules each job up to that long after it is added,
	// at a random priority, so that jobs come due in the scheduled index
	// while workers take others.
	scheduled time.Duration
}

// runConcurrent adds r.jobs jobs in batches while r.workers workers accept
// (up to r.max at a time) and finish them, and returns what the workers
// saw. The producer runs alongside the workers, so adds race with accepts
// and finishes as they would in production, and idle workers really wait
// on the watch key for the next batch.
func runConcurrent(t *testing.T, q *fdbq.Queue, r concRun) *concLedger {
	t.Helper()
	db := q.DB()
	led := newLedger(r.jobs)
	// A generous deadline turns a lost or stuck job into a failure that
	// names the missing jobs rather than a test timeout.
	deadline, cancelDeadline := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancelDeadline()
	ctx, stop := context.WithCancel(deadline)
	defer stop()

	var finished atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, r.workers+1)

	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < r.jobs; i += r.addBatch {
			batch := make([]fdbq.NewJob, 0, r.addBatch)
			for j := i; j < min(i+r.addBatch, r.jobs); j++ {
				nj := fdbq.NewJob{Type: concType, ID: concID(j), Data: json.RawMessage(`{"n":` + strconv.Itoa(j) + `}`)}
				if r.scheduled > 0 {
					nj.ScheduledAt = time.Now().Add(rand.N(r.scheduled))
					nj.Priority = rand.IntN(2)
				}
				batch = append(batch, nj)
			}
			if _, err := q.AddBatch(deadline, db, batch); err != nil {
				errc <- fmt.Errorf("add batch at %d: %w", i, err)
				stop()
				return
			}
		}
	}()

	groups := make([]*fdbq.AcceptGroup, r.groups)
	for i := range groups {
		groups[i] = &fdbq.AcceptGroup{}
	}
	for w := 0; w < r.workers; w++ {
		var group *fdbq.AcceptGroup
		if r.groups > 0 {
			group = groups[w%r.groups]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				// The timeout makes an idle worker wait on the type's watch
				// key instead of polling; it returns early when a batch is
				// added, and the cancel below ends the wait when all is done.
				leases, err := q.Accept(ctx, concType, fdbq.AcceptOptions{Max: r.max, Window: r.window, Timeout: 250 * time.Millisecond, Group: group})
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					if errors.Is(err, kv.ErrRetryLimit) && errors.Is(err, kv.ErrNotCommitted) {
						// Every attempt lost to other acceptors that took
						// the same jobs first; none of the attempts
						// committed, so nothing was taken. A worker backs
						// off and accepts again (package producer does
						// the same).
						led.acceptGaveUp.Add(1)
						sleepCtx(ctx, time.Duration(10+rand.IntN(90))*time.Millisecond)
						continue
					}
					errc <- fmt.Errorf("accept: %w", err)
					stop()
					return
				}
				for _, l := range leases {
					i := concIndex(l.ID)
					led.mu.Lock()
					led.delivered[i]++
					led.mu.Unlock()
					// The result names the lease, so the store shows which
					// lease's finish it kept. Finish runs on the deadline
					// context, not ctx: the cancel at the end must not cut
					// a finish short.
					res, _ := json.Marshal(l.Lock)
					if err := q.Finish(deadline, db, l, res); err != nil {
						errc <- fmt.Errorf("finish %s (lock %s): %w", l.ID, l.Lock, err)
						stop()
						return
					}
					led.mu.Lock()
					led.finishedBy[i] = append(led.finishedBy[i], l.Lock)
					led.mu.Unlock()
					if r.repeatFinish && i%10 == 0 {
						// The lease's exit is recorded, so the repeat
						// succeeds and writes nothing; it is not counted
						// as a second finish: it is the same lease.
						if err := q.Finish(deadline, db, l, json.RawMessage(`"repeat"`)); err != nil {
							errc <- fmt.Errorf("repeated finish %s (lock %s): %w", l.ID, l.Lock, err)
							stop()
							return
						}
						led.repeats.Add(1)
					}
					if finished.Add(1) == int64(r.jobs) {
						stop()
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if err := deadline.Err(); err != nil {
		t.Errorf("deadline: %d of %d jobs finished", finished.Load(), r.jobs)
	}
	if n := led.acceptGaveUp.Load(); n > 0 {
		t.Logf("%d accepts gave up at the retry limit, every attempt a conflict", n)
	}
	return led
}

// checkConcurrent checks the invariants after a run: every job delivered
// to one lease and finished by that lease, the store's counters and
// indexes agree that all jobs are finished and none pending or running,
// and listing the finished jobs gives back exactly the ids added.
func checkConcurrent(t *testing.T, q *fdbq.Queue, led *concLedger) {
	t.Helper()
	ctx := context.Background()
	db := q.DB()
	n := len(led.delivered)
	bad := 0
	for i := range n {
		// "Finished exactly once" is about leases and the store, not
		// about calls returning nil. Under commit_unknown_result a Finish
		// whose commit applied is retried inside the call, finds its own
		// exit recorded ("lock:finish"), writes nothing and returns nil;
		// a worker repeating a Finish with the same lease (repeatFinish)
		// gets nil the same way. Both are the one lease finishing the job
		// once, and the ledger records a lease once. What must never
		// happen is a job delivered to two leases, or two different
		// leases each told that their Finish took: that is a job run
		// twice. The store side is checked below: one attempt, and the
		// result of the first Finish of the one lease.
		if led.delivered[i] != 1 || len(led.finishedBy[i]) != 1 {
			if bad++; bad <= 10 {
				t.Errorf("%s: delivered %d times, finished by %d leases %v", concID(i), led.delivered[i], len(led.finishedBy[i]), led.finishedBy[i])
			}
		}
	}
	for _, c := range []struct {
		st   fdbq.State
		want int64
	}{{fdbq.Pending, 0}, {fdbq.Running, 0}, {fdbq.Finished, int64(n)}} {
		got, err := q.Count(ctx, db, concType, c.st)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("count %s = %d, want %d", c.st, got, c.want)
		}
	}
	for _, st := range []fdbq.State{fdbq.Pending, fdbq.Running} {
		page, err := q.List(ctx, db, concType, fdbq.ListOptions{State: st, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			t.Errorf("job %s left %s (attempts %d)", j.ID, st, j.Attempts)
		}
	}
	// The finished index, read page by page, must hold every added id
	// once, each finished by the one lease that the workers saw finish it.
	seen := make([]bool, n)
	listed := 0
	cursor := ""
	for {
		page, err := q.List(ctx, db, concType, fdbq.ListOptions{State: fdbq.Finished, Limit: 1000, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			i := concIndex(j.ID)
			listed++
			if seen[i] {
				t.Errorf("%s listed twice among finished jobs", j.ID)
				continue
			}
			seen[i] = true
			var lock string
			_ = json.Unmarshal(j.Result, &lock)
			// One attempt: the job was accepted once. The result is the
			// one lease's that finished it.
			if j.State != fdbq.Finished || j.Outcome != fdbq.Succeeded || j.Attempts != 1 || j.Resubmitted ||
				len(led.finishedBy[i]) != 1 || lock != led.finishedBy[i][0] {
				if bad++; bad <= 20 {
					t.Errorf("%s: %s/%s attempts %d resubmitted %v result %s, finished by %v",
						j.ID, j.State, j.Outcome, j.Attempts, j.Resubmitted, j.Result, led.finishedBy[i])
				}
			}
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	if listed != n {
		t.Errorf("listed %d finished jobs, want %d", listed, n)
	}
	for i, ok := range seen {
		if !ok {
			if bad++; bad <= 30 {
				t.Errorf("%s lost: not among the finished jobs", concID(i))
			}
		}
	}
}

// concJobs is 50,000, or 5,000 under -short.
func concJobs() int {
	if testing.Short() {
		return 5_000
	}
	return 50_000
}

// logStats logs what the run cost the store.
func logStats(t *testing.T, db *kv.DB, jobs int, took time.Duration) {
	s := db.Stats()
	tx, conflicts := s.Transactions.Load(), s.Conflicts.Load()
	t.Logf("%d jobs in %v (%.0f jobs/s): %d transactions (%.2f per job), %d commits, %d retries, %d conflicts (%.1f%% of transactions)",
		jobs, took.Round(time.Millisecond), float64(jobs)/took.Seconds(), tx, float64(tx)/float64(jobs),
		s.Commits.Load(), s.Retries.Load(), conflicts, 100*float64(conflicts)/float64(max(tx, 1)))
}

// TestConcurrentAcceptFinish: 32 workers accept and finish 50,000 jobs on
// the durable store while a producer adds them; each job runs once, none
// is lost or left behind.
func TestConcurrentAcceptFinish(t *testing.T) {
	db := openDisk(t, t.TempDir())
	q := fdbq.New(db, fdbq.Options{})
	if err := q.SetType(context.Background(), db, concType, concSettings()); err != nil {
		t.Fatal(err)
	}
	r := concRun{jobs: concJobs(), workers: 32, max: 16, addBatch: 1000}
	start := time.Now()
	led := runConcurrent(t, q, r)
	logStats(t, db, r.jobs, time.Since(start))
	checkConcurrent(t, q, led)
}

// TestConcurrentAcceptFinishFaults is the same through a store that
// injects conflicts, transaction_too_old, and commit_unknown_result both
// after commits that applied and after commits that did not. The retries
// of Add, Accept and Finish after a commit that applied must not add,
// deliver or finish a job twice. The workers accept in four groups, as
// four processes' producers would: each group's accepts skip each
// other's picks, and the groups contend.
func TestConcurrentAcceptFinishFaults(t *testing.T) {
	inner := openDisk(t, t.TempDir())
	db, fb := kvtest.NewFaultyDB(inner, kvtest.FaultOptions{
		Seed:                  20240611,
		ConflictRate:          0.03,
		TooOldRate:            0.02,
		UnknownNotAppliedRate: 0.02,
		UnknownAppliedRate:    0.03,
	})
	q := fdbq.New(db, fdbq.Options{})
	if err := q.SetType(context.Background(), db, concType, concSettings()); err != nil {
		t.Fatal(err)
	}
	// Smaller add batches: each record an AddBatch reads may fail with an
	// injected too-old read, so a batch of 1000 would rarely get through.
	r := concRun{jobs: concJobs(), workers: 32, max: 16, addBatch: 250, repeatFinish: true, groups: 4}
	start := time.Now()
	led := runConcurrent(t, q, r)
	logStats(t, db, r.jobs, time.Since(start))
	c := fb.Counts()
	t.Logf("faults: %+v", c)
	// Faults off for the checks, which are not what is under test.
	fb.SetEnabled(false)
	checkConcurrent(t, q, led)
	if c.Conflicts == 0 || c.TooOld == 0 || c.UnknownApplied == 0 || c.UnknownNotApplied == 0 {
		t.Errorf("not every fault kind was injected: %+v", c)
	}
	if led.repeats.Load() == 0 {
		t.Error("no finish was repeated")
	}
}

// TestAddRetryAfterOthersMovedOn: an Add whose commit applied but reported
// commit_unknown_result is retried; if a worker accepted (or accepted and
// finished) the job in between, the retry must not resubmit or re-add it,
// or the job runs twice.
func TestAddRetryAfterOthersMovedOn(t *testing.T) {
	for _, between := range []string{"accepted", "finished"} {
		t.Run(between, func(t *testing.T) {
			st, err := embedded.Open("", embedded.Options{InMemory: true})
			if err != nil {
				t.Fatal(err)
			}
			b := &commitHookBackend{Backend: st}
			db := kv.NewDB(b, kv.Options{})
			t.Cleanup(func() { db.Close() })
			ctx := context.Background()
			q := fdbq.New(db, fdbq.Options{})
			if err := q.SetType(ctx, db, concType, concSettings()); err != nil {
				t.Fatal(err)
			}
			var lease *fdbq.Lease
			hook := func() {
				ls, err := q.Accept(ctx, concType, fdbq.AcceptOptions{})
				if err != nil || len(ls) != 1 {
					t.Errorf("accept between: %v %v", ls, err)
					return
				}
				lease = ls[0]
				if between == "finished" {
					if err := q.Finish(ctx, db, lease, nil); err != nil {
						t.Errorf("finish between: %v", err)
					}
				}
			}
			// A caller's id, then one Add makes before its transaction.
			for _, id := range []string{"caller-id", ""} {
				lease = nil
				b.unknownOnce(hook)
				if _, err := q.Add(ctx, db, fdbq.NewJob{Type: concType, ID: id}); err != nil {
					t.Fatal(err)
				}
				if lease == nil {
					t.Fatal("the add's commit did not run the hook")
				}
				if between == "accepted" {
					if err := q.Finish(ctx, db, lease, nil); err != nil {
						t.Fatalf("id %q: finish: %v", id, err)
					}
				}
				j, err := q.Get(ctx, db, concType, lease.ID)
				if err != nil {
					t.Fatal(err)
				}
				if j.State != fdbq.Finished || j.Resubmitted {
					t.Errorf("id %q: the add's retry after its commit applied left the job %s (resubmitted %v): it runs twice", id, j.State, j.Resubmitted)
				}
				if n, _ := q.Count(ctx, db, concType, fdbq.Pending); n != 0 {
					t.Errorf("id %q: %d jobs pending after the only one finished", id, n)
				}
				// The next round starts from an empty queue.
				if err := q.Remove(ctx, db, concType, lease.ID); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
