//go:build fdb

package fdb

import (
	"context"
	"errors"
	"sync"

	"github.com/apple/foundationdb/bindings/go/src/fdb"

	"github.com/jobstage/jobstage/kv"
)

// txn is a kv.Transaction on an fdb.Transaction.
type txn struct {
	reader // reads through tr itself: they add read conflicts
	s      *Store
	tr     fdb.Transaction
	ctx    context.Context

	mu   sync.Mutex
	stop func() bool // unregisters the ctx hook
	// err is the first error of an operation that cannot return one (an
	// unknown mutation type, a rejected conflict range); the next read and
	// the commit return it, as FoundationDB does with a bad write.
	err error
	// cause is why the adapter cancelled tr (ctx's error, kv.ErrClosed, or
	// err at commit); transaction_cancelled errors are reported with it.
	cause      error
	cancelled  bool // abort ran
	committing bool // Commit was called
	committed  bool // Commit succeeded; cancelling is then a no-op
	vs         *kv.Future[kv.Versionstamp]
	vsf        fdb.FutureKey // FoundationDB's versionstamp, requested before commit
}

var _ kv.Transaction = (*txn)(nil)

func (t *txn) failed() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

func (t *txn) fail(err error) {
	if err == nil {
		return
	}
	t.mu.Lock()
	if t.err == nil {
		t.err = err
	}
	t.mu.Unlock()
}

// mapErr converts an error of an operation on tr.
func (t *txn) mapErr(err error) error {
	if err == nil {
		return nil
	}
	err = toKV(err)
	var ke *kv.Error
	if errors.As(err, &ke) && ke.Code == kv.CodeTransactionCancelled {
		t.mu.Lock()
		cause := t.cause
		t.mu.Unlock()
		return withCause(ke, cause)
	}
	return err
}

// cancelledErrLocked is the error of an operation on the cancelled tr.
func (t *txn) cancelledErrLocked() error {
	return withCause(kv.ErrTransactionCancelled, t.cause)
}

// abort cancels tr unless it committed. cause, if not nil, is reported
// with the transaction_cancelled errors that follow.
func (t *txn) abort(cause error) {
	t.mu.Lock()
	if t.committed {
		t.mu.Unlock()
		return
	}
	if t.cause == nil {
		t.cause = cause
	}
	t.cancelled = true
	stop := t.stop
	var vs *kv.Future[kv.Versionstamp]
	if !t.committing { // else Commit resolves it with the commit's outcome
		vs = t.vs
	}
	vsErr := t.cancelledErrLocked()
	t.mu.Unlock()

	t.tr.Cancel()
	stop()
	t.s.forget(t)
	if vs != nil {
		vs.Resolve(kv.Versionstamp{}, vsErr)
	}
}

// Commit implements kv.Transaction.
func (t *txn) Commit() error {
	t.mu.Lock()
	failed := t.err
	t.committing = true
	if failed != nil && t.cause == nil {
		t.cause = failed
	}
	vs, vsf := t.vs, t.vsf
	t.mu.Unlock()

	var err error
	if failed != nil {
		// FoundationDB never saw the failed operation: cancel so that the
		// watches fail too.
		t.tr.Cancel()
		err = failed
	} else {
		err = t.mapErr(t.tr.Commit().Get())
		if errors.Is(err, kv.ErrTransactionCancelled) || errors.Is(err, kv.ErrTransactionTimedOut) {
			// Cancelled (its context ended, the Store closed) or timed out
			// while the commit was in flight: FoundationDB may still
			// commit it (its developer guide says so of both), so the
			// outcome is unknown, and no retry may find out by reading.
			err = &kv.UnknownResultError{Err: err, Unknown: kv.ErrCommitUnknownResult.WithDetail("cancelled while the commit was in flight; it may still commit")}
		}
	}

	t.mu.Lock()
	t.committed = err == nil
	stop := t.stop
	t.mu.Unlock()
	stop()
	t.s.forget(t)

	if vs != nil {
		if err != nil {
			vs.Resolve(kv.Versionstamp{}, kv.ErrTransactionInvalidVersion.WithDetail("commit failed: %v", err))
		} else {
			// Ready by now: FoundationDB sets it before the commit
			// completes (no_commit_version for a read-only transaction).
			k, verr := vsf.Get()
			var v kv.Versionstamp
			copy(v[:], k)
			vs.Resolve(v, t.mapErr(verr))
		}
	}
	return err
}

// Cancel implements kv.Transaction. After a successful Commit it does
// nothing, so that a deferred Cancel leaves the watches alone.
func (t *txn) Cancel() { t.abort(nil) }

// Versionstamp implements kv.Tx. FoundationDB hands out the versionstamp
// future only before the commit, so it is requested on the first call; a
// first call after Commit started gets used_during_commit, as
// ReadYourWritesTransaction::getVersionstamp answers.
func (t *txn) Versionstamp() *kv.Future[kv.Versionstamp] {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.vs != nil {
		return t.vs
	}
	t.vs = kv.NewFuture[kv.Versionstamp]()
	switch {
	case t.committing:
		t.vs.Resolve(kv.Versionstamp{}, kv.ErrUsedDuringCommit.WithDetail("versionstamp asked for after the commit started"))
	case t.cancelled:
		t.vs.Resolve(kv.Versionstamp{}, t.cancelledErrLocked())
	default:
		t.vsf = t.tr.GetVersionstamp()
	}
	return t.vs
}

// Snapshot implements kv.Tx.
func (t *txn) Snapshot() kv.ReadTx { return reader{t: t, rt: t.tr.Snapshot()} }

// ReadVersion implements kv.Tx with the transaction's read version, which
// FoundationDB obtains at the first read or here.
func (t *txn) ReadVersion() (int64, error) {
	if err := t.failed(); err != nil {
		return 0, err
	}
	v, err := t.tr.GetReadVersion().Get()
	if err != nil {
		return 0, t.mapErr(err)
	}
	return v, nil
}

// Transact implements kv.Tx: fn runs in this transaction, which its owner
// commits.
func (t *txn) Transact(ctx context.Context, fn func(kv.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return fn(t)
}

// ReadTransact implements kv.ReadTx.
func (t *txn) ReadTransact(ctx context.Context, fn func(kv.ReadTx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return fn(t)
}

func (t *txn) Set(key, value []byte) { t.tr.Set(fdb.Key(key), value) }

func (t *txn) Clear(key []byte) { t.tr.Clear(fdb.Key(key)) }

func (t *txn) ClearRange(r kv.Range) { t.tr.ClearRange(keyRange(r)) }

// Atomic implements kv.Tx. kv numbers mutations as FoundationDB does.
func (t *txn) Atomic(op kv.MutationType, key, param []byte) {
	k := fdb.Key(key)
	switch op {
	case kv.MutationAdd:
		t.tr.Add(k, param)
	case kv.MutationBitAnd:
		t.tr.BitAnd(k, param)
	case kv.MutationBitOr:
		t.tr.BitOr(k, param)
	case kv.MutationBitXor:
		t.tr.BitXor(k, param)
	case kv.MutationAppendIfFits:
		t.tr.AppendIfFits(k, param)
	case kv.MutationMax:
		t.tr.Max(k, param)
	case kv.MutationMin:
		t.tr.Min(k, param)
	case kv.MutationByteMin:
		t.tr.ByteMin(k, param)
	case kv.MutationByteMax:
		t.tr.ByteMax(k, param)
	case kv.MutationCompareAndClear:
		t.tr.CompareAndClear(k, param)
	default:
		t.fail(kv.ErrInvalidMutationType.WithDetail("%v", op))
	}
}

func (t *txn) Add(key []byte, delta int64) { t.tr.Add(fdb.Key(key), kv.EncodeInt64(delta)) }

// SetVersionstampedKey implements kv.Tx; kv uses FoundationDB's API 520+
// format, which API version 730 expects.
func (t *txn) SetVersionstampedKey(key, value []byte) {
	t.tr.SetVersionstampedKey(fdb.Key(key), value)
}

func (t *txn) SetVersionstampedValue(key, value []byte) {
	t.tr.SetVersionstampedValue(fdb.Key(key), value)
}

func (t *txn) AddReadConflictKey(key []byte) {
	t.fail(t.mapErr(t.tr.AddReadConflictKey(fdb.Key(key))))
}

func (t *txn) AddReadConflictRange(r kv.Range) {
	t.fail(t.mapErr(t.tr.AddReadConflictRange(keyRange(r))))
}

func (t *txn) AddWriteConflictKey(key []byte) {
	t.fail(t.mapErr(t.tr.AddWriteConflictKey(fdb.Key(key))))
}

func (t *txn) AddWriteConflictRange(r kv.Range) {
	t.fail(t.mapErr(t.tr.AddWriteConflictRange(keyRange(r))))
}

// Watch implements kv.Tx. A goroutine waits for FoundationDB's watch
// future; Cancel cancels that future, which releases the goroutine.
func (t *txn) Watch(key []byte) kv.Watch {
	if err := t.failed(); err != nil {
		w := kv.NewChanWatch(nil)
		w.Fire(err)
		return w
	}
	f := t.tr.Watch(fdb.Key(key))
	w := &watch{f: f}
	w.ChanWatch = kv.NewChanWatch(func() {
		f.Cancel()
		t.s.forget(w)
	})
	if !t.s.track(w) {
		w.abort(kv.ErrClosed)
		return w
	}
	go func() {
		// Once the watch was cancelled this is operation_cancelled, which
		// Fire ignores.
		err := f.Get()
		w.Fire(t.mapErr(err))
		t.s.forget(w)
	}()
	return w
}

type watch struct {
	*kv.ChanWatch
	f fdb.FutureNil
}

func (w *watch) abort(cause error) {
	if w.Fire(cause) {
		w.f.Cancel()
	}
}

// reader is the read side of a txn: through the fdb.Transaction itself, or
// through its fdb.Snapshot (no read conflicts).
type reader struct {
	t  *txn
	rt fdb.ReadTransaction
}

func (r reader) Get(key []byte) ([]byte, error) {
	if err := r.t.failed(); err != nil {
		return nil, err
	}
	v, err := r.rt.Get(fdb.Key(key)).Get()
	if err != nil {
		return nil, r.t.mapErr(err)
	}
	return v, nil
}

func (r reader) GetRange(rg kv.Range, opts kv.RangeOptions) ([]kv.KeyValue, error) {
	if err := r.t.failed(); err != nil {
		return nil, err
	}
	if opts.Limit < 0 {
		return nil, errNegativeLimit(opts.Limit)
	}
	kvs, err := r.rt.GetRange(keyRange(rg), rangeOptions(opts, fdb.StreamingModeWantAll)).GetSliceWithError()
	if err != nil {
		return nil, r.t.mapErr(err)
	}
	out := make([]kv.KeyValue, len(kvs))
	for i, p := range kvs {
		out[i] = kv.KeyValue{Key: p.Key, Value: p.Value}
	}
	return out, nil
}

func (r reader) Iterate(rg kv.Range, opts kv.RangeOptions) kv.RangeIterator {
	if err := r.t.failed(); err != nil {
		return &iterator{err: err}
	}
	if opts.Limit < 0 {
		return &iterator{err: errNegativeLimit(opts.Limit)}
	}
	rr := r.rt.GetRange(keyRange(rg), rangeOptions(opts, fdb.StreamingModeIterator))
	return &iterator{t: r.t, ri: rr.Iterator()}
}

func (r reader) ReadTransact(ctx context.Context, fn func(kv.ReadTx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return fn(r)
}

func (r reader) Context() context.Context { return r.t.ctx }

func (r reader) ReadVersion() (int64, error) { return r.t.ReadVersion() }

// iterator adapts fdb.RangeIterator, which fetches pages of growing size in
// StreamingModeIterator.
type iterator struct {
	t   *txn
	ri  *fdb.RangeIterator // nil once exhausted or failed
	cur kv.KeyValue
	err error
}

func (it *iterator) Next() bool {
	if it.ri == nil {
		return false
	}
	if !it.ri.Advance() {
		it.ri = nil
		return false
	}
	p, err := it.ri.Get()
	if err != nil {
		it.ri, it.err = nil, it.t.mapErr(err)
		return false
	}
	it.cur = kv.KeyValue{Key: p.Key, Value: p.Value}
	return true
}

func (it *iterator) KeyValue() kv.KeyValue { return it.cur }

func (it *iterator) Err() error { return it.err }

func keyRange(r kv.Range) fdb.KeyRange {
	return fdb.KeyRange{Begin: fdb.Key(r.Begin), End: fdb.Key(r.End)}
}

// errNegativeLimit fails a range read with a negative limit, as every
// backend does (see kv.RangeOptions): the client would take -1 as no limit
// in some streaming modes and fail with range_limits_invalid otherwise.
func errNegativeLimit(limit int) error {
	return kv.ErrRangeLimitsInvalid.WithDetail("range read limit %d is negative", limit)
}

func rangeOptions(o kv.RangeOptions, mode fdb.StreamingMode) fdb.RangeOptions {
	return fdb.RangeOptions{Limit: o.Limit, Mode: mode, Reverse: o.Reverse}
}
