package fdbq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/tuple"
)

// The watches of Wait. FoundationDB defines a watch by the value its
// transaction saw: it fires some time after the key's value no longer
// matches it, and a client holds at most 10,000 of them at once (the
// database option max_watches), past which a new one fails with
// too_many_watches (1032): DatabaseContext::increaseWatchCounter in
// fdbclient/DatabaseContext.actor.cpp; the developer guide's "Watches"
// (apple.github.io/foundationdb/developer-guide.html#watches). The
// embedded store keeps the same limit (embedded.Options.MaxWatches), which
// these tests lower.

// watchKinds names the keys a wait can watch: the records of type
// "email" and its change key.
var (
	emailJobs   = tuple.FromBytes(fdbq.DefaultPrefix).Sub(1, "email").Bytes()
	emailChange = tuple.FromBytes(fdbq.DefaultPrefix).Sub(4, "email").Bytes()
)

type watchKind int

const (
	jobWatch watchKind = iota
	changeWatch
	otherWatch
	watchKinds
)

func kindOf(key []byte) watchKind {
	switch {
	case bytes.HasPrefix(key, emailJobs):
		return jobWatch
	case bytes.Equal(key, emailChange):
		return changeWatch
	}
	return otherWatch
}

// watchCounter is a backend that counts the watches its transactions make:
// how many the store holds (made and neither fired, failed nor
// cancelled), the most it held when a watch was made, and how many it
// refused.
type watchCounter struct {
	kv.Backend
	mu            sync.Mutex
	out           map[kv.Watch]watchKind // made, not yet seen ready
	peak, refused [watchKinds]int
	made          [watchKinds]int
}

func (c *watchCounter) Begin(ctx context.Context) (kv.Transaction, error) {
	tx, err := c.Backend.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return watchCountingTx{tx, c}, nil
}

type watchCountingTx struct {
	kv.Transaction
	c *watchCounter
}

func (t watchCountingTx) Watch(key []byte) kv.Watch {
	w := t.Transaction.Watch(key)
	k := kindOf(key)
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if closed(w.Ready()) {
		if errors.Is(w.Wait(context.Background()), kv.ErrTooManyWatches) {
			c.refused[k]++
		}
		return w
	}
	c.made[k]++
	if c.out == nil {
		c.out = make(map[kv.Watch]watchKind)
	}
	c.out[w] = k
	live := c.liveLocked()
	for k := range c.peak {
		c.peak[k] = max(c.peak[k], live[k])
	}
	return w
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// liveLocked counts the watches the store holds, forgetting the others.
// A watch that failed later with too_many_watches (as FoundationDB's do,
// after their transaction) counts as refused.
func (c *watchCounter) liveLocked() [watchKinds]int {
	var live [watchKinds]int
	for w, k := range c.out {
		if !closed(w.Ready()) {
			live[k]++
			continue
		}
		if errors.Is(w.Wait(context.Background()), kv.ErrTooManyWatches) {
			c.refused[k]++
		}
		delete(c.out, w)
	}
	return live
}

type watchCounts struct{ live, peak, made, refused [watchKinds]int }

func (c *watchCounter) counts() watchCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	live := c.liveLocked()
	return watchCounts{live, c.peak, c.made, c.refused}
}

// countedQueue returns a queue of type "email" over a fresh in-memory
// store opened with opts, whose watches c counts, and a second queue over
// the same store for the rest of the test to change jobs with, so that
// the first one's transactions are its waits' alone.
func countedQueue(t *testing.T, opts embedded.Options, qopts fdbq.Options) (q, other *fdbq.Queue, c *watchCounter) {
	t.Helper()
	opts.InMemory = true
	st, err := embedded.Open("", opts)
	if err != nil {
		t.Fatal(err)
	}
	c = &watchCounter{Backend: st}
	db := kv.NewDB(c, kv.Options{})
	t.Cleanup(func() { db.Close() })
	q = fdbq.New(db, qopts)
	other = fdbq.New(kv.NewDB(st, kv.Options{}), fdbq.Options{Now: qopts.Now})
	if err := other.SetType(context.Background(), other.DB(), "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	return q, other, c
}

// eventually polls cond until it holds, failing the test after a bound.
// Only the tests poll: they wait for many goroutines to be blocked, which
// nothing signals.
func eventually(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitsBlocked waits until n goroutines are blocked in a wait (in a
// select of Wait, not in a transaction), failing the test after bound;
// outs are the waits' outcomes, of which one that came back early is
// reported.
func waitsBlocked(t *testing.T, n int, bound time.Duration, outs ...<-chan waitOutcome) {
	t.Helper()
	deadline := time.Now().Add(bound)
	buf := make([]byte, 1<<20)
	for {
		k := 0
		for {
			if m := runtime.Stack(buf, true); m < len(buf) {
				k = blockedIn(buf[:m])
				break
			}
			buf = make([]byte, 2*len(buf))
		}
		if k == n {
			return
		}
		if time.Now().After(deadline) {
			for _, out := range outs {
				select {
				case got := <-out:
					t.Fatalf("%d of %d waits blocked; one returned: %+v %v", k, n, got.results, got.err)
				default:
				}
			}
			t.Fatalf("timed out with %d of %d waits blocked", k, n)
		}
		// A dump of thousands of goroutines stops them all: not too often.
		time.Sleep(20*time.Millisecond + time.Duration(n)*20*time.Microsecond)
	}
}

// blockedIn counts the goroutines of a stack dump that waitInBackground or
// waitOneInBackground started and that are blocked in a select under
// Queue.Wait, outside a transaction.
func blockedIn(dump []byte) int {
	n := 0
	for _, g := range bytes.Split(dump, []byte("\n\n")) {
		header, _, _ := bytes.Cut(g, []byte("\n"))
		if bytes.Contains(header, []byte("[select")) &&
			bytes.Contains(g, []byte("fdbq.(*Queue).Wait(")) &&
			bytes.Contains(g, []byte("created by github.com/jobstage/jobstage/fdbq_test.wait")) &&
			!bytes.Contains(g, []byte("kv.(*DB).Transact")) {
			n++
		}
	}
	return n
}

func waitOneInBackground(ctx context.Context, q *fdbq.Queue, id string, state fdbq.State) <-chan waitOutcome {
	ch := make(chan waitOutcome, 1)
	go func() {
		j, err := q.WaitOne(ctx, "email", id, state)
		ch <- waitOutcome{[]fdbq.WaitResult{{Job: j}}, err}
	}()
	return ch
}

func wantState(t *testing.T, out waitOutcome, id string, state fdbq.State) {
	t.Helper()
	if out.err != nil {
		t.Fatalf("wait for %s: %v", id, out.err)
	}
	if j := out.results[0].Job; j == nil || j.ID != id || j.State != state {
		t.Fatalf("wait for %s: %+v, want it %s", id, j, state)
	}
}

// addJobs adds n jobs j0000… of type email, in batches.
func addJobs(t *testing.T, q *fdbq.Queue, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("j%04d", i)
	}
	for from := 0; from < n; from += 500 {
		var batch []fdbq.NewJob
		for _, id := range ids[from:min(from+500, n)] {
			batch = append(batch, fdbq.NewJob{Type: "email", ID: id})
		}
		if _, err := q.AddBatch(context.Background(), q.DB(), batch); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// cancelAll cancels the pending jobs ids of type email, which finishes
// them, per to a transaction.
func cancelAll(t *testing.T, q *fdbq.Queue, ids []string, per int) {
	t.Helper()
	ctx := context.Background()
	for from := 0; from < len(ids); from += per {
		err := q.DB().Transact(ctx, func(tx kv.Tx) error {
			for _, id := range ids[from:min(from+per, len(ids))] {
				if err := q.Cancel(ctx, tx, "email", id); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// The issue: a wait for one job woke and read again at every change to any
// job of its type. It watches the job's record now, which nothing else
// writes.
func TestWaitSleepsWhileOtherJobsOfItsTypeChange(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	addJob(t, q, fdbq.NewJob{ID: "a"})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hq, out, _ := blocked(t, q, c.Now, func(q *fdbq.Queue) waitOutcome {
		j, err := q.WaitOne(wctx, "email", "a", fdbq.Finished)
		return waitOutcome{[]fdbq.WaitResult{{Job: j}}, err}
	})
	before := hq.DB().Stats().Transactions.Load()
	for i := range 1000 {
		addJob(t, q, fdbq.NewJob{ID: fmt.Sprintf("o%d", i)})
	}
	// Time for a woken wait to read; then no read may have happened.
	time.Sleep(quiet)
	if n := hq.DB().Stats().Transactions.Load() - before; n != 0 {
		t.Fatalf("the wait for a made %d store transactions while 1,000 other jobs of its type changed, want 0", n)
	}
	notReturned(t, out, "the wait")
	if err := q.Cancel(ctx, q.DB(), "email", "a"); err != nil {
		t.Fatal(err)
	}
	wantState(t, recvWithin(t, out, "the wait once a finished"), "a", fdbq.Finished)
	t.Logf("%d store transactions in all for the wait", hq.DB().Stats().Transactions.Load()-before+1)
}

// Waits of one queue on one job share one store watch, whatever state
// each waits for.
func TestWaitersOnOneJobShareAWatch(t *testing.T) {
	q, other, c := countedQueue(t, embedded.Options{}, fdbq.Options{})
	ctx := context.Background()
	addJob(t, other, fdbq.NewJob{ID: "a"})
	var outs []<-chan waitOutcome
	for i := range 60 {
		state := fdbq.Finished
		if i%6 == 0 {
			state = fdbq.Running
		}
		outs = append(outs, waitOneInBackground(ctx, q, "a", state))
	}
	waitsBlocked(t, len(outs), waitBound, outs...)
	n := c.counts()
	if n.live[jobWatch] != 1 || n.made[jobWatch] != 1 || n.made[changeWatch] != 0 {
		t.Fatalf("60 waits on one job: %d job watches held, %d made, %d change-key watches made; want 1, 1, 0", n.live[jobWatch], n.made[jobWatch], n.made[changeWatch])
	}
	if err := other.Cancel(ctx, other.DB(), "email", "a"); err != nil {
		t.Fatal(err)
	}
	for _, out := range outs {
		wantState(t, recvWithin(t, out, "a wait once its job finished"), "a", fdbq.Finished)
	}
	eventually(t, waitBound, "the shared watch released", func() bool { return c.counts().live[jobWatch] == 0 })
	if jobs, refs := q.WaitWatchStats(); jobs != 0 || refs != 0 {
		t.Fatalf("after the waits: %d job watches and %d references held", jobs, refs)
	}
}

// Thousands of waits, one a job, all complete, the store holding at most
// the queue's budget of job watches and a change-key watch for the rest.
// The store allows 1,500 watches: one a wait would be refused.
func TestWaitThousandsOfWaiters(t *testing.T) {
	const n, per = 5000, 1000
	// Cancelling a thousand jobs in one transaction can take more than
	// FoundationDB's 5 s on a busy machine with the race detector.
	q, other, c := countedQueue(t, embedded.Options{MaxWatches: 1500, TransactionLifetime: time.Minute}, fdbq.Options{})
	ctx := context.Background()
	ids := addJobs(t, other, n)
	outs := make([]<-chan waitOutcome, n)
	for i, id := range ids {
		outs[i] = waitOneInBackground(ctx, q, id, fdbq.Finished)
	}
	waitsBlocked(t, n, time.Minute, outs...)
	blockedAt := c.counts()
	cancelAll(t, other, ids, per)
	for i, out := range outs {
		wantState(t, recvWithin(t, out, "a wait once its job finished"), ids[i], fdbq.Finished)
	}
	got := c.counts()
	t.Logf("%d waits: blocked, the store held %d job watches and %d change-key watches; at most %d and %d; made %d and %d; %d store transactions",
		n, blockedAt.live[jobWatch], blockedAt.live[changeWatch], got.peak[jobWatch], got.peak[changeWatch],
		got.made[jobWatch], got.made[changeWatch], q.DB().Stats().Transactions.Load())
	if got.peak[jobWatch] > fdbq.DefaultWaitWatches {
		t.Errorf("the store held %d job watches at once, want at most the budget, %d", got.peak[jobWatch], fdbq.DefaultWaitWatches)
	}
	if blockedAt.live[jobWatch] != fdbq.DefaultWaitWatches {
		t.Errorf("with every wait blocked the store held %d job watches, want the budget, %d", blockedAt.live[jobWatch], fdbq.DefaultWaitWatches)
	}
	// One change-key watch, and briefly one more for a change the store
	// has yet to report to the last: a wait that read after the change
	// makes the next one meanwhile. cancelAll makes n/per changes.
	if got.peak[changeWatch] > 1+n/per {
		t.Errorf("the store held %d change-key watches at once, want at most %d", got.peak[changeWatch], 1+n/per)
	}
	if r := got.refused[jobWatch] + got.refused[changeWatch]; r != 0 {
		t.Errorf("the store refused %d watches", r)
	}
	eventually(t, waitBound, "every watch released", func() bool {
		n := c.counts()
		return n.live[jobWatch] == 0 && n.live[changeWatch] == 0
	})
}

// A wait for many jobs watches the type's change key, not each job.
func TestWaitManyJobsWatchesTheChangeKey(t *testing.T) {
	const n = 5000
	q, other, c := countedQueue(t, embedded.Options{TransactionLifetime: time.Minute}, fdbq.Options{})
	ids := addJobs(t, other, n)
	out := waitInBackground(context.Background(), q, ids, fdbq.Finished)
	waitsBlocked(t, 1, waitBound, out)
	if got := c.counts(); got.made[jobWatch] != 0 || got.live[changeWatch] != 1 {
		t.Fatalf("a wait for %d jobs made %d job watches and holds %d change-key watches, want 0 and 1", n, got.made[jobWatch], got.live[changeWatch])
	}
	cancelAll(t, other, ids, 1000)
	res := recvWithin(t, out, "the wait once its jobs finished")
	if res.err != nil {
		t.Fatal(res.err)
	}
	for i, r := range res.results {
		if r.Err != nil || r.Job.ID != ids[i] || r.Job.State != fdbq.Finished {
			t.Fatalf("result %d: %+v %v", i, r.Job, r.Err)
		}
	}
	got := c.counts()
	t.Logf("a wait for %d jobs: made %d job watches and %d change-key watches, at most %d at once; %d store transactions",
		n, got.made[jobWatch], got.made[changeWatch], got.peak[jobWatch]+got.peak[changeWatch], q.DB().Stats().Transactions.Load())
	if got.peak[jobWatch] > 32 {
		t.Fatalf("the store held %d job watches of one wait, want at most 32", got.peak[jobWatch])
	}
}

// gatedBackend holds back the first watch of job records its transactions
// make: it fires only once the test opens the gate, as a watch that
// FoundationDB has yet to deliver.
type gatedBackend struct {
	kv.Backend
	mu    sync.Mutex
	gated bool
	gate  chan struct{}
}

func (b *gatedBackend) Begin(ctx context.Context) (kv.Transaction, error) {
	tx, err := b.Backend.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return gatedTx{tx, b}, nil
}

type gatedTx struct {
	kv.Transaction
	b *gatedBackend
}

func (t gatedTx) Watch(key []byte) kv.Watch {
	w := t.Transaction.Watch(key)
	t.b.mu.Lock()
	defer t.b.mu.Unlock()
	if t.b.gated || kindOf(key) != jobWatch {
		return w
	}
	t.b.gated = true
	g := &gatedWatch{Watch: w, ready: make(chan struct{})}
	go func() {
		<-w.Ready()
		<-t.b.gate
		close(g.ready)
	}()
	return g
}

type gatedWatch struct {
	kv.Watch
	ready chan struct{}
}

func (g *gatedWatch) Ready() <-chan struct{} { return g.ready }

func (g *gatedWatch) Wait(ctx context.Context) error {
	select {
	case <-g.ready:
		return g.Watch.Wait(ctx)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A wait joins a shared watch only if the watch started from the value it
// read itself. Here the first wait's watch has not fired yet when the job
// changes and a second wait reads it: were the second to join that watch,
// it would sleep through the job finishing until the store delivered the
// first change. A watch fires some time after the value differs from the
// one its transaction saw (FoundationDB's developer guide, "Watches"), and
// the delay is unbounded.
func TestWaitJoinsOnlyAWatchFromWhatItRead(t *testing.T) {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	gb := &gatedBackend{Backend: st, gate: make(chan struct{})}
	db := kv.NewDB(gb, kv.Options{})
	t.Cleanup(func() { db.Close() })
	var once sync.Once
	openGate := func() { once.Do(func() { close(gb.gate) }) }
	t.Cleanup(openGate)
	q := fdbq.New(db, fdbq.Options{})
	other := fdbq.New(kv.NewDB(st, kv.Options{}), fdbq.Options{})
	ctx := context.Background()
	if err := other.SetType(ctx, other.DB(), "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	addJob(t, other, fdbq.NewJob{ID: "a"})

	first := waitOneInBackground(ctx, q, "a", fdbq.Finished)
	waitsBlocked(t, 1, waitBound, first)
	ls, err := other.Accept(ctx, "email", fdbq.AcceptOptions{})
	if err != nil || len(ls) != 1 {
		t.Fatalf("accept: %v %v", leaseIDsOf(ls), err)
	}
	second := waitOneInBackground(ctx, q, "a", fdbq.Finished)
	waitsBlocked(t, 2, waitBound, first, second)
	if err := other.Finish(ctx, other.DB(), ls[0], nil); err != nil {
		t.Fatal(err)
	}
	wantState(t, recvWithin(t, second, "the second wait once the job finished"), "a", fdbq.Finished)
	notReturned(t, first, "the wait whose watch has not fired yet")
	openGate()
	wantState(t, recvWithin(t, first, "the first wait once its watch fired"), "a", fdbq.Finished)
}

// The store answers too_many_watches: a wait whose job watch it refuses
// watches the change key instead, and one whose change-key watch it
// refuses too reads again once the queue lets go of a watch (or after a
// backoff), neither failing nor spinning. The store allows 3 watches and
// another client holds one.
func TestWaitFallsBackWhenTheStoreRefusesWatches(t *testing.T) {
	q, other, c := countedQueue(t, embedded.Options{MaxWatches: 3}, fdbq.Options{})
	ctx := context.Background()
	w, err := kv.Transact(ctx, other.DB(), func(tx kv.Tx) (kv.Watch, error) {
		return tx.Watch([]byte("elsewhere")), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Cancel()
	for _, id := range []string{"a", "b", "c"} {
		addJob(t, other, fdbq.NewJob{ID: id})
	}
	a := waitOneInBackground(ctx, q, "a", fdbq.Finished)
	waitsBlocked(t, 1, waitBound, a)
	b := waitOneInBackground(ctx, q, "b", fdbq.Finished)
	waitsBlocked(t, 2, waitBound, a, b)

	before := q.DB().Stats().Transactions.Load()
	cw := waitOneInBackground(ctx, q, "c", fdbq.Finished)
	eventually(t, waitBound, "the store refusing the wait for c", func() bool { return c.counts().refused[changeWatch] >= 1 })
	time.Sleep(quiet)
	notReturned(t, cw, "the wait for c")
	if n := c.counts(); n.refused[jobWatch] != 1 {
		t.Fatalf("the store refused %d job watches, want 1", n.refused[jobWatch])
	}
	// As TestSpinWatchFailsRetryably: a backoff doubling from a
	// millisecond, not a loop of reads.
	if n := q.DB().Stats().Transactions.Load() - before; n > 12 {
		t.Fatalf("the wait for c made %d store transactions in %v with no watch to be had, want at most 12", n, quiet)
	}

	// a finishes: its wait lets go of its watch, and c's wait, woken by
	// that, reads again and takes the place.
	if err := other.Cancel(ctx, other.DB(), "email", "a"); err != nil {
		t.Fatal(err)
	}
	wantState(t, recvWithin(t, a, "the wait for a"), "a", fdbq.Finished)
	eventually(t, waitBound, "the wait for c holding a watch", func() bool {
		_, refs := q.WaitWatchStats()
		return refs == 2
	})
	notReturned(t, cw, "the wait for c")
	if err := other.Cancel(ctx, other.DB(), "email", "c"); err != nil {
		t.Fatal(err)
	}
	wantState(t, recvWithin(t, cw, "the wait for c"), "c", fdbq.Finished)
	if err := other.Cancel(ctx, other.DB(), "email", "b"); err != nil {
		t.Fatal(err)
	}
	wantState(t, recvWithin(t, b, "the wait for b"), "b", fdbq.Finished)
	n := c.counts()
	t.Logf("refused: %d job watches, %d change-key watches; made %d and %d; %d store transactions",
		n.refused[jobWatch], n.refused[changeWatch], n.made[jobWatch], n.made[changeWatch], q.DB().Stats().Transactions.Load())
}

// A wait whose job watch the store refuses joins the change-key watch
// another wait of the queue holds: it needs no watch of its own. The store
// allows 3 watches; a wait for 40 jobs holds the change key's.
func TestWaitJoinsTheChangeKeyWhenTheStoreRefuses(t *testing.T) {
	q, other, c := countedQueue(t, embedded.Options{MaxWatches: 3}, fdbq.Options{})
	ctx := context.Background()
	ids := addJobs(t, other, 43)
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	many := waitInBackground(mctx, q, ids[:40], fdbq.Finished)
	waitsBlocked(t, 1, waitBound, many)
	x := waitOneInBackground(ctx, q, ids[40], fdbq.Finished)
	waitsBlocked(t, 2, waitBound, many, x)
	y := waitOneInBackground(ctx, q, ids[41], fdbq.Finished)
	waitsBlocked(t, 3, waitBound, many, x, y)

	before := q.DB().Stats().Transactions.Load()
	z := waitOneInBackground(ctx, q, ids[42], fdbq.Finished)
	waitsBlocked(t, 4, waitBound, many, x, y, z)
	quietTransactions(t, q.DB(), "the wait refused a job watch")
	n := c.counts()
	if n.refused[jobWatch] != 1 || n.refused[changeWatch] != 0 || n.made[changeWatch] != 1 {
		t.Fatalf("refused %d job watches and %d change-key watches, made %d change-key watches; want 1, 0, 1", n.refused[jobWatch], n.refused[changeWatch], n.made[changeWatch])
	}
	t.Logf("the refused wait: %d store transactions", q.DB().Stats().Transactions.Load()-before)
	notReturned(t, z, "the refused wait")
	if err := other.Cancel(ctx, other.DB(), "email", ids[42]); err != nil {
		t.Fatal(err)
	}
	wantState(t, recvWithin(t, z, "the refused wait"), ids[42], fdbq.Finished)
	for i, out := range []<-chan waitOutcome{x, y} {
		if err := other.Cancel(ctx, other.DB(), "email", ids[40+i]); err != nil {
			t.Fatal(err)
		}
		wantState(t, recvWithin(t, out, "a wait once its job finished"), ids[40+i], fdbq.Finished)
	}
	cancel()
	if got := recvWithin(t, many, "the cancelled wait"); !errors.Is(got.err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", got.err)
	}
}

// Waits that return, by their jobs or by their contexts, leave no
// goroutine, no watch and no reference behind.
func TestWaitLeavesNothingBehind(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	// Registered first, so it runs after the stores are closed.
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	q, other, c := countedQueue(t, embedded.Options{}, fdbq.Options{WaitWatches: 10})
	ctx := context.Background()
	ids := addJobs(t, other, 40)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var finished, cancelled []<-chan waitOutcome
	for i, id := range ids[:20] {
		finished = append(finished, waitOneInBackground(ctx, q, id, fdbq.Finished))
		cancelled = append(cancelled, waitOneInBackground(cctx, q, ids[20+i], fdbq.Finished))
	}
	many := waitInBackground(cctx, q, ids, fdbq.Finished)
	waitsBlocked(t, 41, waitBound, append(append(finished, cancelled...), many)...)
	if jobs, _ := q.WaitWatchStats(); jobs != 10 {
		t.Fatalf("%d job watches held, want the budget, 10", jobs)
	}
	cancel()
	for _, out := range append(cancelled, many) {
		if got := recvWithin(t, out, "a cancelled wait"); !errors.Is(got.err, context.Canceled) {
			t.Fatalf("cancelled wait: %v", got.err)
		}
	}
	cancelAll(t, other, ids, 10)
	for i, out := range finished {
		wantState(t, recvWithin(t, out, "a wait once its job finished"), ids[i], fdbq.Finished)
	}
	if jobs, refs := q.WaitWatchStats(); jobs != 0 || refs != 0 {
		t.Fatalf("after the waits: %d job watches and %d references held", jobs, refs)
	}
	eventually(t, waitBound, "every watch released", func() bool {
		n := c.counts()
		return n.live[jobWatch] == 0 && n.live[changeWatch] == 0
	})
}
