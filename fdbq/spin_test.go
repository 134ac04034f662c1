package fdbq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// A blocked call waits on a watch, and on a timer only for a moment at
// which something can become acceptable to it; it never polls. These
// tests let a blocked call sit while nothing it waits for changes and
// count the store transactions it makes, then make the change and check
// that it wakes.

// quiet is how long a blocked call is left alone. It is measured with a
// timer: the tests check that nothing happens, and nothing signals that.
const quiet = 250 * time.Millisecond

// maxQuietTransactions bounds the transactions a blocked call may make
// while nothing changes: a read or two, never one a millisecond.
const maxQuietTransactions = 5

// newRealClockQueue is newQueue with the real clock, for the tests whose
// bug needs time to pass: a timer that fires computes its next wait from
// a clock that moved.
func newRealClockQueue(t *testing.T, opts embedded.Options) *fdbq.Queue {
	t.Helper()
	opts.InMemory = true
	st, err := embedded.Open("", opts)
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	t.Cleanup(func() { db.Close() })
	q := fdbq.New(db, fdbq.Options{})
	if err := q.SetType(context.Background(), db, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	return q
}

// blocked starts call through a queue over q's store (clock now, nil for
// the real one) with a kv.DB of its own, whose transactions are then the
// call's alone, and returns once the call's first transaction has
// committed (it found nothing and set its watch): the queue, the call's
// outcome and its commits.
func blocked[T any](t *testing.T, q *fdbq.Queue, now func() time.Time, call func(q *fdbq.Queue) T) (*fdbq.Queue, <-chan T, <-chan error) {
	t.Helper()
	hq, hb := hookedQueue(q, now)
	commits := signalCommits(hb)
	out := make(chan T, 1)
	go func() { out <- call(hq) }()
	if err := recvWithin(t, commits, "the blocked call's first transaction"); err != nil {
		t.Fatal(err)
	}
	return hq, out, commits
}

// quietTransactions leaves the call whose store is db alone for quiet and
// fails the test if it made more than maxQuietTransactions transactions.
func quietTransactions(t *testing.T, db *kv.DB, what string) {
	t.Helper()
	before := db.Stats().Transactions.Load()
	time.Sleep(quiet)
	n := db.Stats().Transactions.Load() - before
	if n > maxQuietTransactions {
		t.Fatalf("%s: %d store transactions in %v while nothing changed, want at most %d", what, n, quiet, maxQuietTransactions)
	}
	t.Logf("%s: %d store transactions in %v", what, n, quiet)
}

func notReturned[T any](t *testing.T, out <-chan T, what string) {
	t.Helper()
	select {
	case v := <-out:
		t.Fatalf("%s returned while nothing changed: %+v", what, v)
	default:
	}
}

// acceptInto runs Accept with a cancellable context that the test ends.
func acceptInto(t *testing.T, o fdbq.AcceptOptions) func(q *fdbq.Queue) acceptOutcome {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return func(q *fdbq.Queue) acceptOutcome {
		ls, err := q.Accept(ctx, "email", o)
		return acceptOutcome{ls, err}
	}
}

func wantAccepted(t *testing.T, out <-chan acceptOutcome, ids ...string) {
	t.Helper()
	got := recvWithin(t, out, "the woken accept")
	if got.err != nil || !slices.Equal(leaseIDsOf(got.leases), ids) {
		t.Fatalf("woken accept: %v %v, want %v", leaseIDsOf(got.leases), got.err, ids)
	}
}

// The issue: with MaxScheduledAt in the past, a job due now but scheduled
// after the bound set the timer, for a moment already past, and the
// accept read again every millisecond. The job can never be taken by this
// accept; only the watch can bring one it can take.
func TestSpinAcceptMaxScheduledAtInPast(t *testing.T) {
	q := newRealClockQueue(t, embedded.Options{})
	now := time.Now()
	addJob(t, q, fdbq.NewJob{ID: "due", ScheduledAt: now.Add(-time.Minute)})
	hq, out, _ := blocked(t, q, nil, acceptInto(t, fdbq.AcceptOptions{MaxScheduledAt: now.Add(-2 * time.Minute), Timeout: -1}))
	quietTransactions(t, hq.DB(), "accept up to two minutes ago")
	notReturned(t, out, "the accept")
	addJob(t, q, fdbq.NewJob{ID: "older", ScheduledAt: now.Add(-3 * time.Minute)})
	wantAccepted(t, out, "older")
	stateIs(t, q, "due", fdbq.Pending)
}

// A fixed bound in the future has the same trap once time passes it: a
// job scheduled after the bound whose time has come. The injected clock
// gets there at once.
func TestSpinAcceptMaxScheduledAtOvertaken(t *testing.T) {
	q, c := newQueue(t)
	bound := c.Now().Add(time.Minute)
	addJob(t, q, fdbq.NewJob{ID: "after", ScheduledAt: bound.Add(time.Minute)})
	c.Advance(time.Hour)
	hq, out, _ := blocked(t, q, c.Now, acceptInto(t, fdbq.AcceptOptions{MaxScheduledAt: bound, Timeout: -1}))
	quietTransactions(t, hq.DB(), "accept up to a bound the clock passed")
	notReturned(t, out, "the accept")
	addJob(t, q, fdbq.NewJob{ID: "inside", ScheduledAt: bound})
	wantAccepted(t, out, "inside")
}

// Only jobs not due yet: the timer is for the earliest, however far off.
// A wait of more than a time.Duration (292 years) overflowed into a
// negative one and fired at once, every time.
func TestSpinAcceptOnlyFutureJobs(t *testing.T) {
	for _, ahead := range []struct {
		name string
		d    func(time.Time) time.Time
	}{
		{"an hour", func(t time.Time) time.Time { return t.Add(time.Hour) }},
		{"400 years", func(t time.Time) time.Time { return t.AddDate(400, 0, 0) }},
	} {
		t.Run(ahead.name, func(t *testing.T) {
			q := newRealClockQueue(t, embedded.Options{})
			addJob(t, q, fdbq.NewJob{ID: "later", ScheduledAt: ahead.d(time.Now())})
			hq, out, _ := blocked(t, q, nil, acceptInto(t, fdbq.AcceptOptions{Max: 5, Timeout: -1}))
			quietTransactions(t, hq.DB(), "accept with only a job in "+ahead.name)
			notReturned(t, out, "the accept")
			addJob(t, q, fdbq.NewJob{ID: "now"})
			wantAccepted(t, out, "now")
			stateIs(t, q, "later", fdbq.Pending)
		})
	}
}

func TestSpinAcceptPausedWithDueJobs(t *testing.T) {
	q := newRealClockQueue(t, embedded.Options{})
	ctx := context.Background()
	if err := q.Pause(ctx, q.DB(), "email"); err != nil {
		t.Fatal(err)
	}
	addJob(t, q, fdbq.NewJob{ID: "a", ScheduledAt: time.Now().Add(-time.Minute)})
	addJob(t, q, fdbq.NewJob{ID: "b", ScheduledAt: time.Now().Add(time.Hour)})
	hq, out, _ := blocked(t, q, nil, acceptInto(t, fdbq.AcceptOptions{Timeout: -1}))
	quietTransactions(t, hq.DB(), "accept of a paused type")
	notReturned(t, out, "the accept")
	if err := q.Resume(ctx, q.DB(), "email"); err != nil {
		t.Fatal(err)
	}
	wantAccepted(t, out, "a")
}

// An accept of a group whose only job another accept of the group holds
// waits for that one to let go; then, with nothing it can take, on the
// store.
func TestSpinAcceptGroup(t *testing.T) {
	q := newRealClockQueue(t, embedded.Options{})
	ctx := context.Background()
	now := time.Now()
	bound := now.Add(-2 * time.Minute)
	addJob(t, q, fdbq.NewJob{ID: "held", ScheduledAt: now.Add(-3 * time.Minute)})
	addJob(t, q, fdbq.NewJob{ID: "after-bound", ScheduledAt: now.Add(-time.Minute)})
	var g fdbq.AcceptGroup

	// The holder's commit waits until the test lets it go.
	holder, hb := hookedQueue(q, nil)
	committing, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hb.setCommit(func(tx kv.Transaction) error {
		once.Do(func() {
			close(committing)
			<-proceed
		})
		return tx.Commit()
	})
	held := make(chan acceptOutcome, 1)
	go func() {
		ls, err := holder.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1, Window: 1, Group: &g})
		held <- acceptOutcome{ls, err}
	}()
	recvWithin(t, committing, "the holder's commit")

	hq, out, commits := blocked(t, q, nil, acceptInto(t, fdbq.AcceptOptions{MaxScheduledAt: bound, Timeout: -1, Group: &g}))
	quietTransactions(t, hq.DB(), "accept whose jobs the group holds")
	notReturned(t, out, "the accept")
	// Waiting for the holder is no wait for jobs to become ready.
	if parked, _ := g.Parked(); parked {
		t.Fatal("the group is parked while its accept waits for the holder to let go")
	}

	close(proceed)
	if got := recvWithin(t, held, "the holder"); got.err != nil || !slices.Equal(leaseIDsOf(got.leases), []string{"held"}) {
		t.Fatalf("holder: %v %v", leaseIDsOf(got.leases), got.err)
	}
	// Let go, the job is gone: the accept reads again and waits on the
	// store, where the only pending job is after its bound.
	if err := recvWithin(t, commits, "the accept's read after the holder let go"); err != nil {
		t.Fatal(err)
	}
	quietTransactions(t, hq.DB(), "accept of a group with nothing it can take")
	notReturned(t, out, "the accept")
	// It parks: it waits on the store for jobs to become ready.
	for parked, changed := g.Parked(); !parked; parked, changed = g.Parked() {
		recvWithin(t, changed, "the group parked by its accept's wait on the store")
	}
	addJob(t, q, fdbq.NewJob{ID: "inside", ScheduledAt: bound})
	wantAccepted(t, out, "inside")
}

// A wait watches its job's record (or, past its queue's watch budget, its
// own type's change key): changes to jobs of other types never wake it.
func TestSpinWaitWhileOtherTypesChange(t *testing.T) {
	q := newRealClockQueue(t, embedded.Options{})
	ctx := context.Background()
	if err := q.SetType(ctx, q.DB(), "sms", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	addJob(t, q, fdbq.NewJob{ID: "a"})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hq, out, _ := blocked(t, q, nil, func(q *fdbq.Queue) waitOutcome {
		j, err := q.WaitOne(wctx, "email", "a", fdbq.Finished)
		return waitOutcome{[]fdbq.WaitResult{{Job: j}}, err}
	})

	churn, stop := make(chan error, 1), make(chan struct{})
	churned := 0
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				churned = i
				churn <- nil
				return
			default:
			}
			id := fmt.Sprintf("s%d", i)
			_, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "sms", ID: id})
			if err == nil {
				var ls []*fdbq.Lease
				if ls, err = q.Accept(ctx, "sms", fdbq.AcceptOptions{}); err == nil && len(ls) == 1 {
					err = q.Finish(ctx, q.DB(), ls[0], nil)
				}
			}
			if err != nil {
				churn <- err
				return
			}
		}
	}()
	quietTransactions(t, hq.DB(), "wait while jobs of another type change")
	close(stop)
	if err := recvWithin(t, churn, "the other type's jobs"); err != nil {
		t.Fatal(err)
	}
	if churned == 0 {
		t.Fatal("no job of the other type changed; the test proves nothing")
	}
	t.Logf("%d jobs of the other type added, accepted and finished meanwhile", churned)
	notReturned(t, out, "the wait")

	ls := acceptNoWait(t, q, fdbq.AcceptOptions{})
	if len(ls) != 1 {
		t.Fatalf("accepted %v", leaseIDsOf(ls))
	}
	if err := q.Finish(ctx, q.DB(), ls[0], nil); err != nil {
		t.Fatal(err)
	}
	if got := recvWithin(t, out, "the woken wait"); got.err != nil || got.results[0].Job.State != fdbq.Finished {
		t.Fatalf("woken wait: %+v %v", got.results[0].Job, got.err)
	}
}

// The monitor waits for the first deadline (or a change), not for the
// next tick: with every running job far from its deadline and every
// finished one far from its expiry, it has nothing to read.
func TestSpinMonitorIdle(t *testing.T) {
	q := newRealClockQueue(t, embedded.Options{})
	ctx := context.Background()
	for i := range 3 {
		addJob(t, q, fdbq.NewJob{ID: fmt.Sprintf("run%d", i)})
	}
	addJob(t, q, fdbq.NewJob{ID: "done", Priority: 1})
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{}); len(ls) != 1 || ls[0].ID != "done" {
		t.Fatalf("accepted %v", leaseIDsOf(ls))
	} else if err := q.Finish(ctx, q.DB(), ls[0], nil); err != nil {
		t.Fatal(err)
	}
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 3}); len(ls) != 3 {
		t.Fatalf("accepted %v", leaseIDsOf(ls))
	}

	mq, _ := hookedQueue(q, nil)
	l := startMonitor(t, mq, fdbq.MonitorOptions{})
	quietTransactions(t, mq.DB(), "monitor with every deadline far off")

	// A job with a short activity timeout, accepted and left: the monitor
	// learns of its deadline and takes it back once it passes.
	s := fdbq.DefaultTypeSettings()
	s.ActivityTimeout = 100 * time.Millisecond
	if err := q.SetType(ctx, q.DB(), "email", s); err != nil {
		t.Fatal(err)
	}
	addJob(t, q, fdbq.NewJob{ID: "short", Priority: 1})
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{}); len(ls) != 1 || ls[0].ID != "short" {
		t.Fatalf("accepted %v", leaseIDsOf(ls))
	}
	recvWithin(t, l.recycled, "the monitor taking back the job past its deadline")
	stateIs(t, q, "short", fdbq.Pending)
	for i := range 3 {
		stateIs(t, q, fmt.Sprintf("run%d", i), fdbq.Running)
	}
}

// A watch that fails (too many watches outstanding) is an answer, not a
// change: the accept returns the error instead of reading again at once.
func TestSpinAcceptWatchFails(t *testing.T) {
	q := newRealClockQueue(t, embedded.Options{MaxWatches: 1})
	ctx := context.Background()
	// Another client holds the one watch the store allows.
	other := kv.NewDB(q.DB().Backend(), kv.Options{})
	w, err := kv.Transact(ctx, other, func(tx kv.Tx) (kv.Watch, error) {
		return tx.Watch([]byte("elsewhere")), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Cancel()

	aq := fdbq.New(kv.NewDB(q.DB().Backend(), kv.Options{}), fdbq.Options{})
	out := make(chan acceptOutcome, 1)
	go func() { out <- acceptInto(t, fdbq.AcceptOptions{Timeout: -1})(aq) }()
	quietTransactions(t, aq.DB(), "accept whose watch fails")
	got := recvWithin(t, out, "the accept")
	if !errors.Is(got.err, kv.ErrTooManyWatches) {
		t.Fatalf("accept with no watch to be had: %v %v, want too_many_watches", leaseIDsOf(got.leases), got.err)
	}
}

// failingWatches is a backend whose watches fail at once with a retryable
// error, as a store might answer while it recovers.
type failingWatches struct{ kv.Backend }

func (b failingWatches) Begin(ctx context.Context) (kv.Transaction, error) {
	tx, err := b.Backend.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return failingWatchTx{tx}, nil
}

type failingWatchTx struct{ kv.Transaction }

func (failingWatchTx) Watch([]byte) kv.Watch {
	w := kv.NewChanWatch(nil)
	w.Fire(kv.ErrTransactionTooOld.WithDetail("test: watch failed"))
	return w
}

// A watch that fails with a retryable error means "read again", but not
// at once: a blocked call whose watches keep failing backs off.
func TestSpinWatchFailsRetryably(t *testing.T) {
	q := newRealClockQueue(t, embedded.Options{})
	if err := q.SetType(context.Background(), q.DB(), "sms", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	addJob(t, q, fdbq.NewJob{ID: "a"})
	fq := fdbq.New(kv.NewDB(failingWatches{q.DB().Backend()}, kv.Options{}), fdbq.Options{})
	// The backoff doubles from a millisecond: about log2 of the quiet
	// time in milliseconds, where a loop would read hundreds of times.
	const bound = 12
	for _, c := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"accept", func(ctx context.Context) error {
			_, err := fq.Accept(ctx, "sms", fdbq.AcceptOptions{Timeout: -1})
			return err
		}},
		{"wait", func(ctx context.Context) error {
			_, err := fq.WaitOne(ctx, "email", "a", fdbq.Finished)
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := make(chan error, 1)
			before := fq.DB().Stats().Transactions.Load()
			go func() { out <- c.call(ctx) }()
			time.Sleep(quiet)
			n := fq.DB().Stats().Transactions.Load() - before
			t.Logf("%d transactions in %v", n, quiet)
			if n > bound {
				t.Fatalf("%d store transactions in %v with failing watches, want at most %d", n, quiet, bound)
			}
			cancel()
			if err := recvWithin(t, out, "the cancelled call"); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled call: %v", err)
			}
		})
	}
}

// An idle monitor learns of a type registered after it went idle from the
// registry key, not from a periodic read: a job of the new type whose
// worker died is taken back soon after its deadline, and while nothing
// changes the monitor makes no transactions at all.
func TestSpinMonitorSeesNewType(t *testing.T) {
	q := newRealClockQueue(t, embedded.Options{})
	ctx := context.Background()
	mq, _ := hookedQueue(q, nil)
	l := startMonitor(t, mq, fdbq.MonitorOptions{})
	quietTransactions(t, mq.DB(), "monitor of a store with nothing running")

	s := fdbq.DefaultTypeSettings()
	s.ActivityTimeout = 100 * time.Millisecond
	if err := q.SetType(ctx, q.DB(), "late", s); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "late", ID: "j"}); err != nil {
		t.Fatal(err)
	}
	ls, err := q.Accept(ctx, "late", fdbq.AcceptOptions{})
	if err != nil || len(ls) != 1 {
		t.Fatalf("accept: %v %v", leaseIDsOf(ls), err)
	}
	recvWithin(t, l.recycled, "the monitor taking back a job of a type registered while it was idle")
}
