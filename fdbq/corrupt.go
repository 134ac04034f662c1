package fdbq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// ErrCorrupt: what the store holds for a job or a type does not decode: a
// record, a type's settings or an index key that is damaged, or that a
// version of jobstage this one cannot read wrote. The error names the job,
// type or key and says what is wrong. Remove deletes such a job; the other
// operations on it fail with ErrCorrupt; List, Types and the Monitor report
// or skip it and go on with the rest.
var ErrCorrupt = errors.New("fdbq: unreadable data in the store")

// corruptf returns an ErrCorrupt *Error whose Detail format and args
// make, naming the job, type or key and what is wrong with it; the error
// a %w in format wraps is its Cause.
func corruptf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &Error{Err: ErrCorrupt, Detail: err.Error(), Cause: errors.Unwrap(err)}
}

// decodeStored is decodeRecord for a record read from the store: one that
// does not decode, or that holds a state or outcome no version stores (a
// JSON record of earlier versions is read field by field, and may), is
// ErrCorrupt.
func decodeStored(b []byte, typ, id string) (*record, error) {
	rec, err := decodeRecord(b, typ, id)
	if err != nil {
		return nil, err
	}
	if err := rec.checkStored(); err != nil {
		return nil, corruptf("job %s/%s: corrupt record: %w", typ, id, err)
	}
	return rec, nil
}

// checkStored reports what no version stores and the record could not be
// stored again with, or not read back: a state or outcome without a code,
// a count that format 1 does not hold (a JSON record is read field by
// field, and may have any).
func (r *record) checkStored() error {
	if _, ok := stateCode(r.State); !ok {
		return fmt.Errorf("unknown state %q", r.State)
	}
	if _, ok := outcomeCode(r.Outcome); !ok {
		return fmt.Errorf("unknown outcome %q", r.Outcome)
	}
	counts := []int{r.Attempts, r.MaxAttempts}
	if r.Retry != nil {
		counts = append(counts, r.Retry.MaxAttempts)
	}
	for _, n := range counts {
		if n < 0 || n > math.MaxInt32 {
			return fmt.Errorf("count %d out of range", n)
		}
	}
	return nil
}

// Unreadable is an index entry whose job a listing could not read. The
// listing leaves it out of its jobs and goes on past it.
type Unreadable struct {
	// ID is the job's id; empty when the entry's key is not one fdbq
	// writes and names no id.
	ID string
	// Key is the index entry's key.
	Key []byte
	// Err says what is wrong; it wraps ErrCorrupt.
	Err error
}

// maxRemoveRounds bounds Remove's transactions for a job whose record
// does not decode: one that finds no entry, and one after each search.
const maxRemoveRounds = 3

// locateBatch bounds the index entries that one transaction of locate
// reads (a pending entry can carry a record of up to 2 KB).
var locateBatch = 1000

// located is what a search of a type's indexes found for one job: the key
// of the entry that names it and the state of its index, or no key when
// none does; record is the job's stored value the search was made for.
type located struct {
	record []byte
	key    []byte
	state  State
}

// indexEntry is a key of one of a type's indexes, and the state of the
// index.
type indexEntry struct {
	key   []byte
	state State
}

// dropUnreadable removes the job id, whose stored value b does not decode,
// when it finds the index entry that points at it: the entry made from
// b's header, or the one loc found for b. It reports false, having written
// nothing, when neither finds it and loc is not a search for b; with such
// a search that found nothing, it clears the record alone.
func (q *Queue) dropUnreadable(tx kv.Tx, typ, id string, b []byte, loc *located) (bool, error) {
	cands := q.headerEntries(typ, id, b)
	searched := loc != nil && bytes.Equal(loc.record, b)
	if searched && loc.key != nil {
		cands = append(cands, indexEntry{loc.key, loc.state})
	}
	var found *indexEntry
	for i, c := range cands {
		kvs, err := tx.GetRange(kv.SingleKeyRange(c.key), kv.RangeOptions{Limit: 1})
		if err != nil {
			return false, err
		}
		if len(kvs) > 0 {
			found = &cands[i]
			break
		}
	}
	if found == nil && !searched {
		return false, nil
	}
	if found != nil {
		tx.Clear(found.key)
		tx.Add(q.k.countShard(typ, found.state, id), -1)
		if h, ok := readHeader(b); ok && found.state == Running && h.zone.key != "" {
			// The key's running count, as countKeyRunning keeps it.
			tx.Add(q.k.keyRunning(typ, h.zone), -1)
		}
	}
	tx.Clear(q.k.job(typ, id))
	if err := q.stepUnreadable(tx, typ, id); err != nil {
		return false, err
	}
	return true, q.logChange(tx, typ, id, nil)
}

// recordHeader is what precedes a record's text and data in formats 1
// and 2: what its index entries are made of.
type recordHeader struct {
	priority int64
	times    [7]int64 // added, scheduled, started, heartbeat, finished, expires, resubmit
	version  int64
	zone     zone
}

// readHeader reads the header of a record in format 1 or 2, or reports
// false when b is in neither format or its header is cut short.
func readHeader(b []byte) (recordHeader, bool) {
	var h recordHeader
	if len(b) == 0 || (b[0] != formatBinary1 && b[0] != formatBinary2) {
		return h, false
	}
	d := recordReader{b: b[1:]}
	d.byte()
	d.byte()
	flags := d.byte()
	h.priority = d.varint()
	d.uvarint()
	d.uvarint()
	for i := range h.times {
		h.times[i] = d.varint()
	}
	if b[0] >= formatBinary2 {
		h.version = d.varint()
	}
	if flags&flagZone != 0 {
		h.zone.key, h.zone.shard = d.zone()
	}
	return h, d.err == nil && int64(int(h.priority)) == h.priority
}

// headerEntries returns the index entries a record in format 1 or 2 would
// have in each state, made from its header (state, outcome and flags
// bytes, priority, attempts, max attempts, then the times), which precedes
// its text and data and so can often still be read when they cannot; none
// when b is in neither format or its header is cut short.
func (q *Queue) headerEntries(typ, id string, b []byte) []indexEntry {
	h, ok := readHeader(b)
	if !ok {
		return nil
	}
	priority, times, version, z := h.priority, h.times, h.version, h.zone
	entries := []indexEntry{
		{q.k.pending(typ, z, int(priority), times[1], id), Pending},
		{q.k.scheduled(typ, z, int(priority), times[1], id), Pending},
		{q.k.finished(typ, times[4], id), Finished},
	}
	if b[0] == formatBinary1 {
		entries = append(entries, indexEntry{q.k.legacyActive(typ, times[5], id), Running})
	} else {
		r := record{HeartbeatAt: times[3], ExpiresAt: times[5]}
		entries = append(entries, indexEntry{q.k.active(typ, r.activityTimeoutMs(), version, id), Running})
	}
	return entries
}

// locate looks for the index entry that names job id through the type's
// pending, running and finished indexes, in read-only transactions of at
// most locateBatch entries; b is the job's stored value.
func (q *Queue) locate(ctx context.Context, typ, id string, b []byte) (*located, error) {
	loc := &located{record: b}
	for _, ix := range []struct {
		s   State
		sub tuple.Subspace
		n   string // the shape of its keys after the prefix
	}{
		{Pending, q.k.pendingType(typ), shapeReady},
		{Pending, q.k.scheduledType(typ), shapeScheduled},
		{Running, q.k.legacyActiveType(typ), shapeByTime},
		{Running, q.k.activeType(typ), shapeActive},
		{Finished, q.k.finishedType(typ), shapeFinished},
	} {
		s, r := ix.s, ix.sub.Range()
		for {
			kvs, err := kv.ReadTransact(ctx, q.db, func(tx kv.ReadTx) ([]kv.KeyValue, error) {
				return tx.GetRange(r, kv.RangeOptions{Limit: locateBatch})
			})
			if err != nil {
				return nil, err
			}
			for _, e := range kvs {
				if got, ok := entryIDIn(ix.sub, ix.n, e.Key); ok && got == id {
					loc.key, loc.state = e.Key, s
					return loc, nil
				}
			}
			if len(kvs) < locateBatch {
				break
			}
			r.Begin = kv.KeyAfter(kvs[len(kvs)-1].Key)
		}
	}
	return loc, nil
}
