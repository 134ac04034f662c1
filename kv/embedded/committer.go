package embedded

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"

	"github.com/jobstage/jobstage/kv"
)

// commitReq is a transaction asking to commit.
type commitReq struct {
	start      time.Time
	rv         uint64
	readKeys   []string // may repeat a key
	readRanges []kv.Range
	writeKeys  map[string]struct{}
	writeRngs  []kv.Range
	buf        *writeBuffer
	watches    []*watchEntry
	done       chan commitResult
}

type commitResult struct {
	stamp kv.Versionstamp
	err   error
}

// errClosed fails work on a closed store: transaction_cancelled (1025), as
// FoundationDB reports a cancelled transaction, and also kv.ErrClosed, so
// callers can tell a closed store from a cancelled transaction.
var errClosed = fmt.Errorf("%w: %w", kv.ErrClosed, kv.ErrTransactionCancelled.WithDetail("store is closed"))

// submit hands req to the committer and waits for its answer.
func (s *Store) submit(req *commitReq) commitResult {
	select {
	case s.commitCh <- req:
	case <-s.stop:
		return commitResult{err: errClosed}
	}
	select {
	case res := <-req.done:
		return res
	case <-s.done:
		// The committer answers every request it took before it exits.
		select {
		case res := <-req.done:
			return res
		default:
			return commitResult{err: errClosed}
		}
	}
}

// commitLoop is the committer: FoundationDB's commit proxy and resolver in
// one goroutine. It takes every transaction waiting to commit (up to
// MaxBatch), resolves them in arrival order against recent writes and
// against each other, gives the batch one commit version and each survivor
// its order in the batch (together, the versionstamp), and hands the
// survivors and the new version to Pebble as one batch. It does not wait
// for the fsync: the batch goes on to syncLoop, which waits for it, then
// publishes the version to new readers, fires watches and answers. So the
// next batch is resolved and written while this one syncs, and Pebble
// syncs every batch that reached its log during one fsync with the next
// one: a durable commit costs a share of an fsync, not a whole one.
//
// A batch is visible in Pebble before it is durable, but no transaction
// sees it early: readers read Pebble snapshots, and the snapshot of a
// version is taken right after that version's batch was applied (the
// committer is Pebble's only writer, so it shows exactly that version) and
// handed to readers only once the batch is durable.
func (s *Store) commitLoop() {
	defer func() {
		close(s.syncCh)
		<-s.synced
		close(s.done)
	}()
	batch := make([]*commitReq, 0, s.opts.MaxBatch)
	for {
		select {
		case req := <-s.commitCh:
			batch = append(batch[:0:0], req)
		case <-s.stop:
			for {
				select {
				case req := <-s.commitCh:
					req.done <- commitResult{err: errClosed}
				default:
					return
				}
			}
		}
	gather:
		for len(batch) < s.opts.MaxBatch {
			select {
			case req := <-s.commitCh:
				batch = append(batch, req)
			default:
				break gather
			}
		}
		s.commitBatch(batch)
	}
}

// syncBatch is a batch written to Pebble, waiting for its fsync.
type syncBatch struct {
	version  uint64
	pb       *pebble.Batch // nil: nothing was written
	snap     *pebble.Snapshot
	reqs     []*commitReq
	results  []commitResult
	ov       *overlay
	accepted []*commitReq
	// watchVals[i][j] is the value, right after this batch, of the key of
	// accepted[i].watches[j].
	watchVals [][]ovVal
}

// commitBatch resolves a batch and writes it to Pebble.
func (s *Store) commitBatch(batch []*commitReq) {
	now := time.Now()
	s.res.prune(s.oldestLiveVersion(), now.Add(-s.opts.TransactionLifetime))
	s.skip.admit(s.res)

	results := make([]commitResult, len(batch))
	if err := s.brokenErr(); err != nil {
		for i := range batch {
			results[i].err = err
		}
		s.answer(batch, results)
		return
	}
	version := s.nextVersion
	pb := s.db.NewBatch()
	ov := s.newOverlay()
	rec := batchRecord{version: version, at: now}
	accepted, err := s.resolveBatch(batch, results, pb, ov, &rec, now)
	if err != nil {
		// Only a broken Pebble batch or read fails here, and the batch
		// may hold part of this transaction: write nothing of the round.
		pb.Close()
		s.failBatch(batch, results, err)
		return
	}
	if len(accepted) == 0 {
		pb.Close()
		ov.release()
		s.answer(batch, results)
		return
	}
	s.res.batches = append(s.res.batches, rec)
	var vb [8]byte
	binary.BigEndian.PutUint64(vb[:], version)
	_ = pb.Set(versionKey, vb[:], nil)
	if s.opts.NoSync {
		err = s.db.Apply(pb, pebble.NoSync)
	} else {
		err = s.db.ApplyNoSyncWait(pb, pebble.Sync)
	}
	if err != nil {
		pb.Close()
		s.failBatch(batch, results, kv.ErrCommitUnknownResult.WithDetail("write to the data directory failed: %v", err))
		return
	}
	s.nextVersion++
	sb := &syncBatch{
		version:  version,
		pb:       pb,
		snap:     s.db.NewSnapshot(),
		reqs:     batch,
		results:  results,
		ov:       ov,
		accepted: accepted,
	}
	// Watches registered by this batch compare against the values right
	// after it, read now before the next batch lands.
	sb.watchVals, err = watchValues(ov, accepted)
	if err != nil {
		s.markBroken(err)
	}
	s.syncCh <- sb
}

// resolveBatch resolves the batch's transactions in arrival order and
// applies each survivor's writes to pb and ov under its versionstamp: the
// batch's version (rec.version) and the survivor's order in the batch. A
// refused transaction, too old or in conflict, gets its error in results,
// a survivor its versionstamp; a survivor's writes go into rec and the
// resolver at once, so that they conflict with the batch's later
// transactions, and its pending watches read their keys' current values.
// It returns the survivors. An error is a Pebble batch or read that
// failed, after which pb may hold part of a transaction.
func (s *Store) resolveBatch(batch []*commitReq, results []commitResult, pb *pebble.Batch, ov *overlay, rec *batchRecord, now time.Time) ([]*commitReq, error) {
	version := rec.version
	order := 0
	var accepted []*commitReq
	for i, req := range batch {
		reads := len(req.readKeys) > 0 || len(req.readRanges) > 0
		if reads && (req.rv < s.res.prunedThrough || now.Sub(req.start) > s.opts.TransactionLifetime) {
			// Only a transaction that read can be too old: the resolver
			// checks its reads (a blind write commits whenever it comes,
			// as on FoundationDB).
			results[i].err = kv.ErrTransactionTooOld.WithDetail("read version %d is too old to resolve", req.rv)
			continue
		}
		if s.res.conflicts(req.rv, req.readKeys, req.readRanges) {
			results[i].err = kv.ErrNotCommitted
			continue
		}
		var stamp kv.Versionstamp
		binary.BigEndian.PutUint64(stamp[:8], version)
		binary.BigEndian.PutUint16(stamp[8:], uint16(order))
		order++
		keys, ranges, err := ov.apply(pb, req, stamp, s.keysScratch[:0])
		s.keysScratch = keys
		if err == nil {
			for _, e := range req.watches {
				if e.pending {
					if e.seen, e.exists, err = ov.get([]byte(e.key)); err != nil {
						break
					}
				}
			}
		}
		if err != nil {
			return nil, err
		}
		// The transaction's writes now conflict with every later reader,
		// including later transactions of this batch, and void the skip
		// entries they fall into before any reader can see them.
		s.res.record(version, keys, ranges, rec)
		s.liveScratch = ov.liveKeys(keys, s.liveScratch[:0])
		s.skip.invalidate(s.liveScratch, ranges)
		results[i].stamp = stamp
		accepted = append(accepted, req)
	}
	return accepted, nil
}

// watchValues reads from ov, right after a batch, the value of the key of
// each watch of the accepted transactions: watchVals[i][j] is that of
// accepted[i].watches[j]. A failed read leaves that value absent and its
// error (the last, if several) is returned, with all the values.
func watchValues(ov *overlay, accepted []*commitReq) ([][]ovVal, error) {
	var (
		watchVals [][]ovVal
		err       error
	)
	for _, req := range accepted {
		vals := make([]ovVal, len(req.watches))
		for j, e := range req.watches {
			v, ok, gerr := ov.get([]byte(e.key))
			if gerr != nil {
				err = gerr
			}
			vals[j] = ovVal{value: v, exists: ok}
		}
		watchVals = append(watchVals, vals)
	}
	return watchVals, err
}

// syncLoop waits for each written batch to be durable, in version order,
// then publishes it.
func (s *Store) syncLoop() {
	defer close(s.synced)
	for sb := range s.syncCh {
		var err error
		if !s.opts.NoSync {
			err = sb.pb.SyncWait()
		}
		sb.pb.Close()
		if err == nil {
			err = s.brokenErr()
		}
		if err != nil {
			sb.snap.Close()
			s.failBatch(sb.reqs, sb.results, kv.ErrCommitUnknownResult.WithDetail("sync of the data directory failed: %v", err))
			continue
		}
		// Publishing a version and firing the watches it changes are one
		// step for registerWatches, which registers in between.
		s.notifyMu.Lock()
		s.mu.Lock()
		s.mu.version = sb.version
		s.mu.current = &snapRef{version: sb.version, snap: sb.snap}
		s.mu.live = append(s.mu.live, s.mu.current)
		s.collectSnapshotsLocked()
		s.mu.Unlock()
		s.fireWatches(sb)
		s.notifyMu.Unlock()
		sb.ov.release()
		s.answer(sb.reqs, sb.results)
	}
}

// failBatch answers every transaction of the batch that had not failed
// already with err, and stops the store: after a failed write Pebble's
// state is unknown, so nothing may build on it.
func (s *Store) failBatch(batch []*commitReq, results []commitResult, err error) {
	s.markBroken(err)
	for i := range results {
		if results[i].err == nil {
			results[i].err = err
		}
	}
	s.answer(batch, results)
}

func (s *Store) markBroken(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.broken == nil {
		s.mu.broken = kv.ErrOperationFailed.WithDetail("store stopped after a failed write: %v", err)
	}
}

func (s *Store) brokenErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.broken
}

func (s *Store) answer(batch []*commitReq, results []commitResult) {
	for i, req := range batch {
		req.done <- results[i]
	}
}

// fireWatches fires registered watches on the keys a batch changed, then
// registers the watches of the transactions it committed.
func (s *Store) fireWatches(sb *syncBatch) {
	if s.watches.hasAny() {
		for k, v := range sb.ov.vals {
			s.watches.notify(k, v.value, v.exists)
		}
		for _, c := range sb.ov.cleared {
			for _, k := range s.watches.keysIn(c) {
				if _, ok := sb.ov.vals[k]; !ok {
					s.watches.notify(k, nil, false)
				}
			}
		}
	}
	for i, req := range sb.accepted {
		for j, e := range req.watches {
			v := sb.watchVals[i][j]
			s.watches.register(e, v.value, v.exists)
		}
	}
}

// registerWatches registers the watches of a read-only transaction that
// committed, which the committer never sees: each starts from the value
// its transaction read, compared with the latest published value, and
// fires at once if they differ. Holding notifyMu keeps that comparison and
// the registration on one side of every publication: a batch published
// before it is in the value compared, one published after it notifies the
// registered watch.
func (s *Store) registerWatches(entries []*watchEntry) {
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		for _, e := range entries {
			if e.w.Fire(errClosed) {
				s.watches.unreserve()
			}
		}
		return
	}
	s.mu.Lock()
	snap := s.mu.current.snap
	s.mu.Unlock()
	for _, e := range entries {
		v, closer, err := snap.Get(pebbleKey([]byte(e.key)))
		switch {
		case errors.Is(err, pebble.ErrNotFound):
			s.watches.register(e, nil, false)
		case err != nil:
			if e.w.Fire(kv.ErrOperationFailed.WithDetail("read for watch: %v", err)) {
				s.watches.unreserve()
			}
		default:
			s.watches.register(e, bytes.Clone(v), true)
			closer.Close()
		}
	}
}

// overlay is the state of the keys a batch wrote, on top of Pebble's last
// committed state, so that atomics and watches of later transactions in the
// batch see the writes of earlier ones before the batch is written.
type overlay struct {
	s       *Store
	vals    map[string]ovVal
	cleared []kv.Range
}

// overlays keeps the overlays of published batches for later ones: a map
// cleared keeps its room, and a batch of many jobs writes thousands of
// keys. (Two batches are in flight at once: one syncing, one resolving.)
var overlays = sync.Pool{New: func() any { return &overlay{vals: make(map[string]ovVal)} }}

func (s *Store) newOverlay() *overlay {
	ov := overlays.Get().(*overlay)
	ov.s = s
	return ov
}

// release returns the overlay to the pool once no one reads it; one that
// grew very large is left to the collector, since clearing a map costs
// what it once held.
func (ov *overlay) release() {
	if len(ov.vals) > 1<<16 {
		return
	}
	clear(ov.vals)
	clear(ov.cleared)
	*ov = overlay{vals: ov.vals, cleared: ov.cleared[:0]}
	overlays.Put(ov)
}

type ovVal struct {
	value  []byte
	exists bool
}

// get returns the key's value as of the writes applied so far.
func (ov *overlay) get(key []byte) ([]byte, bool, error) {
	if v, ok := ov.vals[string(key)]; ok {
		return v.value, v.exists, nil
	}
	for _, c := range ov.cleared {
		if c.Contains(key) {
			return nil, false, nil
		}
	}
	v, err := ov.s.getLatest(key)
	if err != nil {
		return nil, false, kv.ErrOperationFailed.WithDetail("read for commit: %v", err)
	}
	return v, v != nil, nil
}

// liveKeys appends to out the keys that exist after the writes applied so
// far.
func (ov *overlay) liveKeys(keys, out []string) []string {
	for _, k := range keys {
		if v, ok := ov.vals[k]; !ok || v.exists {
			out = append(out, k)
		}
	}
	return out
}

func (ov *overlay) set(key string, value []byte, exists bool) {
	ov.vals[key] = ovVal{value: value, exists: exists}
}

func (ov *overlay) clearRange(r kv.Range) {
	for k := range ov.vals {
		if r.Contains([]byte(k)) {
			delete(ov.vals, k)
		}
	}
	ov.cleared = append(ov.cleared, r)
}

// apply writes one transaction's buffer into the Pebble batch and the
// overlay, and returns the keys and ranges it wrote (its write conflict
// ranges).
func (ov *overlay) apply(pb *pebble.Batch, req *commitReq, stamp kv.Versionstamp, keys []string) (_ []string, ranges []kv.Range, err error) {
	buf := req.buf
	for _, c := range buf.cleared {
		if err := pb.DeleteRange(c.Begin, c.End, nil); err != nil {
			return nil, nil, kv.ErrOperationFailed.WithDetail("clear range: %v", err)
		}
		ov.clearRange(c)
		ranges = append(ranges, c)
	}
	buf.ascend(func(e *bufEntry) bool {
		// Read only: Pebble's batch copies the key, and the overlay looks
		// it up.
		k := unsafe.Slice(unsafe.StringData(e.key), len(e.key))
		var v []byte
		exists := true
		switch e.kind {
		case opSet:
			v = e.value
		case opClear:
			exists = false
		case opAtomic:
			var base []byte
			var ok bool
			base, ok, err = ov.get(k)
			if err != nil {
				return false
			}
			v, exists = e.resolve(base, ok)
		case opVSValue:
			v = stampInto(e.value, stamp)
		}
		if exists {
			err = pb.Set(k, v, nil)
		} else {
			err = pb.Delete(k, nil)
		}
		if err != nil {
			err = kv.ErrOperationFailed.WithDetail("write: %v", err)
			return false
		}
		ov.set(e.key, v, exists)
		keys = append(keys, e.key)
		return true
	})
	if err != nil {
		return nil, nil, err
	}
	for _, vk := range buf.vsKeys {
		k := stampInto(vk.Key, stamp)
		if err := pb.Set(k, vk.Value, nil); err != nil {
			return nil, nil, kv.ErrOperationFailed.WithDetail("write: %v", err)
		}
		ov.set(string(k), vk.Value, true)
		keys = append(keys, string(k))
	}
	for k := range req.writeKeys {
		keys = append(keys, k)
	}
	ranges = append(ranges, req.writeRngs...)
	return keys, ranges, nil
}
