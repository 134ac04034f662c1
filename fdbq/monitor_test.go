package fdbq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/lifecycle"
	"github.com/jobstage/jobstage/internal/lifecycletest"
	"github.com/jobstage/jobstage/kv"
)

// The "email" type of newQueue times out after 30 s without a heartbeat.
const activityTimeout = fdbq.DefaultActivityTimeout

func sweep(t *testing.T, m *fdbq.Monitor) fdbq.SweepStats {
	t.Helper()
	st, err := m.Sweep(context.Background())
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	return st
}

func wantCount(t *testing.T, q *fdbq.Queue, s fdbq.State, want int64) {
	t.Helper()
	n, err := q.Count(context.Background(), q.DB(), "email", s)
	if err != nil || n != want {
		t.Fatalf("%s count %d (%v), want %d", s, n, err, want)
	}
}

func TestMonitorRecyclesJobWithoutHeartbeat(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	addJob(t, q, fdbq.NewJob{ID: "a"})
	l := acceptNoWait(t, q, fdbq.AcceptOptions{})[0]
	m := fdbq.NewMonitor(q, fdbq.MonitorOptions{Clock: c.Now})

	// The first sweep notes the store's version: the accept committed
	// before it. A timeout later by the monitor's clock, the job is stale.
	if st := sweep(t, m); st.Recycled != 0 {
		t.Fatalf("recycled by a monitor that just started: %+v", st)
	}
	c.Advance(activityTimeout - time.Millisecond)
	if st := sweep(t, m); st.Recycled != 0 {
		t.Fatalf("recycled before its timeout: %+v", st)
	}
	stateIs(t, q, "a", fdbq.Running)
	if err := q.Heartbeat(ctx, q.DB(), l, fdbq.HeartbeatOptions{}); err != nil {
		t.Fatalf("heartbeat before the timeout passed: %v", err)
	}
	if st := sweep(t, m); st.Recycled != 0 {
		t.Fatalf("recycled after a heartbeat: %+v", st)
	}
	c.Advance(activityTimeout - time.Millisecond)
	if st := sweep(t, m); st.Recycled != 0 {
		t.Fatalf("recycled before the heartbeat's timeout: %+v", st)
	}
	c.Advance(time.Millisecond)
	if st := sweep(t, m); st.Recycled != 1 || st.Failed != 0 || st.ByType["email"] != (fdbq.TypeSweepStats{Recycled: 1}) {
		t.Fatalf("sweep a timeout after the one that saw the heartbeat: %+v", st)
	}
	j := stateIs(t, q, "a", fdbq.Pending)
	if j.Attempts != 1 || !strings.Contains(j.Error, "activity timeout") {
		t.Fatalf("recycled job: attempts %d, error %q", j.Attempts, j.Error)
	}
	if !j.ScheduledAt.After(c.Now()) {
		t.Fatalf("recycled job runs again at %v, with no backoff after %v", j.ScheduledAt, c.Now())
	}
	wantCount(t, q, fdbq.Running, 0)
	wantCount(t, q, fdbq.Pending, 1)
	if st := sweep(t, m); st.Recycled != 0 || len(st.ByType) != 1 || st.ByType["email"] != (fdbq.TypeSweepStats{}) {
		t.Fatalf("second sweep recycled again, or left the type out: %+v", st)
	}

	// The old lease is dead for everything.
	if err := q.Heartbeat(ctx, q.DB(), l, fdbq.HeartbeatOptions{}); !errors.Is(err, fdbq.ErrHalt) {
		t.Fatalf("heartbeat of a recycled lease: %v", err)
	}
	if err := q.Finish(ctx, q.DB(), l, nil); !errors.Is(err, fdbq.ErrHalt) {
		t.Fatalf("finish of a recycled lease: %v", err)
	}
	if err := q.Fail(ctx, q.DB(), l, "x"); !errors.Is(err, fdbq.ErrHalt) {
		t.Fatalf("fail of a recycled lease: %v", err)
	}

	c.Advance(time.Hour)
	l2 := acceptNoWait(t, q, fdbq.AcceptOptions{})
	if len(l2) != 1 || l2[0].Attempts != 2 || l2[0].Lock == l.Lock {
		t.Fatalf("accept after recycle: %+v", l2)
	}
	// The new attempt holds the job; the old lease still does not.
	if err := q.Finish(ctx, q.DB(), l, nil); !errors.Is(err, fdbq.ErrHalt) {
		t.Fatalf("finish of the old lease after re-accept: %v", err)
	}
	if err := q.Finish(ctx, q.DB(), l2[0], nil); err != nil {
		t.Fatal(err)
	}
}

func TestMonitorRecycledAtMaxAttemptsFails(t *testing.T) {
	q, c := newQueue(t)
	addJob(t, q, fdbq.NewJob{ID: "a", MaxAttempts: 2})
	m := fdbq.NewMonitor(q, fdbq.MonitorOptions{Clock: c.Now})
	for attempt := 1; attempt <= 2; attempt++ {
		ls := acceptNoWait(t, q, fdbq.AcceptOptions{})
		if len(ls) != 1 || ls[0].Attempts != attempt {
			t.Fatalf("attempt %d: %+v", attempt, ls)
		}
		sweep(t, m)
		c.Advance(activityTimeout)
		st := sweep(t, m)
		if st.Recycled != 1 || st.Failed != attempt-1 {
			t.Fatalf("attempt %d: sweep %+v", attempt, st)
		}
		c.Advance(time.Hour)
	}
	j := stateIs(t, q, "a", fdbq.Finished)
	if j.Outcome != fdbq.Failed || j.Attempts != 2 || !strings.Contains(j.Error, "activity timeout") {
		t.Fatalf("job out of attempts: %+v", j)
	}
	wantCount(t, q, fdbq.Finished, 1)
	wantCount(t, q, fdbq.Running, 0)
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{}); len(ls) != 0 {
		t.Fatalf("failed job accepted again: %v", leaseIDsOf(ls))
	}
}

func TestMonitorHeartbeatKeepsJobAlive(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	addJob(t, q, fdbq.NewJob{ID: "a"})
	l := acceptNoWait(t, q, fdbq.AcceptOptions{})[0]
	m := fdbq.NewMonitor(q, fdbq.MonitorOptions{Clock: c.Now})
	sweep(t, m) // sees the accept

	c.Advance(20 * time.Second)
	if err := q.Heartbeat(ctx, q.DB(), l, fdbq.HeartbeatOptions{Progress: json.RawMessage(`{"done":1}`)}); err != nil {
		t.Fatal(err)
	}
	c.Advance(20 * time.Second) // 40 s since accept, 20 s since the heartbeat
	if st := sweep(t, m); st.Recycled != 0 {
		t.Fatalf("recycled a job that heartbeated: %+v", st)
	}
	if j := stateIs(t, q, "a", fdbq.Running); string(j.Progress) != `{"done":1}` {
		t.Fatalf("progress %s", j.Progress)
	}
	// The monitor learned of the heartbeat at its sweep 20 s after it,
	// and counts the timeout from there: a monitor takes a job back
	// between one timeout and one timeout and its period after the last
	// renewal.
	c.Advance(activityTimeout - 20*time.Second) // a timeout after the heartbeat
	if st := sweep(t, m); st.Recycled != 0 {
		t.Fatalf("recycled a timeout after the heartbeat, before a timeout after the sweep that saw it: %+v", st)
	}
	c.Advance(20*time.Second - time.Millisecond)
	if st := sweep(t, m); st.Recycled != 0 {
		t.Fatalf("recycled before a timeout after the sweep that saw the heartbeat: %+v", st)
	}
	c.Advance(time.Millisecond)
	if st := sweep(t, m); st.Recycled != 1 {
		t.Fatalf("not recycled a timeout after the sweep that saw the heartbeat: %+v", st)
	}
	if err := q.Heartbeat(ctx, q.DB(), l, fdbq.HeartbeatOptions{}); !errors.Is(err, fdbq.ErrHalt) {
		t.Fatalf("heartbeat after recycle: %v", err)
	}
}

func TestMonitorRetention(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	s := fdbq.DefaultTypeSettings()
	s.Retention = time.Hour
	if err := q.SetType(ctx, q.DB(), "email", s); err != nil {
		t.Fatal(err)
	}
	keep := fdbq.DefaultTypeSettings()
	keep.Retention = 0
	if err := q.SetType(ctx, q.DB(), "keep", keep); err != nil {
		t.Fatal(err)
	}
	addJob(t, q, fdbq.NewJob{ID: "old"})
	addJob(t, q, fdbq.NewJob{ID: "young"})
	addJob(t, q, fdbq.NewJob{ID: "pending", ScheduledAt: c.Now().Add(1000 * time.Hour)})
	addJob(t, q, fdbq.NewJob{Type: "keep", ID: "forever"})
	leases := map[string]*fdbq.Lease{}
	for _, l := range acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10}) {
		leases[l.ID] = l
	}
	kl, err := q.Accept(ctx, "keep", fdbq.AcceptOptions{})
	if err != nil || len(kl) != 1 {
		t.Fatalf("accept keep: %v %v", kl, err)
	}
	if err := q.Finish(ctx, q.DB(), kl[0], nil); err != nil {
		t.Fatal(err)
	}
	if err := q.Finish(ctx, q.DB(), leases["old"], nil); err != nil {
		t.Fatal(err)
	}
	c.Advance(30 * time.Minute)
	if err := q.Cancel(ctx, q.DB(), "email", "young"); err != nil {
		t.Fatal(err)
	}
	m := fdbq.NewMonitor(q, fdbq.MonitorOptions{Clock: c.Now})

	c.Advance(30*time.Minute - time.Millisecond) // old finished just under an hour ago
	if st := sweep(t, m); st.Expired != 0 {
		t.Fatalf("expired a job younger than the retention: %+v", st)
	}
	stateIs(t, q, "old", fdbq.Finished)
	c.Advance(2 * time.Millisecond)
	if st := sweep(t, m); st.Expired != 1 {
		t.Fatalf("sweep past old's retention: %+v", st)
	}
	if _, err := q.Get(ctx, q.DB(), "email", "old"); !errors.Is(err, fdbq.ErrNotFound) {
		t.Fatalf("old after retention: %v", err)
	}
	stateIs(t, q, "young", fdbq.Finished)
	wantCount(t, q, fdbq.Finished, 1)

	c.Advance(30 * time.Minute)
	if st := sweep(t, m); st.Expired != 1 {
		t.Fatalf("sweep past young's retention: %+v", st)
	}
	wantCount(t, q, fdbq.Finished, 0)
	wantCount(t, q, fdbq.Pending, 1) // retention is for finished jobs only
	if j, err := q.Get(ctx, q.DB(), "keep", "forever"); err != nil || j.State != fdbq.Finished {
		t.Fatalf("job of a type without retention: %+v %v", j, err)
	}
}

func TestMonitorClearsStaleClaims(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	claims := func() int {
		t.Helper()
		n, err := q.ClaimCount(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	addJob(t, q, fdbq.NewJob{ID: "a"})
	l := acceptNoWait(t, q, fdbq.AcceptOptions{})[0]
	acceptNoWait(t, q, fdbq.AcceptOptions{}) // takes nothing, claims nothing
	if n := claims(); n != 1 {
		t.Fatalf("%d claims after one accept, want 1", n)
	}
	m := fdbq.NewMonitor(q, fdbq.MonitorOptions{Clock: c.Now, ClaimTTL: 5 * time.Minute})
	c.Advance(5*time.Minute - time.Millisecond)
	if err := q.Heartbeat(ctx, q.DB(), l, fdbq.HeartbeatOptions{}); err != nil {
		t.Fatal(err) // keep the job itself alive
	}
	sweep(t, m)
	if n := claims(); n != 1 {
		t.Fatalf("%d claims before the TTL, want 1", n)
	}
	c.Advance(2 * time.Millisecond)
	if err := q.Heartbeat(ctx, q.DB(), l, fdbq.HeartbeatOptions{}); err != nil {
		t.Fatal(err)
	}
	sweep(t, m)
	if n := claims(); n != 0 {
		t.Fatalf("%d claims after the TTL, want 0", n)
	}
	// The claim is only for retries of the accept; the lease still holds.
	if err := q.Finish(ctx, q.DB(), l, nil); err != nil {
		t.Fatal(err)
	}
}

func TestMonitorConcurrentSweepsRecycleOnce(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	const n = 120
	jobs := make([]fdbq.NewJob, n)
	for i := range jobs {
		jobs[i] = fdbq.NewJob{Type: "email", ID: fmt.Sprintf("j%03d", i)}
	}
	if _, err := q.AddBatch(ctx, q.DB(), jobs); err != nil {
		t.Fatal(err)
	}
	// Two monitors as two processes would run them: separate handles on
	// the store, small batches so that their transactions interleave.
	monitors := make([]*fdbq.Monitor, 2)
	for i := range monitors {
		mq := fdbq.New(kv.NewDB(q.DB().Backend(), kv.Options{}), fdbq.Options{Now: c.Now})
		monitors[i] = fdbq.NewMonitor(mq, fdbq.MonitorOptions{Clock: c.Now})
	}
	for round := 1; round <= 3; round++ {
		for {
			if len(acceptNoWait(t, q, fdbq.AcceptOptions{Max: 50})) == 0 {
				break
			}
		}
		wantCount(t, q, fdbq.Running, n)
		for _, m := range monitors {
			sweep(t, m) // each notes the store's version, after the accepts
		}
		c.Advance(activityTimeout + time.Millisecond)

		stats := make([]fdbq.SweepStats, len(monitors))
		errs := make([]error, len(monitors))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, m := range monitors {
			m.SetBatchSize(7)
			wg.Go(func() {
				<-start
				stats[i], errs[i] = m.Sweep(ctx)
			})
		}
		close(start)
		wg.Wait()
		total := 0
		for i := range monitors {
			if errs[i] != nil {
				t.Fatalf("round %d: monitor %d: %v", round, i, errs[i])
			}
			if stats[i].Failed != 0 {
				t.Fatalf("round %d: monitor %d failed jobs: %+v", round, i, stats[i])
			}
			total += stats[i].Recycled
		}
		if total != n {
			t.Fatalf("round %d: monitors recycled %d+%d jobs, want %d in all", round, stats[0].Recycled, stats[1].Recycled, n)
		}
		wantCount(t, q, fdbq.Running, 0)
		wantCount(t, q, fdbq.Pending, n)
		page, err := q.List(ctx, q.DB(), "email", fdbq.ListOptions{State: fdbq.Pending, Limit: 1000})
		if err != nil || len(page.Jobs) != n {
			t.Fatalf("round %d: listed %d pending (%v)", round, len(page.Jobs), err)
		}
		for _, j := range page.Jobs {
			if j.Attempts != round || j.Error == "" {
				t.Fatalf("round %d: job %s attempts %d error %q", round, j.ID, j.Attempts, j.Error)
			}
		}
		t.Logf("round %d: recycled %d and %d", round, stats[0].Recycled, stats[1].Recycled)
		c.Advance(time.Hour) // past the backoff
	}
}

// settleGoroutines waits, within a bound, for the goroutine count to fall
// to at most base.
func settleGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
	}
}

func TestMonitorStartStop(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	base := runtime.NumGoroutine()
	swept := make(chan fdbq.SweepStats, 1)
	newMonitor := func() *fdbq.Monitor {
		return fdbq.NewMonitor(q, fdbq.MonitorOptions{
			Clock:    c.Now,
			Interval: time.Millisecond,
			OnSweep: func(st fdbq.SweepStats) {
				select {
				case swept <- st:
				default:
				}
			},
		})
	}
	m := newMonitor()
	if err := m.Stop(ctx); err != nil {
		t.Fatalf("stop before start: %v", err)
	}
	if err := m.Start(ctx); !errors.Is(err, lifecycle.ErrStopped) {
		t.Fatalf("start after a stop before start: %v", err)
	}
	m = newMonitor()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); !errors.Is(err, lifecycle.ErrStarted) { // no second loop
		t.Fatalf("second start: %v", err)
	}
	recvWithin(t, swept, "a background sweep")
	// The monitor sweeps again once something is due: a job left running
	// past its deadline. The clock is the test's, so no timer of the
	// monitor's sees it pass; the add after it makes the monitor read
	// the deadlines again.
	addJob(t, q, fdbq.NewJob{ID: "left"})
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{}); len(ls) != 1 {
		t.Fatalf("accepted %v", leaseIDsOf(ls))
	}
	// A sweep of the test's notes that the accept committed (the loop's
	// reading after the accept's change may come after the clock moved).
	if _, err := m.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	c.Advance(activityTimeout + time.Millisecond)
	addJob(t, q, fdbq.NewJob{ID: "after"})
	recvWithin(t, swept, "a second background sweep")
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	settleGoroutines(t, base)

	// A stopped monitor does not start again.
	if err := m.Start(ctx); !errors.Is(err, lifecycle.ErrStopped) {
		t.Fatalf("start after stop: %v", err)
	}
}

// The monitor follows the lifecycle of every long-running part.
func TestMonitorLifecycle(t *testing.T) {
	q, c := newQueue(t)
	lifecycletest.Run(t, "fdbq.Monitor", func(*testing.T) lifecycletest.Part {
		return fdbq.NewMonitor(q, fdbq.MonitorOptions{Clock: c.Now, Interval: time.Millisecond, Logger: quietLog})
	})
}

// batchRecord is the monitor's batch size when a sweep transaction
// committed, and how the commit went.
type batchRecord struct {
	size int
	err  error
}

// recordBatches makes every commit through hb note m's batch size. The
// size is read at commit, before the monitor adapts it to the outcome, so
// it is the size the transaction ran with.
func recordBatches(hb *commitHookBackend, m **fdbq.Monitor, fail func(i int) error) func() []batchRecord {
	var mu sync.Mutex
	var recs []batchRecord
	hb.setCommit(func(tx kv.Transaction) error {
		mu.Lock()
		i := len(recs)
		mu.Unlock()
		var err error
		if ferr := fail(i); ferr != nil {
			tx.Cancel()
			err = ferr
		} else {
			err = tx.Commit()
		}
		mu.Lock()
		recs = append(recs, batchRecord{(*m).BatchSize(), err})
		mu.Unlock()
		return err
	})
	return func() []batchRecord {
		mu.Lock()
		defer mu.Unlock()
		return append([]batchRecord(nil), recs...)
	}
}

// checkAIMD checks that each failed transaction is followed by a smaller
// batch and each successful one by a larger one.
func checkAIMD(t *testing.T, recs []batchRecord) {
	t.Helper()
	for i, r := range recs {
		t.Logf("batch %d: size %d, commit: %v", i, r.size, r.err)
	}
	for i := 0; i+1 < len(recs); i++ {
		cur, next := recs[i], recs[i+1]
		if cur.err != nil && next.size >= cur.size {
			t.Fatalf("batch %d of %d failed (%v), the next is %d", i, cur.size, cur.err, next.size)
		}
		if cur.err == nil && next.size <= cur.size {
			t.Fatalf("batch %d of %d succeeded, the next is %d", i, cur.size, next.size)
		}
	}
}

func TestMonitorBatchGrowsOnSuccess(t *testing.T) {
	q, c := newQueue(t)
	addJob(t, q, fdbq.NewJob{ID: "a"})
	acceptNoWait(t, q, fdbq.AcceptOptions{})
	hq, hb := hookedQueue(q, c.Now)
	m := fdbq.NewMonitor(hq, fdbq.MonitorOptions{Clock: c.Now})
	sweep(t, m)
	c.Advance(activityTimeout + time.Millisecond)
	records := recordBatches(hb, &m, func(int) error { return nil })
	before := m.BatchSize()
	if st := sweep(t, m); st.Recycled != 1 {
		t.Fatalf("sweep: %+v", st)
	}
	if after := m.BatchSize(); after <= before {
		t.Fatalf("batch %d after a clean sweep, %d before", after, before)
	}
	recs := records()
	checkAIMD(t, recs[:len(recs)-1]) // the last (clearing stamps) does not adapt
}

func TestMonitorBatchShrinksOnRetriedFailure(t *testing.T) {
	// transaction_too_old is retried by the store's retry loop; each
	// failed attempt must shrink the batch, or a sweep too big to finish
	// in time would fail the same way on every retry.
	q, c := newQueue(t)
	addJob(t, q, fdbq.NewJob{ID: "a"})
	acceptNoWait(t, q, fdbq.AcceptOptions{})
	hq, hb := hookedQueue(q, c.Now)
	m := fdbq.NewMonitor(hq, fdbq.MonitorOptions{Clock: c.Now})
	sweep(t, m)
	c.Advance(activityTimeout + time.Millisecond)
	records := recordBatches(hb, &m, func(i int) error {
		if i < 3 {
			return kv.ErrTransactionTooOld.WithDetail("test")
		}
		return nil
	})
	before := m.BatchSize()
	if st := sweep(t, m); st.Recycled != 1 {
		t.Fatalf("sweep: %+v", st)
	}
	recs := records()
	if len(recs) < 5 || recs[0].err == nil || recs[3].err != nil {
		t.Fatalf("commits: %+v", recs)
	}
	checkAIMD(t, recs[:5]) // recycle (3 failures, 1 success), then expire
	if after := m.BatchSize(); after >= before {
		t.Fatalf("batch %d after three failed attempts, %d before", after, before)
	}
}

func TestMonitorBatchShrinksWhenTooLarge(t *testing.T) {
	// transaction_too_large is not retried by the store: the monitor
	// itself must shrink the batch and try again, then grow it once a
	// transaction succeeds. (Making real jobs big enough to exceed 10 MB
	// takes seconds of JSON work under the race detector, so the failure
	// is injected at commit.)
	q, c := newQueue(t)
	for i := range 3 {
		addJob(t, q, fdbq.NewJob{ID: fmt.Sprintf("j%d", i)})
	}
	acceptNoWait(t, q, fdbq.AcceptOptions{Max: 3})
	hq, hb := hookedQueue(q, c.Now)
	m := fdbq.NewMonitor(hq, fdbq.MonitorOptions{Clock: c.Now})
	sweep(t, m)
	c.Advance(activityTimeout + time.Millisecond)
	records := recordBatches(hb, &m, func(i int) error {
		if i < 2 {
			return kv.ErrTransactionTooLarge.WithDetail("test")
		}
		return nil
	})
	before := m.BatchSize()
	if st := sweep(t, m); st.Recycled != 3 {
		t.Fatalf("sweep: %+v", st)
	}
	wantCount(t, q, fdbq.Pending, 3)
	recs := records()
	if len(recs) < 4 || recs[0].size != before || recs[2].err != nil {
		t.Fatalf("commits: %+v", recs)
	}
	checkAIMD(t, recs[:4]) // recycle (2 failures, 1 success), then expire
}
