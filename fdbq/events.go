package fdbq

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// The event log of a type (P, 24, type, versionstamp, n) holds one entry
// for every change of one of its jobs (an add, an accept, a heartbeat, a
// finish, a requeue, a removal), in commit order: the versionstamp of the
// transaction that made the change, then its place in that transaction
// (see eventPlaces), unique across the types the transaction changed.
// It costs a write per change, so it is kept only while someone follows
// the type: a follower holds an interest entry (see interests) whose
// holder begins with eventHolderPrefix, counted in the type's events
// count (P, 25, type) as well as in its interest count, and every change
// that reads the interest count above zero reads the events count too
// (both with conflicts) and writes its event when that is above zero. A
// change of a type nobody follows or watches reads one key, as before.
//
// A follower lets go of its entry by no longer renewing it: the entry
// expires after interestLease and a monitor clears it interestLease
// later, so a follower that reconnects within a minute finds the log
// kept meanwhile and misses nothing.
//
// The floor (P, 26, type) is the position up to which the log may miss
// changes: the versionstamp of the transaction that brought the events
// count up from zero (the log was not kept before it, and every change
// that commits after it sees the count above zero or conflicts with it),
// or the last position a monitor trimmed (events older than
// Options.EventRetention). A follower whose position is below a type's
// floor is told so by an EventReset: what it shows has to be read again.

// DefaultEventRetention is Options.EventRetention when it is zero.
const DefaultEventRetention = 10 * time.Minute

// Removed is the state of an event that removed its job; no job is ever
// in it.
const Removed State = "removed"

// EventKind says what an Event reports.
type EventKind string

// Event kinds.
const (
	// EventJob: a job changed.
	EventJob EventKind = "job"
	// EventReset: the log may miss changes before Cursor (the follower
	// came back after it was trimmed, or after nobody had followed the
	// type for a while); the follower should read again what it shows.
	EventReset EventKind = "reset"
	// EventIdle: nothing happened for FollowOptions.Idle.
	EventIdle EventKind = "idle"
	// EventReady: the first event of a Follow, once the logs of its types
	// are kept; Cursor is where it begins.
	EventReady EventKind = "ready"
)

// Event is one entry of the event log, as Follow reports it.
type Event struct {
	Kind EventKind
	// Cursor is the event's position: a Follow with After set to it goes
	// on after it. An EventIdle or EventReady carries the follower's
	// position.
	Cursor Cursor
	// Type and ID name the job; State is its state after the change
	// (Removed: it was removed), Outcome its outcome once finished,
	// Attempts its attempts so far, At when it changed by the clock of
	// the process that changed it.
	Type     string
	ID       string
	State    State
	Outcome  Outcome
	Attempts int
	At       time.Time
	// Reason says why an EventReset came.
	Reason string
}

// Cursor is a position in the event log: a commit's versionstamp and a
// change's place in its commit. The zero Cursor is none.
type Cursor struct {
	vs  [10]byte
	seq int64
}

// IsZero reports whether c is no position.
func (c Cursor) IsZero() bool { return c == Cursor{} }

// String returns c as 36 hexadecimal digits ("" for the zero Cursor).
func (c Cursor) String() string {
	if c.IsZero() {
		return ""
	}
	var b [18]byte
	copy(b[:], c.vs[:])
	binary.BigEndian.PutUint64(b[10:], uint64(c.seq))
	return hex.EncodeToString(b[:])
}

// ParseCursor reads a Cursor as String writes it; "" is the zero Cursor.
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 18 || b[10]&0x80 != 0 {
		return Cursor{}, fmt.Errorf("fdbq: malformed event cursor %.40q: want the 36 hexadecimal digits of an event's cursor", s)
	}
	var c Cursor
	copy(c.vs[:], b)
	c.seq = int64(binary.BigEndian.Uint64(b[10:]))
	return c, nil
}

func (c Cursor) compare(d Cursor) int {
	if r := bytes.Compare(c.vs[:], d.vs[:]); r != 0 {
		return r
	}
	switch {
	case c.seq < d.seq:
		return -1
	case c.seq > d.seq:
		return 1
	}
	return 0
}

// cursorAt is the position after every change visible at read version
// rv: a later commit has a larger version.
func cursorAt(rv int64) Cursor {
	var c Cursor
	binary.BigEndian.PutUint64(c.vs[:8], uint64(rv))
	c.vs[8], c.vs[9] = 0xff, 0xff
	c.seq = math.MaxInt64
	return c
}

// eventKey is the log key of the event at c.
func (k keys) eventKey(typ string, c Cursor) []byte {
	return k.events(typ).MustPack(tuple.Tuple{tuple.Versionstamp{TransactionVersion: c.vs}, c.seq})
}

// parseEventKey reads the position of a log key.
func (k keys) parseEventKey(typ string, key []byte) (Cursor, bool) {
	t, err := k.events(typ).Unpack(key)
	if err != nil || len(t) != 2 {
		return Cursor{}, false
	}
	vs, ok1 := t[0].(tuple.Versionstamp)
	seq, ok2 := t[1].(int64)
	if !ok1 || !ok2 || seq < 0 || !vs.IsComplete() {
		return Cursor{}, false
	}
	return Cursor{vs: vs.TransactionVersion, seq: seq}, true
}

// floorValue is what a versionstamped floor write stores: a placeholder
// for the commit's versionstamp, place 0, and the placeholder's offset.
var floorValue = func() []byte {
	v := make([]byte, 10+8+4)
	for i := range 10 {
		v[i] = 0xff
	}
	return v
}()

// encodeFloor is a floor's stored value.
func encodeFloor(c Cursor) []byte {
	b := make([]byte, 18)
	copy(b, c.vs[:])
	binary.BigEndian.PutUint64(b[10:], uint64(c.seq))
	return b
}

// decodeFloor reads a floor; a value that is not one is taken as the
// highest floor there is, so that a follower below it reads again rather
// than trusts a log that may miss changes.
func decodeFloor(b []byte) Cursor {
	if b == nil {
		return Cursor{}
	}
	if len(b) != 18 || b[10]&0x80 != 0 {
		c := Cursor{seq: math.MaxInt64}
		for i := range c.vs {
			c.vs[i] = 0xff
		}
		return c
	}
	var c Cursor
	copy(c.vs[:], b)
	c.seq = int64(binary.BigEndian.Uint64(b[10:]))
	return c
}

// holdEventLog counts, in the transaction that writes it, a new event log
// hold of typ, and sets the log's floor if it was not kept until now.
func (q *Queue) holdEventLog(tx kv.Tx, typ string) error {
	b, err := tx.Get(q.k.eventsHeld(typ))
	if err != nil {
		return err
	}
	if kv.DecodeInt64(b) <= 0 {
		tx.SetVersionstampedValue(q.k.eventsFloor(typ), floorValue)
	}
	tx.Add(q.k.eventsHeld(typ), 1)
	return nil
}

// eventPlaces numbers the events this process writes: an event's place
// in its transaction. The log keys of one commit share its versionstamp,
// so their places must differ across every type the commit changes (a
// follower of several types resumes after one of them by its cursor) and
// keep the order the changes were made in; a transaction is written by
// one process, and a counter of the process gives both without anything
// kept in the transaction (a transaction its caller commits keeps no
// kv.Memo). Places start at 1: a floor's place is 0.
var eventPlaces atomic.Int64

// logChange notes a change of job id of typ in tx (see changed) and, while
// the type's event log is kept, writes its event: rec is the job after
// the change, nil if it was removed.
func (q *Queue) logChange(tx kv.Tx, typ, id string, rec *record) error {
	n, err := q.changeNote(tx, typ)
	if err != nil || !n.logged {
		return err
	}
	key, err := q.k.events(typ).PackWithVersionstamp(tuple.Tuple{tuple.IncompleteVersionstamp(0), eventPlaces.Add(1)})
	if err != nil {
		return err
	}
	v := tuple.Tuple{id, string(Removed), "", int64(0), q.nowMs()}
	if rec != nil {
		v[1], v[2], v[3] = string(rec.State), string(rec.Outcome), int64(rec.Attempts)
	}
	tx.SetVersionstampedKey(key, v.MustPack())
	return nil
}

// decodeEvent reads a log entry of typ.
func (q *Queue) decodeEvent(typ string, e kv.KeyValue) (Event, error) {
	c, ok := q.k.parseEventKey(typ, e.Key)
	if !ok {
		return Event{}, corruptf("malformed event key %q", e.Key)
	}
	t, err := tuple.Unpack(e.Value)
	if err != nil || len(t) != 5 {
		return Event{Cursor: c}, corruptf("event %s of type %s does not decode", c, typ)
	}
	id, ok1 := t[0].(string)
	state, ok2 := t[1].(string)
	outcome, ok3 := t[2].(string)
	attempts, ok4 := t[3].(int64)
	at, ok5 := t[4].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || attempts < 0 || attempts > math.MaxInt32 {
		return Event{Cursor: c}, corruptf("event %s of type %s does not decode", c, typ)
	}
	return Event{Kind: EventJob, Cursor: c, Type: typ, ID: id, State: State(state), Outcome: Outcome(outcome),
		Attempts: int(attempts), At: time.UnixMilli(at).UTC()}, nil
}

// MaxFollowTypes bounds the types one Follow names: each costs a watch
// and an interest entry.
const MaxFollowTypes = 100

// MaxFollowAllTypes bounds the types a Follow of every type follows, those
// registered while it follows included: a store with more is followed by
// naming types.
const MaxFollowAllTypes = 1000

// ErrTooManyTypes: a Follow would follow more types than it may
// (MaxFollowTypes named, MaxFollowAllTypes when following every type).
var ErrTooManyTypes = errors.New("fdbq: too many types to follow")

// DefaultFollowBatch is FollowOptions.Batch when it is zero.
const DefaultFollowBatch = 256

// FollowOptions configure a Follow.
type FollowOptions struct {
	// Types to follow (at most MaxFollowTypes); none: every registered
	// type, those registered while it follows included (each a reset: its
	// log begins then), at most MaxFollowAllTypes of them.
	Types []string
	// After is where to begin: after that event. Zero: with the changes
	// that commit after Follow has begun.
	After Cursor
	// Idle, when positive, has Follow report an EventIdle when nothing
	// happened for so long (a stream's keepalive).
	Idle time.Duration
	// Batch is how many events one read takes at most (a type's share of
	// it, with several types); default DefaultFollowBatch.
	Batch int
}

// Follow reports the changes of the jobs of o.Types to fn in commit order,
// as they commit, until ctx ends (its error is returned) or fn returns an
// error (returned as is). It is woken by watches, never by polling; while
// it follows a type, the type's event log is kept (see the event log
// above), and for about a minute after.
//
// An event that does not decode is skipped and logged. fn runs outside
// any transaction; events it has not returned from are reported again by
// a Follow from its last returned Cursor.
func (q *Queue) Follow(ctx context.Context, o FollowOptions, fn func(Event) error) error {
	f := &follower{q: q, o: o, all: len(o.Types) == 0, holds: map[string]*interestHold{}}
	if f.o.Batch <= 0 {
		f.o.Batch = DefaultFollowBatch
	}
	defer f.release()
	types := slices.Clone(o.Types)
	for _, t := range types {
		if err := ValidateTypeName(t); err != nil {
			return err
		}
	}
	if f.all {
		var err error
		if types, err = q.typeNames(ctx); err != nil {
			return err
		}
	}
	slices.Sort(types)
	types = slices.Compact(types)
	if err := f.hold(ctx, types); err != nil {
		return err
	}
	cursor := o.After
	if cursor.IsZero() {
		rv, err := kv.ReadTransact(ctx, q.db, func(tx kv.ReadTx) (int64, error) { return tx.ReadVersion() })
		if err != nil {
			return err
		}
		cursor = cursorAt(rv)
	}
	if err := fn(Event{Kind: EventReady, Cursor: cursor}); err != nil {
		return err
	}
	lastEvent := time.Now()
	for {
		r, err := f.read(ctx, cursor)
		if err != nil {
			return err
		}
		if r.reset != "" {
			cursor = r.resetTo
			if err := fn(Event{Kind: EventReset, Cursor: cursor, Reason: r.reset}); err != nil {
				return err
			}
			lastEvent = time.Now()
		}
		for _, e := range r.events {
			if err := fn(e); err != nil {
				return err
			}
			cursor = e.Cursor
		}
		if r.advance.compare(cursor) > 0 {
			cursor = r.advance // past entries that do not decode
		}
		if len(r.events) > 0 || r.reset != "" {
			lastEvent = time.Now()
		}
		if r.reset != "" || r.more {
			continue
		}
		// The read that found the events set the watches too: a change
		// since fires them at once, and a follower keeping up with a
		// busy type reads once a change.
		woke, err := f.wait(ctx, r, lastEvent)
		if err != nil {
			return err
		}
		if !woke {
			if err := fn(Event{Kind: EventIdle, Cursor: cursor}); err != nil {
				return err
			}
			lastEvent = time.Now()
		}
	}
}

// typeNames reads the names of the registered types.
func (q *Queue) typeNames(ctx context.Context) ([]string, error) {
	return kv.ReadTransact(ctx, q.db, func(tx kv.ReadTx) ([]string, error) {
		return q.typeNamesTx(tx)
	})
}

func (q *Queue) typeNamesTx(tx kv.ReadTx) ([]string, error) {
	sub := q.k.types()
	kvs, err := tx.GetRange(sub.Range(), kv.RangeOptions{Limit: MaxFollowAllTypes + 1})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range kvs {
		// A key that names no valid type is reported by Types and the
		// monitor; it has no jobs to follow.
		if name, ok := parseTypeKey(sub, e.Key); ok && ValidateTypeName(name) == nil {
			names = append(names, name)
		}
	}
	return names, nil
}

// follower is one Follow's state.
type follower struct {
	q     *Queue
	o     FollowOptions
	all   bool
	holds map[string]*interestHold
	types []string // sorted
}

// hold takes event log holds of types not held yet and writes their
// entries.
func (f *follower) hold(ctx context.Context, types []string) error {
	var added []*interestHold
	for _, t := range types {
		if _, ok := f.holds[t]; ok {
			continue
		}
		if !f.all && len(f.holds) == MaxFollowTypes {
			return fmt.Errorf("%w: at most %d types may be named at once", ErrTooManyTypes, MaxFollowTypes)
		}
		if f.all && len(f.holds) == MaxFollowAllTypes {
			return fmt.Errorf("%w: the store has more than %d types, more than a follower of every type follows: name the types to follow", ErrTooManyTypes, MaxFollowAllTypes)
		}
		h := f.q.ref(f.q.eventHolds, t)
		f.holds[t] = h
		f.types = append(f.types, t)
		added = append(added, h)
	}
	slices.Sort(f.types)
	_, err := f.q.renewInterests(ctx, added)
	return err
}

func (f *follower) release() {
	for _, h := range f.holds {
		h.release()
	}
}

// followRead is what one read of a follower found.
type followRead struct {
	events []Event
	// advance: the position read up to, past entries that do not
	// decode; more: a type had more events than the read took.
	advance Cursor
	more    bool
	// reset, when not "", says why the log may miss changes after the
	// cursor; resetTo is where to go on from.
	reset   string
	resetTo Cursor
	// watches fire when a type's change key (or, following every type,
	// the registry) changes; newTypes are types registered since.
	watches  []kv.Watch
	newTypes []string
}

// read reads, in one transaction, the events after cursor of the
// follower's types (merged in log order) and, unless there are more to
// read at once, sets the watches that wake it for the next.
func (f *follower) read(ctx context.Context, cursor Cursor) (*followRead, error) {
	q := f.q
	per := max(f.o.Batch/max(len(f.types), 1), 16)
	r, err := kv.Transact(ctx, q.db, func(tx kv.Tx) (*followRead, error) {
		r := &followRead{}
		from := cursor
		// A cursor past every change the store has committed comes from
		// another store or from before a restore: what is logged from now
		// on would sort before it and never be read.
		rv, err := tx.ReadVersion()
		if err != nil {
			return nil, err
		}
		if now := cursorAt(rv); from.compare(now) > 0 {
			r.reset = fmt.Sprintf("the cursor %s is past every change of this store (at %s)", cursor, now)
			r.resetTo = now
			return r, nil
		}
		for _, t := range f.types {
			b, err := tx.Get(q.k.eventsFloor(t))
			if err != nil {
				return nil, err
			}
			if fl := decodeFloor(b); fl.compare(from) > 0 {
				if r.reset == "" {
					r.reset = fmt.Sprintf("the event log of type %s may miss changes after %s (kept from %s)", t, cursor, fl)
				}
				from = fl
			}
		}
		if r.reset != "" {
			r.resetTo = from
		}
		// The merge is complete up to the earliest last position of the
		// types whose read was cut by the limit.
		var cut *Cursor
		type read struct {
			typ string
			kvs []kv.KeyValue
		}
		var reads []read
		for _, t := range f.types {
			sub := q.k.events(t)
			begin := append(q.k.eventKey(t, from), 0)
			kvs, err := tx.Snapshot().GetRange(kv.Range{Begin: begin, End: sub.Range().End}, kv.RangeOptions{Limit: per})
			if err != nil {
				return nil, err
			}
			if len(kvs) == per {
				r.more = true
				if last, ok := q.k.parseEventKey(t, kvs[len(kvs)-1].Key); ok && (cut == nil || last.compare(*cut) < 0) {
					cut = &last
				}
			}
			reads = append(reads, read{t, kvs})
		}
		r.advance = from
		for _, rd := range reads {
			for _, e := range rd.kvs {
				ev, err := q.decodeEvent(rd.typ, e)
				if ev.Cursor.IsZero() || (cut != nil && ev.Cursor.compare(*cut) > 0) {
					continue
				}
				if err != nil {
					q.logger().Warn("fdbq: an event of the log does not decode; skipped", "type", rd.typ, "key", fmt.Sprintf("%q", e.Key), "err", err)
					if ev.Cursor.compare(r.advance) > 0 {
						r.advance = ev.Cursor
					}
					continue
				}
				r.events = append(r.events, ev)
			}
		}
		sort.Slice(r.events, func(i, j int) bool { return r.events[i].Cursor.compare(r.events[j].Cursor) < 0 })
		if r.reset != "" || r.more {
			return r, nil
		}
		if f.all {
			names, err := q.typeNamesTx(tx)
			if err != nil {
				return nil, err
			}
			for _, n := range names {
				if _, ok := f.holds[n]; !ok {
					r.newTypes = append(r.newTypes, n)
				}
			}
			if len(r.newTypes) > 0 {
				return r, nil
			}
			r.watches = append(r.watches, tx.Watch(q.k.registry()))
		}
		for _, t := range f.types {
			r.watches = append(r.watches, tx.Watch(q.k.change(t)))
		}
		return r, nil
	})
	if err != nil {
		return nil, err
	}
	if len(r.newTypes) > 0 {
		if err := f.hold(ctx, r.newTypes); err != nil {
			return nil, err
		}
		// The new types' logs begin now: read again, which finds their
		// floors above the cursor and resets.
		r.more = true
	}
	return r, nil
}

// wait blocks until one of r's watches fires (true), a hold is due for
// renewal (renewed, true), Idle passed since lastEvent (false), or ctx
// ends.
func (f *follower) wait(ctx context.Context, r *followRead, lastEvent time.Time) (bool, error) {
	fired, stop := anyReady(r.watches)
	defer stop()
	renewIn := time.Duration(math.MaxInt64)
	for _, h := range f.holds {
		renewIn = min(renewIn, h.renewIn())
	}
	renew := time.NewTimer(max(renewIn, time.Millisecond))
	defer renew.Stop()
	var idle <-chan time.Time
	if f.o.Idle > 0 {
		t := time.NewTimer(max(time.Until(lastEvent.Add(f.o.Idle)), time.Millisecond))
		defer t.Stop()
		idle = t.C
	}
	select {
	case <-fired:
		return true, nil
	case <-renew.C:
		hs := make([]*interestHold, 0, len(f.holds))
		for _, h := range f.holds {
			hs = append(hs, h)
		}
		if _, err := f.q.renewInterests(ctx, hs); err != nil {
			return false, err
		}
		return true, nil
	case <-idle:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// eventsBatch is how many events one trim transaction reads.
const eventsBatch = 1000

// firstEventAt returns when the oldest event of typ's log was written
// (ok false: the log is empty; an entry that does not decode counts as
// written at 0).
func (q *Queue) firstEventAt(tx kv.ReadTx, typ string) (int64, bool, error) {
	kvs, err := tx.GetRange(q.k.events(typ).Range(), kv.RangeOptions{Limit: 1})
	if err != nil || len(kvs) == 0 {
		return 0, false, err
	}
	ev, err := q.decodeEvent(typ, kvs[0])
	if err != nil {
		return 0, true, nil
	}
	return ev.At.UnixMilli(), true, nil
}

// trimEvents clears the events of typ's log written before now less
// retention (and entries that do not decode among them), oldest first,
// and raises the log's floor to the last one cleared.
func (q *Queue) trimEvents(ctx context.Context, typ string, retention time.Duration) error {
	for {
		n, err := kv.Transact(ctx, q.db, func(tx kv.Tx) (int, error) {
			cut := q.nowMs() - retention.Milliseconds()
			sub := q.k.events(typ)
			kvs, err := tx.Snapshot().GetRange(sub.Range(), kv.RangeOptions{Limit: eventsBatch})
			if err != nil {
				return 0, err
			}
			last := -1
			for i, e := range kvs {
				if ev, err := q.decodeEvent(typ, e); err == nil && ev.At.UnixMilli() >= cut {
					break
				}
				last = i
			}
			if last < 0 {
				return 0, nil
			}
			end := kvs[last].Key
			tx.ClearRange(kv.Range{Begin: sub.Range().Begin, End: append(slices.Clip(end), 0)})
			if c, ok := q.k.parseEventKey(typ, end); ok {
				b, err := tx.Get(q.k.eventsFloor(typ))
				if err != nil {
					return 0, err
				}
				if c.compare(decodeFloor(b)) > 0 {
					tx.Set(q.k.eventsFloor(typ), encodeFloor(c))
				}
			}
			return last + 1, nil
		})
		if err != nil || n < eventsBatch {
			return err
		}
	}
}
