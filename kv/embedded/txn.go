package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/jobstage/jobstage/kv"
)

type txState uint8

const (
	txActive txState = iota
	txCommitting
	txCommitted
	txFailed
	txCancelled
	txExpired // outlived the transaction lifetime uncommitted
)

// txn is a transaction of the embedded store. It reads from the Pebble
// snapshot of its read version merged with its own buffered writes, records
// the key ranges it read, and at commit hands everything to the committer.
// A txn may be used from several goroutines; mu serialises them.
type txn struct {
	s     *Store
	ctx   context.Context
	start time.Time
	snap  *snapRef
	rv    uint64

	mu         sync.Mutex
	state      txState
	err        error // first bad write: fails every later read and the commit
	buf        *writeBuffer
	readKeys   []string // point reads with conflicts; a key may repeat
	readRanges []kv.Range
	writeKeys  map[string]struct{}
	writeRngs  []kv.Range
	size       int
	watches    []*watchEntry
	stampF     *kv.Future[kv.Versionstamp]
	stamp      kv.Versionstamp
	// expiry ends the transaction when it outlives the transaction
	// lifetime without a commit or cancel, so that it pins neither its
	// snapshot nor its watches' reservations.
	expiry *time.Timer
	// listed: the store's open set holds the transaction (it has watches
	// not yet registered), for Close to fail them.
	listed bool
}

var _ kv.Transaction = (*txn)(nil)

// Begin implements kv.Backend: the transaction reads at the last published
// commit version.
func (s *Store) Begin(ctx context.Context) (kv.Transaction, error) {
	if err := ctx.Err(); err != nil {
		return nil, cancelledErr(ctx)
	}
	ref, err := s.acquireSnapshot()
	if err != nil {
		return nil, err
	}
	t := &txn{
		s:     s,
		ctx:   ctx,
		start: time.Now(),
		snap:  ref,
		rv:    ref.version,
		buf:   newWriteBuffer(),
	}
	t.mu.Lock()
	t.expiry = time.AfterFunc(s.opts.TransactionLifetime, t.expire)
	t.mu.Unlock()
	return t, nil
}

// expire releases what a transaction still open after the transaction
// lifetime holds: its snapshot (FoundationDB's storage servers keep no
// older versions either, and every later read fails with
// transaction_too_old) and its watches, which fail with
// transaction_too_old and give their reservations back. The transaction
// itself stays usable for what FoundationDB still allows: writes, and a
// commit, which succeeds if it read nothing (a commit with read conflicts
// fails too old at the resolver). A transaction in the middle of its
// commit is left to the committer.
func (t *txn) expire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != txActive {
		return
	}
	t.state = txExpired
	if t.snap != nil {
		t.s.releaseSnapshot(t.snap)
		t.snap = nil
	}
	t.failWatchesLocked(kv.ErrTransactionTooOld.WithDetail("transaction older than %v, its watches expired uncommitted", t.s.opts.TransactionLifetime))
	if t.listed {
		t.listed = false
		t.s.forgetOpen(t)
	}
}

// failWatchesLocked fails the transaction's pending watches with err.
//
// REQUIRES: t.mu is held.
func (t *txn) failWatchesLocked(err error) {
	for _, e := range t.watches {
		if e.w.Fire(err) {
			t.s.watches.unreserve()
		}
	}
	t.watches = nil
}

// cancelledErr reports a transaction whose context ended: it matches both
// the context's error and kv.ErrTransactionCancelled.
func cancelledErr(ctx context.Context) error {
	return &ctxError{ctx: ctx.Err()}
}

type ctxError struct{ ctx error }

func (e *ctxError) Error() string   { return "kv: transaction cancelled: " + e.ctx.Error() }
func (e *ctxError) Unwrap() []error { return []error{e.ctx, kv.ErrTransactionCancelled} }

// usable returns why the transaction cannot be used now, if it cannot.
//
// REQUIRES: t.mu is held.
func (t *txn) usable() error {
	switch t.state {
	case txCommitting:
		return kv.ErrUsedDuringCommit.WithDetail("transaction is committing")
	case txCommitted:
		return kv.ErrClientInvalidOperation.WithDetail("transaction used after commit")
	case txCancelled:
		return kv.ErrTransactionCancelled
	case txFailed:
		return kv.ErrClientInvalidOperation.WithDetail("transaction used after its commit failed")
	case txExpired:
		return kv.ErrTransactionTooOld.WithDetail("transaction older than %v", t.s.opts.TransactionLifetime)
	}
	if t.err != nil {
		return t.err
	}
	if t.ctx.Err() != nil {
		return cancelledErr(t.ctx)
	}
	if t.tooOld() {
		return kv.ErrTransactionTooOld.WithDetail("transaction older than %v", t.s.opts.TransactionLifetime)
	}
	return nil
}

// tooOld reports whether the transaction outlived its lifetime.
//
// REQUIRES: t.mu is held.
func (t *txn) tooOld() bool {
	return t.state == txExpired || time.Since(t.start) > t.s.opts.TransactionLifetime
}

// usableToWrite is usable for writes and the commit, which, as in
// FoundationDB, the lifetime does not end (only reads, and a commit that
// read, are too old).
//
// REQUIRES: t.mu is held.
func (t *txn) usableToWrite() error {
	if t.state == txExpired {
		if t.err != nil {
			return t.err
		}
		if t.ctx.Err() != nil {
			return cancelledErr(t.ctx)
		}
		return nil
	}
	if err := t.usable(); err != nil && !errors.Is(err, kv.ErrTransactionTooOld) {
		return err
	}
	return nil
}

// fail records the first bad write.
//
// REQUIRES: t.mu is held.
func (t *txn) fail(err error) {
	if t.err == nil {
		t.err = err
	}
}

// finish ends the transaction in state, releasing its snapshot and settling
// its watches and versionstamp when it did not commit.
//
// REQUIRES: t.mu is held.
func (t *txn) finish(state txState, err error) {
	if t.state != txActive && t.state != txCommitting && t.state != txExpired {
		return
	}
	t.state = state
	if state != txCommitting && t.listed {
		t.listed = false
		t.s.forgetOpen(t)
	}
	if state != txCommitting && t.expiry != nil {
		t.expiry.Stop()
	}
	if t.snap != nil {
		t.s.releaseSnapshot(t.snap)
		t.snap = nil
	}
	if state == txCommitted {
		return
	}
	t.failWatchesLocked(err)
	if t.stampF != nil {
		if state == txFailed {
			// FoundationDB: transaction_invalid_version for any commit
			// error.
			err = kv.ErrTransactionInvalidVersion.WithDetail("commit failed: %v", err)
		}
		t.stampF.Resolve(kv.Versionstamp{}, err)
	}
}

func checkKey(key []byte) error {
	if len(key) > kv.MaxKeySize {
		return kv.ErrKeyTooLarge.WithDetail("key of %d bytes exceeds %d", len(key), kv.MaxKeySize)
	}
	if len(key) > 0 && key[0] == 0xff {
		return kv.ErrKeyOutsideLegalRange.WithDetail("key %q is in the system keyspace (0xff)", truncate(key))
	}
	return nil
}

func checkValue(value []byte) error {
	if len(value) > kv.MaxValueSize {
		return kv.ErrValueTooLarge.WithDetail("value of %d bytes exceeds %d", len(value), kv.MaxValueSize)
	}
	return nil
}

// checkSystemKey fails a key in the system keyspace.
func checkSystemKey(key []byte) error {
	if len(key) > 0 && key[0] == 0xff {
		return kv.ErrKeyOutsideLegalRange.WithDetail("key %q is in the system keyspace (0xff)", truncate(key))
	}
	return nil
}

// clampRange cuts range bounds longer than any key can be to
// MaxKeySize+1 bytes. No key lies between the cut bound and the original,
// so the range holds the same keys; FoundationDB cuts the bounds of
// clears and conflict ranges the same way, and its range reads take such
// bounds as they are.
func clampRange(r kv.Range) kv.Range {
	if len(r.Begin) > kv.MaxKeySize+1 {
		r.Begin = r.Begin[:kv.MaxKeySize+1]
	}
	if len(r.End) > kv.MaxKeySize+1 {
		r.End = r.End[:kv.MaxKeySize+1]
	}
	return r
}

// checkRange validates a clamped range; a range may end at 0xff exactly.
func checkRange(r kv.Range) error {
	if bytes.Compare(r.Begin, r.End) > 0 {
		return kv.ErrInvertedRange.WithDetail("begin %q is after end %q", truncate(r.Begin), truncate(r.End))
	}
	if bytes.Compare(r.End, []byte{0xff}) > 0 {
		return kv.ErrKeyOutsideLegalRange.WithDetail("range end %q is past the user keyspace (0xff)", truncate(r.End))
	}
	return nil
}

// pebbleKey returns key for Pebble: the empty key as nil. Pebble's
// invariant checks (on in race builds) index the first byte of any non-nil
// seek key.
func pebbleKey(key []byte) []byte {
	if len(key) == 0 {
		return nil
	}
	return key
}

// errNegativeLimit fails a range read with a negative limit, on every
// backend (see kv.RangeOptions).
func errNegativeLimit(limit int) error {
	return kv.ErrRangeLimitsInvalid.WithDetail("range read limit %d is negative", limit)
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// --- reads ---

func (t *txn) Context() context.Context { return t.ctx }

func (t *txn) Get(key []byte) ([]byte, error) { return t.get(key, false) }

func (t *txn) GetRange(r kv.Range, opts kv.RangeOptions) ([]kv.KeyValue, error) {
	return t.getRange(r, opts, false)
}

func (t *txn) Iterate(r kv.Range, opts kv.RangeOptions) kv.RangeIterator {
	return newRangeIter(t, r, opts, false)
}

func (t *txn) Snapshot() kv.ReadTx { return snapshotView{t} }

// ReadVersion implements kv.Tx: the commit version of the snapshot the
// transaction reads, fixed when it began.
func (t *txn) ReadVersion() (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usable(); err != nil {
		return 0, err
	}
	return int64(t.rv), nil
}

func (t *txn) get(key []byte, snapshot bool) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usable(); err != nil {
		return nil, err
	}
	if err := checkSystemKey(key); err != nil {
		return nil, err
	}
	if len(key) > kv.MaxKeySize {
		// No key that long exists (FoundationDB answers the same, and
		// reads nothing).
		return nil, nil
	}
	e := t.buf.get(key)
	if e != nil && e.kind != opAtomic {
		switch e.kind {
		case opSet:
			return bytes.Clone(e.value), nil
		case opVSValue:
			return nil, kv.ErrAccessedUnreadable.WithDetail("key %q has a versionstamped value, unknown until commit", truncate(key))
		}
		return nil, nil // opClear
	}
	if e == nil && t.buf.isCleared(key) {
		return nil, nil
	}
	base, ok, err := t.readSnapshot(key)
	if err != nil {
		return nil, err
	}
	if !snapshot {
		t.addReadKey(key)
	}
	if e != nil {
		v, exists := e.resolve(base, ok)
		if !exists {
			return nil, nil
		}
		return bytes.Clone(v), nil
	}
	return base, nil
}

// readSnapshot reads key at the read version.
//
// REQUIRES: t.mu is held.
func (t *txn) readSnapshot(key []byte) ([]byte, bool, error) {
	t.s.closeMu.RLock()
	defer t.s.closeMu.RUnlock()
	if t.s.closed {
		return nil, false, errClosed
	}
	v, closer, err := t.snap.snap.Get(pebbleKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, kv.ErrOperationFailed.WithDetail("read: %v", err)
	}
	out := bytes.Clone(v)
	closer.Close()
	return out, true, nil
}

func (t *txn) getRange(r kv.Range, opts kv.RangeOptions, snapshot bool) ([]kv.KeyValue, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usable(); err != nil {
		return nil, err
	}
	if opts.Limit < 0 {
		return nil, errNegativeLimit(opts.Limit)
	}
	if err := checkRange(r); err != nil {
		return nil, err
	}
	r = clampRange(r)
	out, _, err := t.readRangeLocked(r, opts.Limit, opts.Reverse, snapshot)
	return out, err
}

// readRangeLocked merges the snapshot's keys in r with the buffered writes
// and returns at most limit key-values (0: all). Unless snapshot, it adds
// the read conflict range that covers what was read: all of r, or, when the
// limit cut the read short, r up to the last key returned (FoundationDB
// does the same, so a limited read does not conflict with writes beyond
// what it saw).
//
// REQUIRES: t.mu is held.
func (t *txn) readRangeLocked(r kv.Range, limit int, reverse, snapshot bool) (out []kv.KeyValue, hitLimit bool, err error) {
	if r.Empty() {
		return nil, false, nil
	}
	ents := t.buf.rangeEntries(r, reverse)
	t.s.closeMu.RLock()
	defer t.s.closeMu.RUnlock()
	if t.s.closed {
		return nil, false, errClosed
	}
	it, err := t.snap.snap.NewIter(&pebble.IterOptions{LowerBound: pebbleKey(r.Begin), UpperBound: r.End})
	if err != nil {
		return nil, false, kv.ErrOperationFailed.WithDetail("read range: %v", err)
	}
	defer it.Close()
	dbOK := t.seekRangeLocked(it, r, reverse)
	out, err = t.mergeRangeLocked(it, dbOK, ents, limit, reverse)
	if err != nil {
		return nil, false, err
	}
	if err := it.Error(); err != nil {
		return nil, false, kv.ErrOperationFailed.WithDetail("read range: %v", err)
	}
	hitLimit = limit > 0 && len(out) >= limit
	if !snapshot {
		read := r
		if hitLimit {
			last := out[len(out)-1].Key
			if reverse {
				read = kv.Range{Begin: last, End: r.End}
			} else {
				read = kv.Range{Begin: r.Begin, End: kv.KeyAfter(last)}
			}
		}
		t.addReadRangeLocked(read, ents, reverse)
	}
	return out, hitLimit, nil
}

// seekRangeLocked moves it, a snapshot iterator bounded by r, to the first
// key of a read of r in iteration order and reports whether there is one.
// A forward read starts past the tombstones the skip cache knows of at
// r.Begin, and proposes to the cache the first live key it found, so that
// the next scan from r.Begin may skip to it.
//
// REQUIRES: t.mu is held, and t.s.closeMu for reading.
func (t *txn) seekRangeLocked(it *pebble.Iterator, r kv.Range, reverse bool) bool {
	if reverse {
		return it.Last()
	}
	var dbOK bool
	var cached []byte
	if start, ok := t.s.skip.seek(r.Begin, t.rv); ok {
		// No live key lies between r.Begin and start at this read
		// version: seek past the tombstones there (see skipCache).
		cached = start
		dbOK = it.SeekGE(start)
	} else {
		dbOK = it.First()
	}
	// The first live key of the snapshot in r (or r.End: none) is what
	// the next scan from r.Begin may skip to.
	first := r.End
	if dbOK {
		first = it.Key()
	}
	if cached == nil || bytes.Compare(first, cached) > 0 {
		t.s.skip.propose(r.Begin, first, t.rv)
	}
	return dbOK
}

// mergeRangeLocked reads on from it, positioned by seekRangeLocked (dbOK:
// on a key), merging the snapshot's keys with the buffered entries ents of
// the same range in iteration order, and returns at most limit key-values
// (0: all). A buffered entry shadows the snapshot's key it shares, which
// is the base of its atomic operations; keys under a buffered clear of a
// range are skipped. A versionstamped value cannot be read before commit:
// meeting one fails the read with accessed_unreadable. The caller checks
// it.Error.
//
// REQUIRES: t.mu is held, and t.s.closeMu for reading.
func (t *txn) mergeRangeLocked(it *pebble.Iterator, dbOK bool, ents []*bufEntry, limit int, reverse bool) (out []kv.KeyValue, err error) {
	advance := func() bool {
		if reverse {
			return it.Prev()
		}
		return it.Next()
	}
	// first reports whether key a comes before key b in iteration order.
	first := func(a []byte, b string) bool {
		c := bytes.Compare(a, []byte(b))
		if reverse {
			return c > 0
		}
		return c < 0
	}
	bi := 0
	for limit <= 0 || len(out) < limit {
		haveBuf := bi < len(ents)
		if !dbOK && !haveBuf {
			break
		}
		if haveBuf && (!dbOK || !first(it.Key(), ents[bi].key)) {
			e := ents[bi]
			bi++
			var base []byte
			var baseOK bool
			if dbOK && string(it.Key()) == e.key {
				if e.kind == opAtomic {
					// The iterator's value is valid only until it moves.
					v, verr := it.ValueAndErr()
					if verr != nil {
						return nil, kv.ErrOperationFailed.WithDetail("read range: %v", verr)
					}
					base, baseOK = bytes.Clone(v), true
				}
				dbOK = advance()
			}
			if e.kind == opVSValue {
				return nil, kv.ErrAccessedUnreadable.WithDetail("key %q has a versionstamped value, unknown until commit", truncate([]byte(e.key)))
			}
			if v, ok := e.resolve(base, baseOK); ok {
				out = append(out, kv.KeyValue{Key: []byte(e.key), Value: bytes.Clone(v)})
			}
			continue
		}
		if c, ok := t.buf.clearedRangeOf(it.Key()); ok {
			if reverse {
				dbOK = it.SeekLT(pebbleKey(c.Begin))
			} else {
				dbOK = it.SeekGE(c.End)
			}
			continue
		}
		v, verr := it.ValueAndErr()
		if verr != nil {
			return nil, kv.ErrOperationFailed.WithDetail("read range: %v", verr)
		}
		out = append(out, kv.KeyValue{Key: bytes.Clone(it.Key()), Value: bytes.Clone(v)})
		dbOK = advance()
	}
	return out, nil
}

// addReadRangeLocked adds the read conflict ranges of a range read over
// read: the parts of it whose contents came from the snapshot. Keys the
// transaction set or cleared, and ranges it cleared, are known without
// the database and add none; keys under an atomic operation depend on the
// database and do (ReadYourWrites.actor.cpp, updateConflictMap: only
// unmodified ranges and dependent operations make read conflicts). ents
// are the buffer's entries in a range that holds read, in iteration order.
//
// REQUIRES: t.mu is held.
func (t *txn) addReadRangeLocked(read kv.Range, ents []*bufEntry, reverse bool) {
	if read.Empty() {
		return
	}
	cleared := t.buf.cleared
	if len(cleared) == 0 && len(ents) == 0 {
		t.addReadRangeCopy(read)
		return
	}
	// Known parts, in key order: the cleared ranges and the independent
	// entries' single keys. An entry may lie inside a cleared range (set
	// after the clear).
	ci := sort.Search(len(cleared), func(i int) bool { return bytes.Compare(cleared[i].End, read.Begin) > 0 })
	ei, step := 0, 1
	if reverse {
		ei, step = len(ents)-1, -1
	}
	cur := read.Begin
	for {
		for ei >= 0 && ei < len(ents) && (ents[ei].kind == opAtomic || ents[ei].kind == opVSValue ||
			ents[ei].key < string(read.Begin)) {
			ei += step
		}
		haveC := ci < len(cleared) && bytes.Compare(cleared[ci].Begin, read.End) < 0
		haveE := ei >= 0 && ei < len(ents) && ents[ei].key < string(read.End)
		if !haveC && !haveE {
			break
		}
		var known kv.Range
		if haveC && (!haveE || bytes.Compare(cleared[ci].Begin, []byte(ents[ei].key)) <= 0) {
			known = cleared[ci]
			ci++
		} else {
			k := []byte(ents[ei].key)
			known = kv.Range{Begin: k, End: kv.KeyAfter(k)}
			ei += step
		}
		if bytes.Compare(known.Begin, cur) > 0 {
			t.addReadRangeCopy(kv.Range{Begin: cur, End: known.Begin})
		}
		if bytes.Compare(known.End, cur) > 0 {
			cur = known.End
		}
		if bytes.Compare(cur, read.End) >= 0 {
			return
		}
	}
	t.addReadRangeCopy(kv.Range{Begin: cur, End: read.End})
}

// addReadRangeCopy adds a read conflict range the transaction owns.
//
// REQUIRES: t.mu is held.
func (t *txn) addReadRangeCopy(r kv.Range) {
	t.readRanges = append(t.readRanges, kv.Range{Begin: bytes.Clone(r.Begin), End: bytes.Clone(r.End)})
	t.size += len(r.Begin) + len(r.End)
}

func (t *txn) ReadTransact(_ context.Context, fn func(kv.ReadTx) error) error { return fn(t) }

func (t *txn) Transact(_ context.Context, fn func(kv.Tx) error) error { return fn(t) }

// snapshotView is a txn whose reads add no conflict ranges.
type snapshotView struct{ t *txn }

func (v snapshotView) Get(key []byte) ([]byte, error) { return v.t.get(key, true) }
func (v snapshotView) GetRange(r kv.Range, opts kv.RangeOptions) ([]kv.KeyValue, error) {
	return v.t.getRange(r, opts, true)
}
func (v snapshotView) Iterate(r kv.Range, opts kv.RangeOptions) kv.RangeIterator {
	return newRangeIter(v.t, r, opts, true)
}
func (v snapshotView) ReadTransact(_ context.Context, fn func(kv.ReadTx) error) error {
	return fn(v)
}
func (v snapshotView) Context() context.Context { return v.t.ctx }

func (v snapshotView) ReadVersion() (int64, error) { return v.t.ReadVersion() }

// rangeIter reads a range in pages that grow from 256 to 4096 key-values.
type rangeIter struct {
	t         *txn
	r         kv.Range
	reverse   bool
	snapshot  bool
	remaining int // 0: unlimited
	limited   bool
	pageSize  int
	page      []kv.KeyValue
	idx       int
	done      bool
	err       error
	cur       kv.KeyValue
}

func newRangeIter(t *txn, r kv.Range, opts kv.RangeOptions, snapshot bool) *rangeIter {
	it := &rangeIter{t: t, r: clampRange(r), reverse: opts.Reverse, snapshot: snapshot, remaining: opts.Limit, limited: opts.Limit > 0, pageSize: 256}
	if opts.Limit < 0 {
		it.err = errNegativeLimit(opts.Limit)
	} else if err := checkRange(r); err != nil {
		it.err = err // before the clamp, which could hide an inverted range
	}
	return it
}

func (it *rangeIter) Next() bool {
	for it.idx >= len(it.page) {
		if it.done || it.err != nil {
			return false
		}
		it.fetch()
	}
	it.cur = it.page[it.idx]
	it.idx++
	return true
}

func (it *rangeIter) fetch() {
	n := it.pageSize
	if it.pageSize < 4096 {
		it.pageSize *= 2
	}
	if it.limited && it.remaining < n {
		n = it.remaining
	}
	t := it.t
	t.mu.Lock()
	err := t.usable()
	if err == nil {
		err = checkRange(it.r) // clamped by newRangeIter
	}
	var page []kv.KeyValue
	var hit bool
	if err == nil {
		page, hit, err = t.readRangeLocked(it.r, n, it.reverse, it.snapshot)
	}
	t.mu.Unlock()
	if err != nil {
		it.err = err
		return
	}
	it.page, it.idx = page, 0
	if it.limited {
		it.remaining -= len(page)
	}
	if !hit || (it.limited && it.remaining <= 0) {
		it.done = true
		return
	}
	last := page[len(page)-1].Key
	if it.reverse {
		it.r.End = last
	} else {
		it.r.Begin = kv.KeyAfter(last)
	}
}

func (it *rangeIter) KeyValue() kv.KeyValue { return it.cur }
func (it *rangeIter) Err() error            { return it.err }

// --- writes ---

// write is the frame of every write method, explicit conflict ranges
// included: under t.mu it runs apply, unless the transaction takes no
// more writes or bad (the error of the write's arguments, which need no
// lock to check) is set. Then it records that error as the transaction's,
// so that a lost write is never silent: later reads and the commit fail
// with it. The transaction's own error comes before bad.
func (t *txn) write(bad error, apply func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usableToWrite(); err != nil {
		t.fail(err)
		return
	}
	if bad != nil {
		t.fail(bad)
		return
	}
	apply()
}

func (t *txn) Set(key, value []byte) {
	t.write(firstErr(key, value), func() {
		t.buf.put(&bufEntry{key: string(key), kind: opSet, value: bytes.Clone(value)})
		t.size += len(key) + len(value)
		t.triggerLocked(func(e *watchEntry) bool {
			return e.key == string(key) && (e.pending || changed(e.seen, e.exists, value, true))
		})
	})
}

// addInPlace adds param to sum, little-endian, modulo their common width
// (FoundationDB's add of two values of one width).
func addInPlace(sum, param []byte) {
	var carry uint16
	for i := range sum {
		x := uint16(sum[i]) + uint16(param[i]) + carry
		sum[i] = byte(x)
		carry = x >> 8
	}
}

// firstErr returns the key's error, else the value's.
func firstErr(key, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return checkValue(value)
}

func (t *txn) Clear(key []byte) {
	t.write(checkSystemKey(key), func() {
		if len(key) > kv.MaxKeySize {
			return // no such key exists; FoundationDB ignores the clear too
		}
		t.buf.put(&bufEntry{key: string(key), kind: opClear})
		t.size += len(key)
		t.triggerLocked(func(e *watchEntry) bool { return e.key == string(key) && (e.pending || e.exists) })
	})
}

func (t *txn) ClearRange(r kv.Range) {
	t.write(checkRange(r), func() {
		r := clampRange(r)
		if r.Empty() {
			return
		}
		t.buf.clearRange(kv.Range{Begin: bytes.Clone(r.Begin), End: bytes.Clone(r.End)})
		t.size += len(r.Begin) + len(r.End)
		t.triggerLocked(func(e *watchEntry) bool { return r.Contains([]byte(e.key)) && (e.pending || e.exists) })
	})
}

func (t *txn) Add(key []byte, delta int64) {
	var param [8]byte
	binary.LittleEndian.PutUint64(param[:], uint64(delta))
	t.Atomic(kv.MutationAdd, key, param[:])
}

func (t *txn) Atomic(op kv.MutationType, key, param []byte) {
	bad := firstErr(key, param)
	if !op.Valid() {
		bad = kv.ErrInvalidMutationType.WithDetail("%v", op)
	}
	t.write(bad, func() { t.atomicLocked(op, key, param) })
}

// atomicLocked buffers an atomic operation whose arguments are valid:
// folded into the key's known value when the transaction set or cleared
// it, else chained for the commit to apply.
//
// REQUIRES: t.mu is held.
func (t *txn) atomicLocked(op kv.MutationType, key, param []byte) {
	t.size += len(key) + len(param)
	// An atomic operation fires the transaction's watches on the key,
	// whatever the result (FoundationDB's RYW does the same).
	defer t.triggerLocked(func(e *watchEntry) bool { return e.key == string(key) && t.err == nil })
	e := t.buf.get(key)
	switch {
	case e == nil && !t.buf.isCleared(key):
		// The committed value is not known until commit.
		t.buf.put(&bufEntry{key: string(key), kind: opAtomic, chain: []atomicOp{{op, bytes.Clone(param)}}})
	case e == nil || e.kind == opSet || e.kind == opClear:
		var cur []byte
		var ok bool
		if e != nil {
			cur, ok = e.resolve(nil, false)
		}
		v, exists := kv.ApplyMutation(op, cur, ok, bytes.Clone(param))
		if exists {
			t.buf.put(&bufEntry{key: string(key), kind: opSet, value: v})
		} else {
			t.buf.put(&bufEntry{key: string(key), kind: opClear})
		}
	case e.kind == opAtomic:
		// Adds of one width in a row fold into one: (v + a) + b is
		// v + (a + b) modulo the width. A transaction that counts each of
		// many jobs it moves (the jobs layer does) then leaves one add per
		// counter, not one per job, for the commit to apply.
		if last := &e.chain[len(e.chain)-1]; op == kv.MutationAdd && last.op == kv.MutationAdd && len(last.param) == len(param) {
			addInPlace(last.param, param)
			return
		}
		e.chain = append(e.chain, atomicOp{op, bytes.Clone(param)})
	default: // opVSValue
		t.fail(kv.ErrClientInvalidOperation.WithDetail("atomic %v on key %q whose versionstamped value is unknown until commit", op, truncate(key)))
	}
}

// placeholderOffset validates the 4-byte little-endian offset suffix of a
// versionstamped key or value and returns the offset.
func placeholderOffset(b []byte, what string) (int, error) {
	if len(b) < 4 {
		return 0, kv.ErrClientInvalidOperation.WithDetail("versionstamped %s of %d bytes has no 4-byte offset", what, len(b))
	}
	off := int(binary.LittleEndian.Uint32(b[len(b)-4:]))
	if off+10 > len(b)-4 {
		return 0, kv.ErrClientInvalidOperation.WithDetail("versionstamp offset %d does not leave 10 bytes in a %s of %d bytes", off, what, len(b)-4)
	}
	return off, nil
}

func (t *txn) SetVersionstampedKey(key, value []byte) {
	off, bad := placeholderOffset(key, "key")
	if bad == nil {
		bad = firstErr(key[:len(key)-4], value)
		if off == 0 && bad != nil && errors.Is(bad, kv.ErrKeyOutsideLegalRange) {
			bad = nil // the first byte will be the stamp's
		}
	}
	t.write(bad, func() {
		t.buf.vsKeys = append(t.buf.vsKeys, kv.KeyValue{Key: bytes.Clone(key), Value: bytes.Clone(value)})
		t.size += len(key) + len(value)
		// Any key the versionstamp can make.
		before, after := key[:off], key[off+10:len(key)-4]
		t.triggerLocked(func(e *watchEntry) bool {
			return len(e.key) == len(key)-4 && strings.HasPrefix(e.key, string(before)) && strings.HasSuffix(e.key, string(after))
		})
	})
}

func (t *txn) SetVersionstampedValue(key, value []byte) {
	_, bad := placeholderOffset(value, "value")
	if bad == nil {
		bad = firstErr(key, value[:len(value)-4])
	}
	t.write(bad, func() {
		t.buf.put(&bufEntry{key: string(key), kind: opVSValue, value: bytes.Clone(value)})
		t.size += len(key) + len(value)
		t.triggerLocked(func(e *watchEntry) bool { return e.key == string(key) })
	})
}

// triggerLocked fires, at once, the transaction's pending watches that a
// write it just made changes (fired reports which): FoundationDB's
// ReadYourWrites fires a watch on its own transaction's write at the write
// (triggerWatches), not at commit, and such a watch stays fired whatever
// becomes of the transaction.
//
// REQUIRES: t.mu is held.
func (t *txn) triggerLocked(fired func(e *watchEntry) bool) {
	if len(t.watches) == 0 {
		return
	}
	kept := t.watches[:0]
	for _, e := range t.watches {
		if fired(e) {
			if e.w.Fire(nil) {
				t.s.watches.unreserve()
			}
			continue
		}
		kept = append(kept, e)
	}
	clear(t.watches[len(kept):])
	t.watches = kept
}

// stampInto returns b without its offset suffix and with the versionstamp
// written at the offset.
func stampInto(b []byte, stamp kv.Versionstamp) []byte {
	off := int(binary.LittleEndian.Uint32(b[len(b)-4:]))
	out := bytes.Clone(b[:len(b)-4])
	copy(out[off:off+10], stamp[:])
	return out
}

// --- conflict ranges ---

func (t *txn) AddReadConflictKey(key []byte) {
	t.write(checkSystemKey(key), func() {
		if len(key) > kv.MaxKeySize {
			return // the key's range, cut as clampRange cuts, is empty
		}
		t.addReadKey(key)
	})
}

// addReadKey adds a point read conflict.
//
// REQUIRES: t.mu is held.
func (t *txn) addReadKey(key []byte) {
	t.readKeys = append(t.readKeys, string(key))
	t.size += len(key)
}

func (t *txn) AddReadConflictRange(r kv.Range) {
	t.write(checkRange(r), func() {
		if r := clampRange(r); !r.Empty() {
			t.readRanges = append(t.readRanges, kv.Range{Begin: bytes.Clone(r.Begin), End: bytes.Clone(r.End)})
			t.size += len(r.Begin) + len(r.End)
		}
	})
}

func (t *txn) AddWriteConflictKey(key []byte) {
	t.write(checkSystemKey(key), func() {
		if len(key) > kv.MaxKeySize {
			return // the key's range, cut as clampRange cuts, is empty
		}
		if t.writeKeys == nil {
			t.writeKeys = make(map[string]struct{})
		}
		t.writeKeys[string(key)] = struct{}{}
		t.size += len(key)
	})
}

func (t *txn) AddWriteConflictRange(r kv.Range) {
	t.write(checkRange(r), func() {
		if r := clampRange(r); !r.Empty() {
			t.writeRngs = append(t.writeRngs, kv.Range{Begin: bytes.Clone(r.Begin), End: bytes.Clone(r.End)})
			t.size += len(r.Begin) + len(r.End)
		}
	})
}

// --- watches and versionstamps ---

func (t *txn) Watch(key []byte) kv.Watch {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.usable()
	if err == nil {
		err = checkKey(key)
	}
	e := &watchEntry{key: string(key)}
	if err == nil {
		// The watch starts from the value this transaction sees now: its own
		// earlier write, else the value at the read version. A write the
		// transaction makes after this point is a change the watch reports
		// once the transaction commits (FoundationDB's rule).
		var fromDB bool
		e.seen, e.exists, e.pending, fromDB, err = t.viewLocked(key)
		if err == nil && fromDB {
			// A watch reads its key as Get does, with a read conflict
			// where the value came from the database.
			t.addReadKey(key)
		}
	}
	if err == nil {
		err = t.s.watches.reserve()
	}
	if err != nil {
		w := kv.NewChanWatch(nil)
		w.Fire(err)
		return w
	}
	e.w = kv.NewChanWatch(func() { t.s.watches.remove(e) })
	if !t.listed {
		t.listed = true
		t.s.rememberOpen(t)
	}
	t.watches = append(t.watches, e)
	return e.w
}

// viewLocked returns the value of key as the transaction sees it, without
// a read conflict; unknown is true when that value is a versionstamped one
// that only the commit will know, fromDB when it depends on the database
// (no write of the transaction decides it).
//
// REQUIRES: t.mu is held.
func (t *txn) viewLocked(key []byte) (value []byte, exists, unknown, fromDB bool, err error) {
	e := t.buf.get(key)
	if e != nil && e.kind == opVSValue {
		return nil, false, true, false, nil
	}
	if e != nil && e.kind != opAtomic {
		v, ok := e.resolve(nil, false)
		return v, ok, false, false, nil
	}
	if e == nil && t.buf.isCleared(key) {
		return nil, false, false, false, nil
	}
	base, ok, err := t.readSnapshot(key)
	if err != nil || e == nil {
		return base, ok, false, true, err
	}
	v, ok := e.resolve(base, ok)
	return v, ok, false, true, nil
}

func failedStamp(err error) *kv.Future[kv.Versionstamp] {
	f := kv.NewFuture[kv.Versionstamp]()
	f.Resolve(kv.Versionstamp{}, err)
	return f
}

func (t *txn) Versionstamp() *kv.Future[kv.Versionstamp] {
	t.mu.Lock()
	defer t.mu.Unlock()
	// As in FoundationDB, the future must be taken before the commit
	// starts; taken later it fails with used_during_commit, also after a
	// successful commit.
	switch t.state {
	case txCommitting, txCommitted, txFailed:
		return failedStamp(kv.ErrUsedDuringCommit.WithDetail("versionstamp asked for after the commit started"))
	case txCancelled:
		return failedStamp(kv.ErrTransactionCancelled)
	}
	if t.stampF == nil {
		t.stampF = kv.NewFuture[kv.Versionstamp]()
	}
	return t.stampF
}

// --- commit ---

func (t *txn) Cancel() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state == txActive || t.state == txExpired {
		t.finish(txCancelled, kv.ErrTransactionCancelled)
	}
}

func (t *txn) Commit() error {
	t.mu.Lock()
	if err := t.usableToWrite(); err != nil {
		if t.state == txActive || t.state == txExpired {
			t.finish(txFailed, err)
		}
		t.mu.Unlock()
		return err
	}
	if t.buf.empty() && len(t.writeKeys) == 0 && len(t.writeRngs) == 0 {
		// Nothing to resolve or write: the commit succeeds at once, cannot
		// conflict and has no versionstamp, and its watches start from
		// the values the transaction read at its read version, as in
		// FoundationDB.
		watches := t.watches
		t.watches = nil
		t.finish(txCommitted, nil)
		if t.stampF != nil {
			t.stampF.Resolve(kv.Versionstamp{}, kv.ErrNoCommitVersion)
		}
		t.mu.Unlock()
		if len(watches) > 0 {
			t.s.registerWatches(watches)
		}
		return nil
	}
	if t.size > kv.MaxTransactionSize {
		err := kv.ErrTransactionTooLarge.WithDetail("transaction of %d bytes exceeds %d", t.size, kv.MaxTransactionSize)
		t.finish(txFailed, err)
		t.mu.Unlock()
		return err
	}
	if t.tooOld() && (len(t.readKeys) > 0 || len(t.readRanges) > 0) {
		// The resolver no longer knows what was written since its reads.
		err := kv.ErrTransactionTooOld.WithDetail("transaction older than %v", t.s.opts.TransactionLifetime)
		t.finish(txFailed, err)
		t.mu.Unlock()
		return err
	}
	req := &commitReq{
		start:      t.start,
		rv:         t.rv,
		readKeys:   t.readKeys,
		readRanges: t.readRanges,
		writeKeys:  t.writeKeys,
		writeRngs:  t.writeRngs,
		buf:        t.buf,
		watches:    t.watches,
		done:       make(chan commitResult, 1),
	}
	t.state = txCommitting
	t.mu.Unlock()

	res := t.s.submit(req)

	t.mu.Lock()
	defer t.mu.Unlock()
	t.state = txActive // let finish move it on
	if res.err != nil {
		t.finish(txFailed, res.err)
		return res.err
	}
	t.stamp = res.stamp
	t.watches = nil // registered by the committer
	t.finish(txCommitted, nil)
	if t.stampF != nil {
		t.stampF.Resolve(res.stamp, nil)
	}
	return nil
}

func (t *txn) String() string { return fmt.Sprintf("txn@%d", t.rv) }
