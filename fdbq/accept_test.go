package fdbq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/kvtest"
)

// waitBound is how long a test waits for something that should happen at once
// before it fails; it is a deadline, never a delay.
const waitBound = 10 * time.Second

// recvWithin returns the next value of ch, failing the test after waitBound.
func recvWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(waitBound)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// commitHookBackend wraps a backend so that a test can act at every commit:
// learn that it happened (a transaction that set a watch has committed, so
// its caller is now waiting on the watch), fail it, or change the store
// between the commit and the answer its caller gets.
type commitHookBackend struct {
	kv.Backend
	mu     sync.Mutex
	commit func(tx kv.Transaction) error // nil: commit normally
	hits   atomic.Int64                  // commits unknownOnce reported unknown
}

// unknownOnce makes the next commit apply, then run between (if not nil:
// other clients move on meanwhile), then report commit_unknown_result, so
// the retry loop runs the function again against its own committed
// writes. Once only.
func (b *commitHookBackend) unknownOnce(between func()) {
	var once atomic.Bool
	b.setCommit(func(tx kv.Transaction) error {
		if err := tx.Commit(); err != nil {
			return err
		}
		if !once.CompareAndSwap(false, true) {
			return nil
		}
		b.setCommit(nil)
		if between != nil {
			between()
		}
		b.hits.Add(1)
		return kv.ErrCommitUnknownResult.WithDetail("test: the commit applied")
	})
}

func (b *commitHookBackend) setCommit(f func(tx kv.Transaction) error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.commit = f
}

func (b *commitHookBackend) Begin(ctx context.Context) (kv.Transaction, error) {
	tx, err := b.Backend.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &commitHookTx{Transaction: tx, b: b}, nil
}

type commitHookTx struct {
	kv.Transaction
	b *commitHookBackend
}

func (t *commitHookTx) Commit() error {
	t.b.mu.Lock()
	f := t.b.commit
	t.b.mu.Unlock()
	if f == nil {
		return t.Transaction.Commit()
	}
	return f(t.Transaction)
}

// hookedQueue returns a second queue over q's store and clock whose commits go
// through a commitHookBackend. The store belongs to q; closing it is q's job.
func hookedQueue(q *fdbq.Queue, now func() time.Time) (*fdbq.Queue, *commitHookBackend) {
	hb := &commitHookBackend{Backend: q.DB().Backend()}
	return fdbq.New(kv.NewDB(hb, kv.Options{}), fdbq.Options{Now: now}), hb
}

// signalCommits makes every commit through hb report its result on the
// returned channel once it is done.
func signalCommits(hb *commitHookBackend) <-chan error {
	ch := make(chan error, 1024)
	hb.setCommit(func(tx kv.Transaction) error {
		err := tx.Commit()
		ch <- err
		return err
	})
	return ch
}

type acceptOutcome struct {
	leases []*fdbq.Lease
	err    error
}

func acceptInBackground(ctx context.Context, q *fdbq.Queue, typ string, o fdbq.AcceptOptions) <-chan acceptOutcome {
	ch := make(chan acceptOutcome, 1)
	go func() {
		ls, err := q.Accept(ctx, typ, o)
		ch <- acceptOutcome{ls, err}
	}()
	return ch
}

// acceptNoWait runs a non-blocking Accept, failing the test if it errs or
// blocks.
func acceptNoWait(t *testing.T, q *fdbq.Queue, o fdbq.AcceptOptions) []*fdbq.Lease {
	t.Helper()
	o.Timeout = 0
	out := recvWithin(t, acceptInBackground(context.Background(), q, "email", o), "a non-blocking accept")
	if out.err != nil {
		t.Fatalf("accept: %v", out.err)
	}
	return out.leases
}

func leaseIDsOf(ls []*fdbq.Lease) []string {
	ids := make([]string, len(ls))
	for i, l := range ls {
		ids[i] = l.ID
	}
	return ids
}

func addJob(t *testing.T, q *fdbq.Queue, j fdbq.NewJob) *fdbq.Job {
	t.Helper()
	if j.Type == "" {
		j.Type = "email"
	}
	job, err := q.Add(context.Background(), q.DB(), j)
	if err != nil {
		t.Fatalf("add %s: %v", j.ID, err)
	}
	return job
}

func stateIs(t *testing.T, q *fdbq.Queue, id string, want fdbq.State) *fdbq.Job {
	t.Helper()
	j, err := q.Get(context.Background(), q.DB(), "email", id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	if j.State != want {
		t.Fatalf("job %s is %s, want %s", id, j.State, want)
	}
	return j
}

func TestAcceptOnlyDueJobs(t *testing.T) {
	q, c := newQueue(t)
	addJob(t, q, fdbq.NewJob{ID: "now"})
	addJob(t, q, fdbq.NewJob{ID: "later", ScheduledAt: c.Now().Add(time.Minute)})

	if got := leaseIDsOf(acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10})); !slices.Equal(got, []string{"now"}) {
		t.Fatalf("accepted %v, want [now]", got)
	}
	if got := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10}); len(got) != 0 {
		t.Fatalf("accepted %v before it was due", leaseIDsOf(got))
	}
	c.Advance(time.Minute - time.Millisecond)
	if got := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10}); len(got) != 0 {
		t.Fatalf("accepted %v a millisecond before it was due", leaseIDsOf(got))
	}
	c.Advance(time.Millisecond)
	ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10})
	if got := leaseIDsOf(ls); !slices.Equal(got, []string{"later"}) {
		t.Fatalf("accepted %v once due, want [later]", got)
	}
	if ls[0].State != fdbq.Running || ls[0].Attempts != 1 || ls[0].Lock == "" {
		t.Fatalf("lease %+v", ls[0])
	}
	stateIs(t, q, "later", fdbq.Running)
}

func TestAcceptMaxScheduledAt(t *testing.T) {
	q, c := newQueue(t)
	now := c.Now()
	addJob(t, q, fdbq.NewJob{ID: "past", ScheduledAt: now.Add(-time.Minute)})
	addJob(t, q, fdbq.NewJob{ID: "in1h", ScheduledAt: now.Add(time.Hour)})
	addJob(t, q, fdbq.NewJob{ID: "in2h", ScheduledAt: now.Add(2 * time.Hour)})

	got := leaseIDsOf(acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10, MaxScheduledAt: now.Add(90 * time.Minute)}))
	if !slices.Equal(got, []string{"past", "in1h"}) {
		t.Fatalf("accepted %v up to now+90m, want [past in1h]", got)
	}
	// A bound in the past leaves out jobs that are due now.
	addJob(t, q, fdbq.NewJob{ID: "past5", ScheduledAt: now.Add(-5 * time.Minute)})
	addJob(t, q, fdbq.NewJob{ID: "past1", ScheduledAt: now.Add(-time.Minute)})
	got = leaseIDsOf(acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10, MaxScheduledAt: now.Add(-2 * time.Minute)}))
	if !slices.Equal(got, []string{"past5"}) {
		t.Fatalf("accepted %v up to now-2m, want [past5]", got)
	}
	got = leaseIDsOf(acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10}))
	if !slices.Equal(got, []string{"past1"}) {
		t.Fatalf("accepted %v up to now, want [past1]", got)
	}
	stateIs(t, q, "in2h", fdbq.Pending)
}

// addPriorityMix adds jobs over several priority bands, negative ones
// included, with scheduled times in the past in no particular order and a
// few not yet due, and returns the due ones in the order a strict acceptor
// must take them.
func addPriorityMix(t *testing.T, q *fdbq.Queue, c *clock) []string {
	t.Helper()
	now := c.Now()
	priorities := []int{10, 3, 0, -1, -7}
	type due struct {
		id    string
		prio  int
		sched time.Time
	}
	var want []due
	var jobs []fdbq.NewJob
	for i := range 40 {
		p := priorities[(i*7)%len(priorities)]
		sched := now.Add(-time.Duration((i*13)%11) * time.Second)
		id := fmt.Sprintf("j%02d", i)
		jobs = append(jobs, fdbq.NewJob{Type: "email", ID: id, Priority: p, ScheduledAt: sched})
		want = append(want, due{id, p, sched})
	}
	for i := range 5 {
		// Not due: high priority must not let them jump the queue.
		jobs = append(jobs, fdbq.NewJob{Type: "email", ID: fmt.Sprintf("f%d", i), Priority: 100 - 50*i, ScheduledAt: now.Add(time.Minute)})
	}
	if _, err := q.AddBatch(context.Background(), q.DB(), jobs); err != nil {
		t.Fatal(err)
	}
	sort.Slice(want, func(i, j int) bool {
		a, b := want[i], want[j]
		if a.prio != b.prio {
			return a.prio > b.prio
		}
		if !a.sched.Equal(b.sched) {
			return a.sched.Before(b.sched)
		}
		return a.id < b.id
	})
	ids := make([]string, len(want))
	for i, d := range want {
		ids[i] = d.id
	}
	return ids
}

func TestAcceptPriorityOrderStrict(t *testing.T) {
	for _, max := range []int{1, 3, 7} {
		t.Run(fmt.Sprintf("max%d", max), func(t *testing.T) {
			q, c := newQueue(t)
			want := addPriorityMix(t, q, c)
			var got []string
			for {
				ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: max, Window: max})
				if len(ls) == 0 {
					break
				}
				if len(ls) > max {
					t.Fatalf("accepted %d jobs with Max %d", len(ls), max)
				}
				got = append(got, leaseIDsOf(ls)...)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("strict order:\n got %v\nwant %v", got, want)
			}
		})
	}
}

func TestAcceptWindowPicksAmongTheFirst(t *testing.T) {
	// With a window wider than Max the order within the window is random,
	// but nothing outside it may be taken.
	q, c := newQueue(t)
	want := addPriorityMix(t, q, c)
	for len(want) > 0 {
		ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 2, Window: 5})
		if len(ls) == 0 {
			t.Fatalf("nothing accepted with %v left", want)
		}
		window := want[:min(5, len(want))]
		for _, l := range ls {
			i := slices.Index(window, l.ID)
			if i < 0 {
				t.Fatalf("accepted %s from outside the window %v", l.ID, window)
			}
			want = slices.Delete(want, i, i+1)
			window = want[:min(5, len(want))]
		}
	}
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10}); len(ls) != 0 {
		t.Fatalf("accepted %v, only future jobs are left", leaseIDsOf(ls))
	}
}

func TestAcceptMaxBatches(t *testing.T) {
	q, _ := newQueue(t)
	for i := range 10 {
		addJob(t, q, fdbq.NewJob{ID: fmt.Sprintf("j%d", i)})
	}
	seen := map[string]bool{}
	for i, want := range []int{4, 4, 2, 0} {
		ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 4})
		if len(ls) != want {
			t.Fatalf("batch %d: %d jobs, want %d", i, len(ls), want)
		}
		for _, l := range ls {
			if seen[l.ID] {
				t.Fatalf("job %s accepted twice", l.ID)
			}
			seen[l.ID] = true
			if l.Lock != ls[0].Lock {
				t.Fatalf("one accept made two locks: %s, %s", l.Lock, ls[0].Lock)
			}
		}
	}
	if n, _ := q.Count(context.Background(), q.DB(), "email", fdbq.Running); n != 10 {
		t.Fatalf("%d running, want 10", n)
	}
}

func TestAcceptNonBlockingWithNothingDue(t *testing.T) {
	q, c := newQueue(t)
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{}); ls != nil {
		t.Fatalf("empty queue gave %v", leaseIDsOf(ls))
	}
	addJob(t, q, fdbq.NewJob{ID: "later", ScheduledAt: c.Now().Add(time.Hour)})
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 5}); len(ls) != 0 {
		t.Fatalf("future job accepted: %v", leaseIDsOf(ls))
	}
	if _, err := q.Accept(context.Background(), "nope", fdbq.AcceptOptions{}); !errors.Is(err, fdbq.ErrUnknownType) {
		t.Fatalf("accept of an unknown type: %v", err)
	}
}

func TestAcceptTimeoutEnds(t *testing.T) {
	q, _ := newQueue(t)
	out := recvWithin(t, acceptInBackground(context.Background(), q, "email", fdbq.AcceptOptions{Timeout: 20 * time.Millisecond}), "accept timeout")
	if out.err != nil || len(out.leases) != 0 {
		t.Fatalf("accept on an empty queue after its timeout: %v %v", leaseIDsOf(out.leases), out.err)
	}
}

func TestAcceptBlockingWokenByAdd(t *testing.T) {
	q, c := newQueue(t)
	hq, hb := hookedQueue(q, c.Now)
	commits := signalCommits(hb)
	// A far timeout and no scheduled job: no timer can end or wake the
	// wait, only the watch key.
	res := acceptInBackground(context.Background(), hq, "email", fdbq.AcceptOptions{Timeout: time.Hour})
	if err := recvWithin(t, commits, "the accept transaction"); err != nil {
		t.Fatal(err)
	}
	// That transaction found nothing and set its watch; Accept now waits.
	select {
	case out := <-res:
		t.Fatalf("accept returned with nothing to accept: %v %v", leaseIDsOf(out.leases), out.err)
	default:
	}
	if n, _ := q.Count(context.Background(), q.DB(), "email", fdbq.Pending); n != 0 {
		t.Fatalf("%d pending", n)
	}
	addJob(t, q, fdbq.NewJob{ID: "woken"})
	out := recvWithin(t, res, "the woken accept")
	if out.err != nil || !slices.Equal(leaseIDsOf(out.leases), []string{"woken"}) {
		t.Fatalf("woken accept: %v %v", leaseIDsOf(out.leases), out.err)
	}
	// One transaction to wait, one to take the job: woken, not polling.
	if n := len(commits); n != 1 {
		t.Fatalf("%d more accept transactions after the wait, want 1", n)
	}
	stateIs(t, q, "woken", fdbq.Running)
}

func TestAcceptBlockingWakesForScheduledJob(t *testing.T) {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	q := fdbq.New(db, fdbq.Options{}) // the real clock: the timer is real
	if err := q.SetType(ctx, db, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	hq, hb := hookedQueue(q, nil)
	commits := signalCommits(hb)
	if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: "soon", ScheduledAt: time.Now().Add(50 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	out := recvWithin(t, acceptInBackground(ctx, hq, "email", fdbq.AcceptOptions{Timeout: waitBound}), "the scheduled job")
	if out.err != nil || !slices.Equal(leaseIDsOf(out.leases), []string{"soon"}) {
		t.Fatalf("accept: %v %v", leaseIDsOf(out.leases), out.err)
	}
	if now := time.Now(); now.Before(out.leases[0].ScheduledAt) {
		t.Fatalf("accepted at %v, before its time %v", now, out.leases[0].ScheduledAt)
	}
	// At most a waiting transaction and the taking one: a timer, no polling.
	if n := len(commits); n > 2 {
		t.Fatalf("%d accept transactions for one scheduled job", n)
	}
}

func TestAcceptPausedBlocksUntilResume(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	if err := q.Pause(ctx, q.DB(), "email"); err != nil {
		t.Fatal(err)
	}
	addJob(t, q, fdbq.NewJob{ID: "a"})
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{}); len(ls) != 0 {
		t.Fatalf("paused type gave %v", leaseIDsOf(ls))
	}
	hq, hb := hookedQueue(q, c.Now)
	commits := signalCommits(hb)
	res := acceptInBackground(ctx, hq, "email", fdbq.AcceptOptions{Max: 2, Timeout: time.Hour})
	if err := recvWithin(t, commits, "the paused accept transaction"); err != nil {
		t.Fatal(err)
	}
	// An add to a zone with no ready jobs wakes the acceptor, which
	// must find the type still paused.
	addJob(t, q, fdbq.NewJob{ID: "b", Key: "other"})
	if err := recvWithin(t, commits, "the accept woken by an add"); err != nil {
		t.Fatal(err)
	}
	stateIs(t, q, "a", fdbq.Pending)
	stateIs(t, q, "b", fdbq.Pending)
	select {
	case out := <-res:
		t.Fatalf("accept of a paused type returned: %v %v", leaseIDsOf(out.leases), out.err)
	default:
	}
	if err := q.Resume(ctx, q.DB(), "email"); err != nil {
		t.Fatal(err)
	}
	out := recvWithin(t, res, "the accept woken by resume")
	// Of two zones, in the order the accept chose them.
	if got := leaseIDsOf(out.leases); out.err != nil || !slices.Equal(slices.Sorted(slices.Values(got)), []string{"a", "b"}) {
		t.Fatalf("after resume: %v %v", leaseIDsOf(out.leases), out.err)
	}
}

func TestAcceptContextCancel(t *testing.T) {
	q, c := newQueue(t)
	hq, hb := hookedQueue(q, c.Now)
	commits := signalCommits(hb)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := acceptInBackground(ctx, hq, "email", fdbq.AcceptOptions{Timeout: -1})
	if err := recvWithin(t, commits, "the accept transaction"); err != nil {
		t.Fatal(err)
	}
	cancel()
	out := recvWithin(t, res, "the cancelled accept")
	if !errors.Is(out.err, context.Canceled) || len(out.leases) != 0 {
		t.Fatalf("cancelled accept: %v %v", leaseIDsOf(out.leases), out.err)
	}
}

func TestAcceptIdempotentUnderUnknownResult(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	const n = 300
	jobs := make([]fdbq.NewJob, n)
	for i := range jobs {
		jobs[i] = fdbq.NewJob{Type: "email", ID: fmt.Sprintf("j%03d", i), Priority: i % 3}
	}
	if _, err := q.AddBatch(ctx, q.DB(), jobs); err != nil {
		t.Fatal(err)
	}
	fdb, fb := kvtest.NewFaultyDB(q.DB(), kvtest.FaultOptions{
		Seed:                  7,
		ConflictRate:          0.05,
		UnknownNotAppliedRate: 0.1,
		UnknownAppliedRate:    0.35,
	})
	fq := fdbq.New(fdb, fdbq.Options{Now: c.Now})

	var (
		mu     sync.Mutex
		leases []*fdbq.Lease
		wg     sync.WaitGroup
		errs   = make(chan error, 4)
	)
	for w := range 4 {
		wg.Go(func() {
			for {
				ls, err := fq.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1 + w})
				if err != nil {
					errs <- err
					return
				}
				if len(ls) == 0 {
					return
				}
				mu.Lock()
				leases = append(leases, ls...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if fb.Counts().UnknownApplied == 0 {
		t.Fatal("no commit applied and reported commit_unknown_result; the test proves nothing")
	}
	t.Logf("faults: %+v", fb.Counts())

	byID := map[string]*fdbq.Lease{}
	for _, l := range leases {
		if byID[l.ID] != nil {
			t.Fatalf("job %s returned twice", l.ID)
		}
		byID[l.ID] = l
	}
	if len(byID) != n {
		t.Fatalf("%d jobs returned, want %d", len(byID), n)
	}
	if c, _ := q.Count(ctx, q.DB(), "email", fdbq.Running); c != n {
		t.Fatalf("%d running, want %d", c, n)
	}
	// Every running job runs under the lock of a lease some Accept
	// returned: a heartbeat with that lease succeeds.
	page, err := q.List(ctx, q.DB(), "email", fdbq.ListOptions{State: fdbq.Running, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != n {
		t.Fatalf("listed %d running jobs, want %d", len(page.Jobs), n)
	}
	for _, j := range page.Jobs {
		l := byID[j.ID]
		if l == nil {
			t.Fatalf("job %s is running but no accept returned it", j.ID)
		}
		if err := q.Heartbeat(ctx, q.DB(), l, fdbq.HeartbeatOptions{}); err != nil {
			t.Fatalf("job %s runs under a lock no returned lease holds: %v", j.ID, err)
		}
	}
}

func TestAcceptUnknownCommitThatApplied(t *testing.T) {
	// The first commit applies but reports commit_unknown_result, and the
	// job it took is canceled before the retry. The store's commit-once
	// transactions tell the retry that the accept applied, so Accept
	// answers what it did: it took a, whose worker learns of the cancel
	// at its first heartbeat.
	q, c := newQueue(t)
	ctx := context.Background()
	hq, hb := hookedQueue(q, c.Now)
	addJob(t, q, fdbq.NewJob{ID: "a"})
	var once sync.Once
	hb.setCommit(func(tx kv.Transaction) error {
		err := tx.Commit()
		if err != nil {
			return err
		}
		fired := false
		once.Do(func() { fired = true })
		if !fired {
			return nil
		}
		if err := q.Cancel(ctx, q.DB(), "email", "a"); err != nil {
			t.Errorf("cancel: %v", err)
		}
		return kv.ErrCommitUnknownResult.WithDetail("applied, test")
	})
	res := acceptInBackground(ctx, hq, "email", fdbq.AcceptOptions{Timeout: time.Hour})
	out := recvWithin(t, res, "the accept")
	if out.err != nil || !slices.Equal(leaseIDsOf(out.leases), []string{"a"}) {
		t.Fatalf("accept: %v %v", leaseIDsOf(out.leases), out.err)
	}
	if err := q.Heartbeat(ctx, q.DB(), out.leases[0], fdbq.HeartbeatOptions{}); !errors.Is(err, fdbq.ErrHalt) {
		t.Fatalf("heartbeat of the canceled job: %v, want ErrHalt", err)
	}
	if j := stateIs(t, q, "a", fdbq.Finished); j.Outcome != fdbq.Canceled {
		t.Fatalf("a: %s", j.Outcome)
	}
}

func TestAcceptConcurrentAcceptorsTakeDistinctJobs(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	const n = 200
	jobs := make([]fdbq.NewJob, n)
	for i := range jobs {
		jobs[i] = fdbq.NewJob{Type: "email", ID: fmt.Sprintf("j%03d", i), Data: json.RawMessage(`{}`)}
	}
	if _, err := q.AddBatch(ctx, q.DB(), jobs); err != nil {
		t.Fatal(err)
	}
	// Each acceptor has its own store handle and counters.
	acceptors := []*fdbq.Queue{
		fdbq.New(kv.NewDB(q.DB().Backend(), kv.Options{}), fdbq.Options{Now: c.Now}),
		fdbq.New(kv.NewDB(q.DB().Backend(), kv.Options{}), fdbq.Options{Now: c.Now}),
	}
	got := make([][]string, len(acceptors))
	errs := make([]error, len(acceptors))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, a := range acceptors {
		wg.Go(func() {
			<-start
			for {
				ls, err := a.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
				if err != nil {
					errs[i] = err
					return
				}
				if len(ls) == 0 {
					return
				}
				got[i] = append(got[i], ls[0].ID)
			}
		})
	}
	close(start)
	wg.Wait()
	seen := map[string]int{}
	for i := range acceptors {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		for _, id := range got[i] {
			seen[id]++
			if seen[id] > 1 {
				t.Fatalf("job %s accepted twice", id)
			}
		}
	}
	if len(seen) != n {
		t.Fatalf("%d jobs accepted, want %d", len(seen), n)
	}
	t.Logf("acceptors took %d and %d jobs; conflicts %d and %d", len(got[0]), len(got[1]),
		acceptors[0].DB().Stats().Conflicts.Load(), acceptors[1].DB().Stats().Conflicts.Load())
}

// The random pick within the window never lets a lower priority job pass a
// higher one: bands are taken whole, from the highest, and only the band
// that does not fit is sampled.
func TestAcceptRandomWindowKeepsPriority(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	db := q.DB()
	var jobs []fdbq.NewJob
	for i := 0; i < 300; i++ {
		jobs = append(jobs, fdbq.NewJob{Type: "email", ID: fmt.Sprintf("low-%03d", i)})
	}
	for i := 0; i < 3; i++ {
		jobs = append(jobs, fdbq.NewJob{Type: "email", ID: fmt.Sprintf("high-%d", i), Priority: 5})
	}
	if _, err := q.AddBatch(ctx, db, jobs); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
		if err != nil || len(ls) != 1 {
			t.Fatalf("accept %d: %v %v", i, ls, err)
		}
		if ls[0].Priority != 5 || seen[ls[0].ID] {
			t.Fatalf("accept %d took %s (priority %d) while high-priority jobs were due", i, ls[0].ID, ls[0].Priority)
		}
		seen[ls[0].ID] = true
	}
	ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 10})
	if err != nil || len(ls) != 10 {
		t.Fatalf("accept: %v %v", ls, err)
	}
	for _, l := range ls {
		if l.Priority != 0 {
			t.Fatalf("took %s twice", l.ID)
		}
	}
}
