package fdbq

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// A type's change key (P, 4, type) wakes the waits that cannot watch each
// job they wait for (a coarse Wait, an accept passing over zones it cannot
// take from, an idle monitor). Bumped by every change to a job, it would
// be the one key every job of a type writes, on one storage team however
// large the cluster. So a change bumps it only while some process has
// said it watches it: a holder, one a Queue and type, writes its entry
// (P, 19, type, holder) = its expiry before it reads what it waits for,
// and clears it when done, adding 1 and -1 to the type's count of them,
// (P, 18, type). Every transaction that changes a job of the type reads
// that count with a read conflict (once a transaction and type: one point
// read) and bumps the change key only if it is above zero.
//
// No change is missed. The holder's read begins after its entry's commit
// (version v). A change that commits after v either read the count after
// v, saw the holder in it and bumped the key, or read it before v and
// conflicts with the count's write, so it retries and sees it. A change
// that committed before v is in what the holder reads. A holder's watch
// on the change key thus fires for every change it did not read.
//
// An entry lives while its holder renews it, every interestLease/2 by the
// holder's clock; one a crashed process left behind only costs the bumps
// until a monitor clears it, interestLease after its expiry by the
// monitor's clock (clock skew up to a lease is harmless; a live holder
// whose entry a monitor cleared writes it again at its next renewal, and
// its waits read again then).
var interestLease = time.Minute

// interests are a Queue's holds on its types' change keys.
type interests struct {
	holder string
	// events: the holds are for the types' event logs (see events.go):
	// their entries count in the types' events counts too, and they are
	// not cleared when let go but left to expire.
	events bool
	mu     sync.Mutex
	byType map[string]*interest
}

// interest is a Queue's hold on one type's change key.
type interest struct {
	refs int
	// renewBy is when the entry must be written again (real time); zero
	// while none is known to be in the store.
	renewBy time.Time
	// busy, when not nil, is closed once the write or clear of the entry
	// in flight is done.
	busy chan struct{}
}

func newInterests() *interests {
	return &interests{holder: newToken(), byType: map[string]*interest{}}
}

// eventHolderPrefix begins the holder of every event log hold.
const eventHolderPrefix = "events:"

func newEventHolds() *interests {
	return &interests{holder: eventHolderPrefix + newToken(), events: true, byType: map[string]*interest{}}
}

// interestHold is one holder's reference on a type's interest.
type interestHold struct {
	q   *Queue
	is  *interests
	typ string
}

// holdInterest takes a reference on the queue's interest in typ's changes
// and returns once its entry is in the store: a read that begins after
// this sees every change whose commit does not bump the change key.
func (q *Queue) holdInterest(ctx context.Context, typ string) (*interestHold, error) {
	h := q.refInterest(typ)
	if _, err := q.renewInterests(ctx, []*interestHold{h}); err != nil {
		h.release()
		return nil, err
	}
	return h, nil
}

// refInterest takes a reference on the queue's interest in typ's changes,
// whose entry renewInterests writes.
func (q *Queue) refInterest(typ string) *interestHold {
	return q.ref(q.interests, typ)
}

// ref takes a reference on is's hold of typ.
func (q *Queue) ref(is *interests, typ string) *interestHold {
	is.mu.Lock()
	e := is.byType[typ]
	if e == nil {
		e = &interest{}
		is.byType[typ] = e
	}
	if e.refs == 0 && is.events {
		// Left to expire when let go: a monitor may have cleared it
		// since, so it is read and written again.
		e.renewBy = time.Time{}
	}
	e.refs++
	is.mu.Unlock()
	return &interestHold{q: q, is: is, typ: typ}
}

// renew writes the hold's entry again if its renewal is due (or it is not
// in the store), and waits for a write or clear of it in flight.
func (h *interestHold) renew(ctx context.Context) error {
	_, err := h.q.renewInterests(ctx, []*interestHold{h})
	return err
}

// renewInterests writes, in one transaction, the entries of the holds
// (of distinct types, all of one interests) whose renewal is due or that
// are not in the store, once no write or clear of them is in flight.
// restored reports an entry it found gone though it had been written (a
// monitor cleared it as stale): its holders have to read again, as
// changes meanwhile bumped nothing.
//
// An event log hold whose entry is new counts in its type's events count
// too; one that finds the count at zero (the log not kept until now) sets
// the log's floor to this commit's versionstamp: the log is complete
// after it, as every change that commits later sees the count above zero
// or conflicts with its write.
func (q *Queue) renewInterests(ctx context.Context, hs []*interestHold) (restored bool, err error) {
	if len(hs) == 0 {
		return false, nil
	}
	is := hs[0].is
	is.mu.Lock()
	var due []*interest
	var keys [][]byte
	var typs []string
	for {
		due, keys, typs = due[:0], keys[:0], typs[:0]
		var busy chan struct{}
		now := time.Now()
		for _, h := range hs {
			e := is.byType[h.typ]
			if e.busy != nil {
				busy = e.busy
				break
			}
			if e.renewBy.IsZero() || !now.Before(e.renewBy) {
				due = append(due, e)
				keys = append(keys, q.k.interested(h.typ).MustPack(tuple.Tuple{is.holder}), q.k.interest(h.typ))
				typs = append(typs, h.typ)
			}
		}
		if busy == nil {
			break
		}
		is.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return false, ctx.Err()
		}
		is.mu.Lock()
	}
	if len(due) == 0 {
		is.mu.Unlock()
		return false, nil
	}
	written := make([]bool, len(due))
	for i, e := range due {
		written[i] = !e.renewBy.IsZero()
	}
	done := make(chan struct{})
	for _, e := range due {
		e.busy = done
	}
	is.mu.Unlock()
	start := time.Now()
	restored, err = kv.Transact(ctx, q.db, func(tx kv.Tx) (bool, error) {
		v := tuple.Tuple{q.nowMs() + interestLease.Milliseconds()}.MustPack()
		restored := false
		for i := 0; i < len(keys); i += 2 {
			// Read with a conflict, as a release and a monitor's clear
			// read it: the count moves with the entries.
			was, err := tx.Get(keys[i])
			if err != nil {
				return false, err
			}
			if was == nil {
				// A hold of a type never registered would never be
				// cleared: a monitor clears the entries of registered
				// types (and types are never unregistered).
				typ, err := tx.Snapshot().Get(q.k.typ(typs[i/2]))
				if err != nil {
					return false, err
				}
				if typ == nil {
					return false, fmt.Errorf("%w: %q", ErrUnknownType, typs[i/2])
				}
				tx.Add(keys[i+1], 1)
				restored = restored || written[i/2]
				if is.events {
					if err := q.holdEventLog(tx, typs[i/2]); err != nil {
						return false, err
					}
				}
			}
			tx.Set(keys[i], v)
		}
		return restored, nil
	})
	is.mu.Lock()
	close(done)
	for _, e := range due {
		e.busy = nil
		if err == nil {
			e.renewBy = start.Add(interestLease / 2)
		}
	}
	is.mu.Unlock()
	return restored, err
}

// renewIn is how long until the hold's entry must be written again.
func (h *interestHold) renewIn() time.Duration {
	is := h.is
	is.mu.Lock()
	defer is.mu.Unlock()
	return max(time.Until(is.byType[h.typ].renewBy), 0)
}

// release drops the reference (nil: none); the last one clears the entry.
// A clear that fails leaves the entry to expire. The entry of an event
// log hold is left to expire (see events.go).
func (h *interestHold) release() {
	if h == nil {
		return
	}
	if h.is.events {
		h.is.mu.Lock()
		e := h.is.byType[h.typ]
		if e.refs--; e.refs == 0 && e.busy == nil && e.renewBy.IsZero() {
			// Never written (its type is unknown, or the write failed):
			// nothing to expire.
			delete(h.is.byType, h.typ)
		}
		h.is.mu.Unlock()
		return
	}
	h.q.releaseInterests([]*interestHold{h})
}

// releaseInterests drops the references hs (of distinct types) and clears,
// in one transaction, the entries of those that were the last, unless a
// reference is taken meanwhile (the entry then stays for it).
func (q *Queue) releaseInterests(hs []*interestHold) {
	is := q.interests
	is.mu.Lock()
	var last []string
	for _, h := range hs {
		e := is.byType[h.typ]
		if e.refs--; e.refs == 0 {
			last = append(last, h.typ)
		}
	}
	for len(last) > 0 {
		var busy chan struct{}
		var clear []*interest
		var keys [][]byte
		var typs []string
		for _, typ := range last {
			e := is.byType[typ]
			if e == nil || e.refs > 0 {
				continue
			}
			if e.busy != nil {
				busy = e.busy
				typs = append(typs, typ)
				continue
			}
			clear = append(clear, e)
			keys = append(keys, q.k.interested(typ).MustPack(tuple.Tuple{is.holder}), q.k.interest(typ))
		}
		if len(clear) > 0 {
			done := make(chan struct{})
			for _, e := range clear {
				e.busy, e.renewBy = done, time.Time{}
			}
			is.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _ = kv.Transact(ctx, q.db, func(tx kv.Tx) (struct{}, error) {
				for i := 0; i < len(keys); i += 2 {
					was, err := tx.Get(keys[i])
					if err != nil {
						return struct{}{}, err
					}
					if was != nil {
						tx.Clear(keys[i])
						tx.Add(keys[i+1], -1)
					}
				}
				return struct{}{}, nil
			})
			cancel()
			is.mu.Lock()
			close(done)
			for _, e := range clear {
				e.busy = nil
			}
			for typ, e := range is.byType {
				if e.refs == 0 && e.busy == nil && e.renewBy.IsZero() {
					delete(is.byType, typ)
				}
			}
		}
		if busy == nil {
			break
		}
		// A write in flight (its holder has let go since): clear after it.
		is.mu.Unlock()
		<-busy
		is.mu.Lock()
		last = typs
	}
	is.mu.Unlock()
}

// changeNotesMemo keys a transaction's changeNotes for q (kv.Memo).
type changeNotesMemo struct{ q *Queue }

// changeNotes is what a transaction that changes several jobs learned of
// their types' interest counts, so that it reads each type's once and
// bumps each change key once.
type changeNotes map[string]*changeNote

// changeNote is what a transaction learned of one type's counts.
type changeNote struct {
	// held: the type's change key is watched (and was bumped); logged:
	// its event log is kept.
	held, logged bool
}

// changed notes, in a transaction that changes a job of typ, that the
// type's change key moves if a holder watches it (see interests). The
// operations of one transaction attempt share one read of the count and
// one bump (kv.Memo): an AddBatch, an accept of many jobs, a batch of
// finishes.
func (q *Queue) changed(tx kv.Tx, typ string) error {
	_, err := q.changeNote(tx, typ)
	return err
}

// changeNote is changed, returning what the transaction knows of typ's
// counts. Only while the change key is watched is the events count read
// (an event log's holds count in both): a change of a type nobody
// watches reads one key.
func (q *Queue) changeNote(tx kv.Tx, typ string) (*changeNote, error) {
	notes := kv.Memo(tx, changeNotesMemo{q}, func() any { return changeNotes{} }).(changeNotes)
	if n, done := notes[typ]; done {
		return n, nil
	}
	b, err := tx.Get(q.k.interest(typ))
	if err != nil {
		return nil, err
	}
	n := &changeNote{held: kv.DecodeInt64(b) > 0}
	if n.held {
		tx.Add(q.k.change(typ), 1)
		b, err := tx.Get(q.k.eventsHeld(typ))
		if err != nil {
			return nil, err
		}
		n.logged = kv.DecodeInt64(b) > 0
	}
	notes[typ] = n
	return n, nil
}

// maxInterestScan bounds the interest entries of a type one read goes
// through: one a process, so more means processes came and went faster
// than monitors cleared them; the rest are reached as the first clear.
const maxInterestScan = 1000

// staleInterest reads typ's interest entries and returns the keys of
// those that expired at least interestLease before now (or do not
// decode), other than this queue's own, and the earliest time, in ms, at
// which another does (0: none); wrong reports a count of them that is not
// the number of entries (written by hand, or corrupt).
func (q *Queue) staleInterest(tx kv.ReadTx, typ string, now int64) (stale [][]byte, next int64, wrong bool, err error) {
	sub := q.k.interested(typ)
	kvs, err := tx.GetRange(sub.Range(), kv.RangeOptions{Limit: maxInterestScan})
	if err != nil {
		return nil, 0, false, err
	}
	count, err := tx.Get(q.k.interest(typ))
	if err != nil {
		return nil, 0, false, err
	}
	held, err := tx.Get(q.k.eventsHeld(typ))
	if err != nil {
		return nil, 0, false, err
	}
	wrongCount := func(count []byte, n int64) bool {
		if count == nil {
			return n > 0
		}
		return len(count) != 8 || kv.DecodeInt64(count) != n
	}
	if n := int64(len(kvs)); n < maxInterestScan { // else not all read: the counts cannot be checked
		wrong = wrongCount(count, n) || wrongCount(held, countEventHolders(q.k.interested(typ), kvs))
	}
	own := sub.MustPack(tuple.Tuple{q.interests.holder})
	for _, e := range kvs {
		if bytes.Equal(e.Key, own) {
			continue // renewed by this process, whatever its clock says
		}
		t, err := tuple.Unpack(e.Value)
		var exp int64
		ok := err == nil && len(t) == 1
		if ok {
			exp, ok = t[0].(int64)
		}
		gone := exp
		if lease := interestLease.Milliseconds(); exp <= math.MaxInt64-lease {
			gone = exp + lease
		}
		switch {
		case !ok || gone <= now:
			stale = append(stale, e.Key)
		case next == 0 || gone < next:
			next = gone
		}
	}
	return stale, next, wrong, nil
}

// countEventHolders counts the entries of kvs, read from sub, that event
// log holds wrote.
func countEventHolders(sub tuple.Subspace, kvs []kv.KeyValue) int64 {
	var n int64
	for _, e := range kvs {
		if t, err := sub.Unpack(e.Key); err == nil && len(t) == 1 {
			if h, ok := t[0].(string); ok && strings.HasPrefix(h, eventHolderPrefix) {
				n++
			}
		}
	}
	return n
}

// clearStaleInterest clears the entries of typ's holders that stopped
// renewing them (see staleInterest), read again in its own transaction,
// and makes the count the number of entries left.
func (q *Queue) clearStaleInterest(ctx context.Context, typ string) error {
	return q.db.Transact(ctx, func(tx kv.Tx) error {
		stale, _, _, err := q.staleInterest(tx, typ, q.nowMs())
		if err != nil {
			return err
		}
		for _, k := range stale {
			tx.Clear(k)
		}
		// Read with a conflict in staleInterest: a register or release
		// since makes this retry.
		kvs, err := tx.GetRange(q.k.interested(typ).Range(), kv.RangeOptions{Limit: maxInterestScan})
		if err != nil || len(kvs) == maxInterestScan {
			return err
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(len(kvs)))
		tx.Set(q.k.interest(typ), b[:])
		binary.LittleEndian.PutUint64(b[:], uint64(countEventHolders(q.k.interested(typ), kvs)))
		tx.Set(q.k.eventsHeld(typ), b[:])
		return nil
	})
}
