package kvtest

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// FaultOptions sets how often a FaultyBackend injects each failure.
//
// The commit faults (conflict, too-old, the two commit_unknown_result
// kinds) are drawn once per commit and exclusive of each other, in that
// order, so their rates should add up to at most 1. A delay is drawn
// independently and comes on top of any of them.
type FaultOptions struct {
	// Seed makes the faults reproducible: the same seed and the same
	// sequence of operations inject the same faults.
	Seed int64
	// ConflictRate: the commit fails with not_committed and does not apply.
	ConflictRate float64
	// TooOldRate: the commit fails with transaction_too_old and does not
	// apply. Reads fail with transaction_too_old at TooOldRate *
	// ReadTooOldFraction per read, and the transaction is then too old for
	// good: every later read and the commit fail the same way.
	TooOldRate float64
	// UnknownNotAppliedRate: the commit fails with commit_unknown_result
	// and did not apply.
	UnknownNotAppliedRate float64
	// UnknownAppliedRate: the commit applies, then reports
	// commit_unknown_result.
	UnknownAppliedRate float64
	// DelayRate: the commit waits a uniform random time up to MaxDelay
	// first (or until the transaction's context ends).
	DelayRate float64
	MaxDelay  time.Duration
}

// ReadTooOldFraction scales TooOldRate to the per-read rate. Reads are far
// more frequent than commits, and a transaction usually reads several
// times, so the per-read rate is lower to keep most transactions alive.
const ReadTooOldFraction = 0.1

// DefaultFaultOptions returns the rates RunFaulty uses: about one commit in
// eight fails, often enough that every test meets every fault kind, rarely
// enough that contended tests finish.
func DefaultFaultOptions(seed int64) FaultOptions {
	return FaultOptions{
		Seed:                  seed,
		ConflictRate:          0.05,
		TooOldRate:            0.02,
		UnknownNotAppliedRate: 0.02,
		UnknownAppliedRate:    0.03,
		DelayRate:             0.1,
		MaxDelay:              2 * time.Millisecond,
	}
}

// FaultCounts says how many faults a FaultyBackend injected, so tests can
// check that the faults they rely on really happened.
type FaultCounts struct {
	Commits           int64 // commits that reached the wrapper
	Conflicts         int64 // not_committed, not applied
	TooOld            int64 // transaction_too_old at commit, not applied
	TooOldReads       int64 // transaction_too_old on a read
	UnknownNotApplied int64 // commit_unknown_result, not applied
	UnknownApplied    int64 // commit_unknown_result after the commit applied
	Delays            int64 // commits delayed
}

// Injected counts FaultCounts' failures (delays are not failures).
func (c FaultCounts) Injected() int64 {
	return c.Conflicts + c.TooOld + c.TooOldReads + c.UnknownNotApplied + c.UnknownApplied
}

// The detail injected errors carry, so that a failure in a test log says
// where it came from.
const injectedDetail = "injected by kvtest.FaultyBackend"

// FaultyBackend is a kv.Backend that injects FoundationDB's failure modes
// into another backend's transactions: it forwards everything to the inner
// transaction and intercepts reads (transaction_too_old) and Commit (the
// rest). A watch or versionstamp of a transaction whose commit failed by
// injection fails with the injected error, as FoundationDB's do.
type FaultyBackend struct {
	inner   kv.Backend
	opts    FaultOptions
	enabled atomic.Bool

	mu struct {
		sync.Mutex
		rng *rand.Rand
	}
	counts struct {
		commits, conflicts, tooOld, tooOldReads, unknownNotApplied, unknownApplied, delays atomic.Int64
	}
}

var _ kv.Backend = (*FaultyBackend)(nil)

// NewFaultyBackend wraps inner. Faults are on from the start.
func NewFaultyBackend(inner kv.Backend, o FaultOptions) *FaultyBackend {
	b := &FaultyBackend{inner: inner, opts: o}
	b.mu.rng = rand.New(rand.NewPCG(uint64(o.Seed), uint64(o.Seed)^0x6b76746573740a))
	b.enabled.Store(true)
	return b
}

// NewFaultyDB wraps db's backend in a FaultyBackend and returns a DB over
// it whose retry loop outlasts the injected failures: a high retry limit,
// and a short maximum backoff because the failures are not load.
func NewFaultyDB(db *kv.DB, o FaultOptions) (*kv.DB, *FaultyBackend) {
	b := NewFaultyBackend(db.Backend(), o)
	return kv.NewDB(b, kv.Options{RetryLimit: 1000, MaxBackoff: 50 * time.Millisecond}), b
}

// Inner returns the wrapped backend.
func (b *FaultyBackend) Inner() kv.Backend { return b.inner }

// SetEnabled turns injection on or off, so a test can arrange its state
// without faults and then exercise it with them.
func (b *FaultyBackend) SetEnabled(on bool) { b.enabled.Store(on) }

// Counts returns how many faults were injected so far.
func (b *FaultyBackend) Counts() FaultCounts {
	c := &b.counts
	return FaultCounts{
		Commits:           c.commits.Load(),
		Conflicts:         c.conflicts.Load(),
		TooOld:            c.tooOld.Load(),
		TooOldReads:       c.tooOldReads.Load(),
		UnknownNotApplied: c.unknownNotApplied.Load(),
		UnknownApplied:    c.unknownApplied.Load(),
		Delays:            c.delays.Load(),
	}
}

// Begin implements kv.Backend.
func (b *FaultyBackend) Begin(ctx context.Context) (kv.Transaction, error) {
	inner, err := b.inner.Begin(ctx)
	if err != nil {
		return nil, err
	}
	t := &faultyTx{b: b, inner: inner}
	t.reader = reader{tx: t, inner: inner}
	return t, nil
}

// Close implements kv.Backend by closing the inner backend.
func (b *FaultyBackend) Close() error { return b.inner.Close() }

type commitFault int

const (
	noFault commitFault = iota
	conflictFault
	tooOldFault
	unknownNotAppliedFault
	unknownAppliedFault
)

// drawCommit decides one commit's fate. It always draws the same number of
// values, so the sequence stays reproducible whatever is decided.
func (b *FaultyBackend) drawCommit() (commitFault, time.Duration) {
	if !b.enabled.Load() {
		return noFault, 0
	}
	b.mu.Lock()
	kind, delayed, delay := b.mu.rng.Float64(), b.mu.rng.Float64(), b.mu.rng.Float64()
	b.mu.Unlock()

	o := &b.opts
	var d time.Duration
	if delayed < o.DelayRate && o.MaxDelay > 0 {
		d = time.Duration(delay * float64(o.MaxDelay))
	}
	switch {
	case kind < o.ConflictRate:
		return conflictFault, d
	case kind < o.ConflictRate+o.TooOldRate:
		return tooOldFault, d
	case kind < o.ConflictRate+o.TooOldRate+o.UnknownNotAppliedRate:
		return unknownNotAppliedFault, d
	case kind < o.ConflictRate+o.TooOldRate+o.UnknownNotAppliedRate+o.UnknownAppliedRate:
		return unknownAppliedFault, d
	}
	return noFault, d
}

// drawRead decides whether a read fails with transaction_too_old.
func (b *FaultyBackend) drawRead() bool {
	if !b.enabled.Load() {
		return false
	}
	b.mu.Lock()
	r := b.mu.rng.Float64()
	b.mu.Unlock()
	return r < b.opts.TooOldRate*ReadTooOldFraction
}

// faultyTx wraps one inner transaction.
type faultyTx struct {
	reader
	b     *FaultyBackend
	inner kv.Transaction

	mu struct {
		sync.Mutex
		// tooOld is set once a read failed by injection: the transaction
		// stays too old, as a real one would.
		tooOld error
		// ended: Commit or Cancel was called; injection is over.
		ended bool
		// committing: Commit was called.
		committing bool
		// failure is the injected error the commit failed with.
		failure error
		watches []*faultyWatch
		stamp   *kv.Future[kv.Versionstamp]
	}
}

var _ kv.Transaction = (*faultyTx)(nil)

// reader is the read side shared by a faultyTx and its snapshot view.
type reader struct {
	tx    *faultyTx
	inner kv.ReadTx
}

// Get implements kv.ReadTx. The inner read goes first, so that a real
// error (a bad write, a cancelled transaction) wins over an injected one.
func (r reader) Get(key []byte) ([]byte, error) {
	if err := r.tx.tooOld(); err != nil {
		return nil, err
	}
	v, err := r.inner.Get(key)
	if err != nil {
		return nil, err
	}
	if err := r.tx.injectRead(); err != nil {
		return nil, err
	}
	return v, nil
}

// GetRange implements kv.ReadTx.
func (r reader) GetRange(rg kv.Range, opts kv.RangeOptions) ([]kv.KeyValue, error) {
	if err := r.tx.tooOld(); err != nil {
		return nil, err
	}
	kvs, err := r.inner.GetRange(rg, opts)
	if err != nil {
		return nil, err
	}
	if err := r.tx.injectRead(); err != nil {
		return nil, err
	}
	return kvs, nil
}

// Iterate implements kv.ReadTx; a too-old fault may hit its first page.
func (r reader) Iterate(rg kv.Range, opts kv.RangeOptions) kv.RangeIterator {
	return &faultyIterator{tx: r.tx, inner: r.inner.Iterate(rg, opts)}
}

// Context implements kv.ReadTx.
func (r reader) Context() context.Context { return r.inner.Context() }

type faultyIterator struct {
	tx      *faultyTx
	inner   kv.RangeIterator
	started bool
	err     error
}

func (it *faultyIterator) Next() bool {
	if it.err != nil {
		return false
	}
	first := !it.started
	it.started = true
	if first {
		if it.err = it.tx.tooOld(); it.err != nil {
			return false
		}
	}
	if !it.inner.Next() {
		return false
	}
	if first {
		if it.err = it.tx.injectRead(); it.err != nil {
			return false
		}
	}
	return true
}

func (it *faultyIterator) KeyValue() kv.KeyValue { return it.inner.KeyValue() }

func (it *faultyIterator) Err() error {
	if it.err != nil {
		return it.err
	}
	return it.inner.Err()
}

// snapshotView is a faultyTx's snapshot view.
type snapshotView struct{ reader }

// ReadTransact implements kv.ReadTx, passing the view itself to fn so that
// fn's reads go through the wrapper.
func (s *snapshotView) ReadTransact(ctx context.Context, fn func(kv.ReadTx) error) error {
	return s.inner.ReadTransact(ctx, func(kv.ReadTx) error { return fn(s) })
}

// tooOld returns the error of an earlier injected too-old read.
func (t *faultyTx) tooOld() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.tooOld
}

// injectRead may fail a read with transaction_too_old.
func (t *faultyTx) injectRead() error {
	t.mu.Lock()
	ended := t.mu.ended
	t.mu.Unlock()
	if ended || !t.b.drawRead() {
		return nil
	}
	t.b.counts.tooOldReads.Add(1)
	var err error = kv.ErrTransactionTooOld.WithDetail("%s, on a read", injectedDetail)
	t.mu.Lock()
	if t.mu.tooOld == nil {
		t.mu.tooOld = err
	}
	err = t.mu.tooOld
	t.mu.Unlock()
	return err
}

// ReadVersion implements kv.ReadTx. Nothing is injected: FoundationDB
// obtains a transaction's read version once and keeps it
// (Transaction::getReadVersion in fdbclient's NativeAPI), so asking for
// it never answers transaction_too_old; an earlier injected too-old read
// still fails it, as the transaction is then too old.
func (r reader) ReadVersion() (int64, error) {
	v, err := r.inner.ReadVersion()
	if err != nil {
		return 0, err
	}
	if err := r.tx.tooOld(); err != nil {
		return 0, err
	}
	return v, nil
}

// Snapshot implements kv.Tx.
func (t *faultyTx) Snapshot() kv.ReadTx {
	return &snapshotView{reader{tx: t, inner: t.inner.Snapshot()}}
}

// ReadTransact implements kv.ReadTx, passing the wrapper to fn.
func (t *faultyTx) ReadTransact(ctx context.Context, fn func(kv.ReadTx) error) error {
	return t.inner.ReadTransact(ctx, func(kv.ReadTx) error { return fn(t) })
}

// Transact implements kv.Tx, passing the wrapper to fn so that a nested
// function's reads and watches go through it too.
func (t *faultyTx) Transact(ctx context.Context, fn func(kv.Tx) error) error {
	return t.inner.Transact(ctx, func(kv.Tx) error { return fn(t) })
}

// Writes go straight to the inner transaction: faults strike at reads and
// at commit, where FoundationDB's failures surface.

func (t *faultyTx) Set(key, value []byte)                    { t.inner.Set(key, value) }
func (t *faultyTx) Clear(key []byte)                         { t.inner.Clear(key) }
func (t *faultyTx) ClearRange(r kv.Range)                    { t.inner.ClearRange(r) }
func (t *faultyTx) Atomic(op kv.MutationType, key, p []byte) { t.inner.Atomic(op, key, p) }
func (t *faultyTx) Add(key []byte, delta int64)              { t.inner.Add(key, delta) }
func (t *faultyTx) SetVersionstampedKey(k, v []byte)         { t.inner.SetVersionstampedKey(k, v) }
func (t *faultyTx) SetVersionstampedValue(k, v []byte)       { t.inner.SetVersionstampedValue(k, v) }
func (t *faultyTx) AddReadConflictKey(key []byte)            { t.inner.AddReadConflictKey(key) }
func (t *faultyTx) AddReadConflictRange(r kv.Range)          { t.inner.AddReadConflictRange(r) }
func (t *faultyTx) AddWriteConflictKey(key []byte)           { t.inner.AddWriteConflictKey(key) }
func (t *faultyTx) AddWriteConflictRange(r kv.Range)         { t.inner.AddWriteConflictRange(r) }

// Watch implements kv.Tx. The wrapper's watch follows the inner one, but a
// commit that fails by injection fails it with the injected error.
func (t *faultyTx) Watch(key []byte) kv.Watch {
	w := newFaultyWatch(t.inner.Watch(key))
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.failure != nil {
		w.out.Fire(t.mu.failure)
	}
	t.mu.watches = append(t.mu.watches, w)
	return w
}

// Versionstamp implements kv.Tx. Like a watch, the future follows the
// inner one unless a commit fails by injection.
func (t *faultyTx) Versionstamp() *kv.Future[kv.Versionstamp] {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.committing {
		// Asked for after the commit started, as every backend answers.
		f := kv.NewFuture[kv.Versionstamp]()
		f.Resolve(kv.Versionstamp{}, kv.ErrUsedDuringCommit.WithDetail("versionstamp asked for after the commit started"))
		return f
	}
	if t.mu.stamp == nil {
		t.mu.stamp = kv.NewFuture[kv.Versionstamp]()
		if t.mu.failure != nil {
			t.mu.stamp.Resolve(kv.Versionstamp{}, invalidVersion(t.mu.failure))
		} else {
			forward(t.inner.Versionstamp(), t.mu.stamp)
		}
	}
	return t.mu.stamp
}

// forward resolves out with in's result, unless out is resolved first.
func forward[T any](in, out *kv.Future[T]) {
	go func() {
		select {
		case <-in.Ready():
			v, err := in.Get(context.Background())
			out.Resolve(v, err)
		case <-out.Ready():
		}
	}()
}

// Cancel implements kv.Transaction.
func (t *faultyTx) Cancel() {
	t.end(nil)
	t.inner.Cancel()
}

// Commit implements kv.Transaction: it draws a fault and either fails
// without touching the inner commit, or commits and then reports
// commit_unknown_result, or commits normally; a delay may come first.
func (t *faultyTx) Commit() error {
	t.b.counts.commits.Add(1)
	t.mu.Lock()
	ended, tooOld := t.mu.ended, t.mu.tooOld
	t.mu.committing = true
	t.mu.Unlock()
	if ended {
		// Committed or cancelled before: the inner transaction answers
		// as FoundationDB would.
		return t.inner.Commit()
	}
	if tooOld != nil {
		return t.failWithout(tooOld)
	}
	fault, delay := t.b.drawCommit()
	if delay > 0 {
		t.b.counts.delays.Add(1)
		sleep(t.inner.Context(), delay)
	}
	switch fault {
	case conflictFault:
		t.b.counts.conflicts.Add(1)
		return t.failWithout(kv.ErrNotCommitted.WithDetail("%s, not applied", injectedDetail))
	case tooOldFault:
		t.b.counts.tooOld.Add(1)
		return t.failWithout(kv.ErrTransactionTooOld.WithDetail("%s, not applied", injectedDetail))
	case unknownNotAppliedFault:
		t.b.counts.unknownNotApplied.Add(1)
		return t.failWithout(kv.ErrCommitUnknownResult.WithDetail("%s, not applied", injectedDetail))
	case unknownAppliedFault:
		err := kv.ErrCommitUnknownResult.WithDetail("%s, applied", injectedDetail)
		// Fail the watches and the versionstamp before the inner commit
		// can resolve them: the caller must not learn that it applied.
		t.end(err)
		if cerr := t.inner.Commit(); cerr != nil {
			return cerr // a real failure: it did not apply after all
		}
		t.b.counts.unknownApplied.Add(1)
		return err
	}
	t.end(nil)
	return t.inner.Commit()
}

// failWithout fails the commit with err without committing.
func (t *faultyTx) failWithout(err error) error {
	t.end(err)
	t.inner.Cancel()
	return err
}

// end marks the transaction over: no more injection. A non-nil failure is
// what the commit reports; the watches and the versionstamp fail with it.
func (t *faultyTx) end(failure error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.ended = true
	if failure == nil || t.mu.failure != nil {
		return
	}
	t.mu.failure = failure
	for _, w := range t.mu.watches {
		w.out.Fire(failure)
	}
	if t.mu.stamp != nil {
		t.mu.stamp.Resolve(kv.Versionstamp{}, invalidVersion(failure))
	}
}

// invalidVersion is the versionstamp's error after a failed commit:
// FoundationDB's transaction_invalid_version, whatever the commit's error.
func invalidVersion(commitErr error) error {
	return kv.ErrTransactionInvalidVersion.WithDetail("commit failed: %v", commitErr)
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

// faultyWatch follows an inner watch; the wrapper can fail it first.
type faultyWatch struct {
	out *kv.ChanWatch
}

func newFaultyWatch(inner kv.Watch) *faultyWatch {
	w := &faultyWatch{out: kv.NewChanWatch(inner.Cancel)}
	// The goroutine ends when either side is ready: the inner watch fires
	// or fails (at the latest when the inner backend closes), or the
	// wrapper's is failed or cancelled, which releases the inner one.
	go func() {
		select {
		case <-inner.Ready():
			w.out.Fire(inner.Wait(context.Background()))
		case <-w.out.Ready():
			inner.Cancel()
		}
	}()
	return w
}

func (w *faultyWatch) Ready() <-chan struct{}         { return w.out.Ready() }
func (w *faultyWatch) Wait(ctx context.Context) error { return w.out.Wait(ctx) }
func (w *faultyWatch) Cancel()                        { w.out.Cancel() }
