package fdbq

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// Get returns a job.
func (q *Queue) Get(ctx context.Context, tr kv.ReadTransactor, typ, id string) (*Job, error) {
	if err := checkJobRef(typ, id); err != nil {
		return nil, err
	}
	return kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) (*Job, error) {
		rec, err := q.loadExisting(tx, typ, id)
		if err != nil {
			return nil, err
		}
		return rec.job(typ, id), nil
	})
}

// Count returns how many jobs of a type are in a state; O(1).
func (q *Queue) Count(ctx context.Context, tr kv.ReadTransactor, typ string, s State) (int64, error) {
	if err := checkName("type name", typ); err != nil {
		return 0, err
	}
	switch s {
	case Pending, Running, Finished:
	default:
		return 0, errorf(ErrInvalidJob, "count: unknown state %q", s)
	}
	return kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) (int64, error) {
		return q.countOf(snapshotOf(tx), typ, s)
	})
}

// countOf sums the keys of the count of typ in state s (see countShards).
func (q *Queue) countOf(tx kv.ReadTx, typ string, s State) (int64, error) {
	kvs, err := tx.GetRange(q.k.countRange(typ, s), kv.RangeOptions{})
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range kvs {
		n += kv.DecodeInt64(e.Value)
	}
	return n, nil
}

// ListOptions select a page of jobs.
//
// Key, IDPrefix, Since and Until filter the listing: it lists the jobs
// that match every filter set, in the order List gives without them. A
// page of a filtered listing reads a bounded part of the index (see
// List), so it may hold fewer jobs than Limit, or none, and still have
// Next set: a listing ends when Next is empty, not at a short page.
type ListOptions struct {
	State State // required
	Limit int   // default 100, at most 1000
	// Cursor is the previous Page's Next, of a listing of the same type,
	// state and filters (another's is refused); empty: the first page.
	Cursor string
	// Key lists the jobs of this fairness key only (Job.Key, exactly);
	// "": any key, or none. Checked as ValidateKey checks a key.
	Key string
	// IDPrefix lists the jobs whose id begins with it (bytes, exactly);
	// "": any id. Checked by ValidateIDPrefix.
	IDPrefix string
	// Since and Until bound the time the state's index orders by, or
	// the job's time in that state: a pending job's ScheduledAt, a
	// running job's StartedAt (when its current attempt started), a
	// finished job's FinishedAt. A job is listed when Since <= that time
	// < Until, compared at the millisecond the store keeps times at.
	// Zero: no bound. Since after Until is refused; Since equal to Until
	// lists nothing.
	Since, Until time.Time
}

// Page is one page of a listing.
type Page struct {
	Jobs []*Job
	// Unreadable are the page's index entries whose job could not be read:
	// a record that does not decode, or a key that is not one fdbq writes.
	// They are not in Jobs, and the listing goes on past them. A filtered
	// listing reports those that what it can read of them does not
	// exclude (by its id, or by its key or time when the index holds it).
	Unreadable []Unreadable
	// Next is the cursor of the next page; empty when this is the last.
	// A filtered page may be short, or empty, with Next set.
	Next string
}

// listScan bounds the index entries a page of a filtered listing
// examines, and so the records it reads (see List). A variable for tests.
var listScan = 1000

// List returns jobs of a type in a state, a page at a time, in index order:
// pending first those indexed as due (by zone, then priority, then
// scheduled time), then those scheduled for later (by scheduled time, then
// priority); running by lane (a hash of the id, see the package doc), then
// the activity timeout their last renewal gave them, then when it was
// (those running since before version-keyed entries first, by deadline);
// finished by finish time, then id (a read of each of the finished
// index's lanes, merged). Each page is a bounded read of each index it
// reaches and of the page's records, so listing a large queue never holds
// it in memory. An entry whose job cannot be read is reported in
// Page.Unreadable, in the page whose limit counts it, and the listing goes
// on with the rest.
//
// Filters (ListOptions) use the index's order where it has one for them:
// Key reads only the key's zones of the ready index (pending jobs due);
// Since and Until read only that time range of the scheduled index
// (pending jobs not yet due) and of each lane of the finished index. The
// rest is checked entry by entry: the id from the entry's key, a pending
// job's key and scheduled time from its entry's key, a running job's key
// and start and a finished job's key from its record. A page that checks
// entries examines at most 1,000 index entries after its cursor (and one
// more, to tell whether there are any), and reads the records of at most
// as many jobs; of the finished index, whose 16 lanes and the ranges
// before and after them it merges, at most 55 entries of each of those
// 18 ranges. So a filter that matches few jobs of many gives short
// pages, or empty ones, with Next set, and the listing moves on by at
// least one entry a page. A finished listing filtered by time alone
// reads as an unfiltered one, its pages full. Validation, before any
// read: ValidateKey and ValidateIDPrefix rules, Since not after Until, and
// a cursor made by a listing of this type and state with the same filters
// (a cursor holds a digest of them); each refusal is ErrInvalidJob
// naming the problem.
func (q *Queue) List(ctx context.Context, tr kv.ReadTransactor, typ string, o ListOptions) (*Page, error) {
	if err := checkName("type name", typ); err != nil {
		return nil, err
	}
	subs, arity, err := q.listIndexes(typ, o.State)
	if err != nil {
		return nil, err
	}
	f, err := listFilterOf(o)
	if err != nil {
		return nil, err
	}
	pos, err := f.position(o.Cursor, typ, o.State)
	if err != nil {
		return nil, err
	}
	limit := o.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	if o.State == Finished {
		return q.listFinished(ctx, tr, typ, limit, f, pos)
	}
	ranges := make([]kv.Range, len(subs))
	for i, sub := range subs {
		ranges[i] = f.rangeOf(q.k.root, typ, arity[i], sub)
	}
	if pos != "" {
		after, err := base64.RawURLEncoding.DecodeString(pos)
		i := slices.IndexFunc(subs, func(sub tuple.Subspace) bool { return sub.Contains(after) })
		if err != nil || i < 0 {
			return nil, errorf(ErrInvalidJob, "list: bad cursor")
		}
		subs, arity, ranges = subs[i:], arity[i:], ranges[i:]
		if b := kv.KeyAfter(after); bytes.Compare(b, ranges[0].Begin) > 0 {
			ranges[0].Begin = b
		}
	}
	// scan: the entries the page may examine. Unfiltered, every entry
	// takes a place, and the page examines one past its limit to tell
	// whether there are more.
	scan := limit + 1
	if f.set() {
		scan = max(listScan, limit) + 1
	}
	return kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) (*Page, error) {
		snap := snapshotOf(tx)
		page := &Page{}
		places, examined := 0, 0
		var last []byte // the last entry examined
		batch := limit + 1
		for i, r := range ranges {
			for bytes.Compare(r.Begin, r.End) < 0 {
				if examined == scan {
					// The bound: what follows is for the next page.
					page.Next = f.cursor(base64.RawURLEncoding.EncodeToString(last), typ, o.State)
					return page, nil
				}
				want := min(batch, scan-examined)
				batch *= 2
				kvs, err := snap.GetRange(r, kv.RangeOptions{Limit: want})
				if err != nil {
					return nil, err
				}
				for _, e := range kvs {
					if places == limit && !f.set() {
						page.Next = f.cursor(base64.RawURLEncoding.EncodeToString(last), typ, o.State)
						return page, nil
					}
					j, bad, err := q.listEntry(snap, typ, o.State, subs[i], arity[i], e.Key, f)
					if err != nil {
						return nil, err
					}
					if j != nil || bad != nil {
						if places == limit {
							// A place past the page: there are more.
							page.Next = f.cursor(base64.RawURLEncoding.EncodeToString(last), typ, o.State)
							return page, nil
						}
						places++
						if j != nil {
							page.Jobs = append(page.Jobs, j)
						} else {
							page.Unreadable = append(page.Unreadable, *bad)
						}
					}
					examined++
					last = e.Key
				}
				if len(kvs) < want {
					break
				}
				r.Begin = kv.KeyAfter(last)
			}
		}
		return page, nil
	})
}

// listEntry is what a listing makes of an index entry of state s (in sub,
// of the given shape): its job, when it matches f; an Unreadable, when
// the job cannot be read and what can be read of it does not exclude it;
// else neither.
func (q *Queue) listEntry(tx kv.ReadTx, typ string, s State, sub tuple.Subspace, shape string, key []byte, f *listFilter) (*Job, *Unreadable, error) {
	id, ok := entryIDIn(sub, shape, key)
	if !ok {
		return nil, &Unreadable{Key: key, Err: corruptf("malformed %s index entry %q", s, key)}, nil
	}
	if !strings.HasPrefix(id, f.idPrefix) {
		return nil, nil, nil
	}
	if f.key != "" || f.timed() {
		// A pending entry's key holds the job's key and scheduled time.
		var z zone
		var sched int64
		switch shape {
		case shapeReady:
			z, _, sched, _, ok = q.k.parsePending(typ, key)
		case shapeScheduled:
			z, _, sched, _, ok = q.k.parseScheduled(typ, key)
		default:
			ok = false
		}
		if ok && !f.matches(z.key, sched) {
			return nil, nil, nil
		}
	}
	rec, err := q.load(tx, typ, id)
	if errors.Is(err, ErrCorrupt) {
		return nil, &Unreadable{ID: id, Key: key, Err: err}, nil
	}
	if err != nil || rec == nil {
		return nil, nil, err
	}
	if !f.matches(rec.Key, rec.timeIn(s)) {
		return nil, nil, nil
	}
	return rec.job(typ, id), nil, nil
}

// timeIn is the job's time that a listing of state s filters by
// (ListOptions.Since).
func (r *record) timeIn(s State) int64 {
	switch s {
	case Pending:
		return r.ScheduledAt
	case Running:
		return r.StartedAt
	}
	return r.FinishedAt
}

// The shapes of the keys of a type's indexes after the index's prefix,
// an element a letter: 'i' an integer (a time, priority, version or
// shard), 's' a string (a fairness key), the id last (see entryIDIn).
const (
	shapeReady     = "siiis" // key, shard, -priority, scheduled, id
	shapeScheduled = "iisis" // scheduled, -priority, key, shard, id
	shapeActive    = "iiis"  // lane, timeout, read version, id
	shapeByTime    = "is"    // time, id
	shapeFinished  = "iis"   // lane, time, id
)

// listIndexes returns the indexes a listing of a type's jobs in state s
// reads in turn, in the order List gives, and the shape of each one's
// keys (see entryIDIn).
func (q *Queue) listIndexes(typ string, s State) ([]tuple.Subspace, []string, error) {
	switch s {
	case Pending:
		return []tuple.Subspace{q.k.pendingType(typ), q.k.scheduledType(typ)}, []string{shapeReady, shapeScheduled}, nil
	case Running:
		// Running jobs of an earlier version have entries of their own
		// until a sweep moves them.
		return []tuple.Subspace{q.k.legacyActiveType(typ), q.k.activeType(typ)}, []string{shapeByTime, shapeActive}, nil
	case Finished:
		return []tuple.Subspace{q.k.finishedType(typ)}, []string{shapeFinished}, nil
	}
	return nil, nil, errorf(ErrInvalidJob, "list: unknown state %q", s)
}

// entryIDIn reads the job id of an entry of a type's index sub, whose keys
// have the given shape after its prefix, or reports false when the key is
// not one fdbq writes there.
func entryIDIn(sub tuple.Subspace, shape string, key []byte) (string, bool) {
	t, err := sub.Unpack(key)
	if err != nil || len(t) != len(shape) {
		return "", false
	}
	for i, e := range t[:len(t)-1] {
		var ok bool
		if shape[i] == 's' {
			_, ok = e.(string)
		} else {
			_, ok = e.(int64)
		}
		if !ok {
			return "", false
		}
	}
	id, ok := t[len(t)-1].(string)
	return id, ok
}

// entryID reads the job id of an entry of the type's index of state s, or
// reports false when the key is not one fdbq writes.
func (q *Queue) entryID(typ string, s State, key []byte) (string, bool) {
	switch s {
	case Pending:
		if _, _, _, id, err := q.parsePending(typ, key); err == nil {
			return id, true
		}
		_, _, _, id, err := q.parseScheduled(typ, key)
		return id, err == nil
	case Running:
		if t, err := q.k.activeType(typ).Unpack(key); err == nil {
			// (lane, timeout, read version, id)
			if len(t) != 4 {
				return "", false
			}
			lane, ok0 := t[0].(int64)
			_, ok1 := t[1].(int64)
			_, ok2 := t[2].(int64)
			id, ok3 := t[3].(string)
			return id, ok0 && ok1 && ok2 && ok3 && lane == int64(laneOf(id))
		}
		_, id, ok := parseIndexEntry(q.k.legacyActiveType(typ), key)
		return id, ok
	case Finished:
		_, id, ok := parseFinished(q.k.finishedType(typ), key)
		return id, ok
	}
	return "", false
}

// snapshotOf returns the snapshot view of tx when it has one: reads for
// inspection should not make a caller's transaction conflict.
func snapshotOf(tx kv.ReadTx) kv.ReadTx {
	if t, ok := tx.(kv.Tx); ok {
		return t.Snapshot()
	}
	return tx
}

// parseFinished reads a finished entry of a type (sub its finished
// index): (lane, finished_ms, id), the lane being the id's.
func parseFinished(sub tuple.Subspace, key []byte) (at int64, id string, ok bool) {
	t, err := sub.Unpack(key)
	if err != nil || len(t) != 3 {
		return 0, "", false
	}
	lane, ok0 := t[0].(int64)
	at, ok1 := t[1].(int64)
	id, ok2 := t[2].(string)
	return at, id, ok0 && ok1 && ok2 && lane == int64(laneOf(id))
}

// listFinished is List of the finished jobs: the entries of every lane,
// merged in the order of (finish time, id). A key of the index that is no
// entry (malformed, in the wrong lane, or outside every lane) takes the
// place of the last entry before it in its lane (first, with none): so
// each lane's keys are in the merged order as they are in the lane.
//
// A page reads at most per keys of each range after the cursor's place
// (limit+1, or with a key or id prefix filter listScan/18), merges them,
// and examines them in order up to the cut: the least of the last keys
// read of the ranges it did not read to their end, up to which it read
// every key. Unfiltered, or filtered by time alone (each lane's range is
// cut to it), every key takes a place, and limit+1 of each range hold the
// first limit+1 of the merge.
func (q *Queue) listFinished(ctx context.Context, tr kv.ReadTransactor, typ string, limit int, f *listFilter, cursor string) (*Page, error) {
	sub := q.k.finishedType(typ)
	// The index's keys in 18 ranges: before lane 0, the lanes, after the
	// last lane (the lanes' ranges are adjacent).
	ranges := make([]kv.Range, activityLanes+2)
	ranges[0] = kv.Range{Begin: sub.Range().Begin, End: q.k.finishedLane(typ, 0).Range().Begin}
	for lane := range activityLanes {
		ranges[lane+1] = f.timeRange(q.k.finishedLane(typ, lane))
	}
	ranges[activityLanes+1] = kv.Range{Begin: q.k.finishedLane(typ, activityLanes-1).Range().End, End: sub.Range().End}
	if f.timed() {
		// Keys outside every lane have no time: outside every bound.
		ranges[0].End = ranges[0].Begin
		ranges[activityLanes+1].Begin = ranges[activityLanes+1].End
	}
	per := limit + 1
	if f.perEntry() {
		per = max(1, listScan/len(ranges))
	}
	type place struct {
		some bool // false: before every entry
		at   int64
		id   string
	}
	type item struct {
		place
		r   int // of ranges
		key []byte
		ok  bool // an entry
	}
	less := func(a, b item) int {
		switch {
		case a.some != b.some:
			if a.some {
				return 1
			}
			return -1
		case a.some && a.at != b.at:
			return cmp.Compare(a.at, b.at)
		case a.some && a.id != b.id:
			return strings.Compare(a.id, b.id)
		case a.r != b.r:
			return cmp.Compare(a.r, b.r)
		}
		return bytes.Compare(a.key, b.key)
	}
	var after *item
	if cursor != "" {
		c, err := decodeListCursor(cursor)
		if err != nil || c.r < 0 || c.r >= len(ranges) || !rangeHas(ranges[c.r], c.key) {
			return nil, errorf(ErrInvalidJob, "list: bad cursor")
		}
		after = &item{place: place{c.some, c.at, c.id}, r: c.r, key: c.key}
	}
	cursorOf := func(it item) string {
		return f.cursor(encodeListCursor(listCursor{r: it.r, key: it.key, some: it.some, at: it.at, id: it.id}), typ, Finished)
	}
	return kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) (*Page, error) {
		snap := snapshotOf(tx)
		var items []item
		var cut *item // nil: every range read to its end
		for ri, r := range ranges {
			prev := place{}
			// skip: the keys before the range's first entry after the
			// cursor's place, which come before that place.
			skip := false
			if after != nil {
				switch {
				case ri == after.r:
					r.Begin, prev = later(r.Begin, kv.KeyAfter(after.key)), after.place
				case after.some:
					if ri == 0 || ri == len(ranges)-1 {
						continue // no entries: every key is before the cursor's place
					}
					r.Begin = later(r.Begin, kv.KeyAfter(q.k.finishedLane(typ, ri-1).MustPack(tuple.Tuple{after.at, after.id})))
					skip = true
				default:
					skip = ri < after.r
				}
			}
			var got []item
			for len(got) < per && bytes.Compare(r.Begin, r.End) < 0 {
				want := per - len(got)
				kvs, err := snap.GetRange(r, kv.RangeOptions{Limit: want})
				if err != nil {
					return nil, err
				}
				for _, e := range kvs {
					it := item{r: ri, key: e.Key}
					if at, id, ok := parseFinished(sub, e.Key); ok && ri > 0 && ri <= activityLanes {
						prev, it.ok, skip = place{true, at, id}, true, false
					}
					if !skip {
						it.place = prev
						got = append(got, it)
					}
				}
				if len(kvs) < want {
					break
				}
				r.Begin = kv.KeyAfter(kvs[len(kvs)-1].Key)
			}
			if len(got) == per {
				if last := got[per-1]; cut == nil || less(last, *cut) < 0 {
					cut = &last
				}
			}
			items = append(items, got...)
		}
		slices.SortFunc(items, less)
		if cut != nil {
			items = items[:slices.IndexFunc(items, func(it item) bool { return less(it, *cut) == 0 })+1]
		}
		page := &Page{}
		places := 0
		for i, it := range items {
			if places == limit && !f.set() {
				page.Next = cursorOf(items[i-1])
				return page, nil
			}
			j, bad, err := q.listFinishedItem(snap, typ, it.key, it.ok, it.at, it.id, f)
			if err != nil {
				return nil, err
			}
			if j == nil && bad == nil {
				continue
			}
			if places == limit {
				page.Next = cursorOf(items[i-1])
				return page, nil
			}
			places++
			if j != nil {
				page.Jobs = append(page.Jobs, j)
			} else {
				page.Unreadable = append(page.Unreadable, *bad)
			}
		}
		if cut != nil {
			page.Next = cursorOf(*cut)
		}
		return page, nil
	})
}

// listFinishedItem is listEntry for a key of the finished index: an
// entry (ok) of the job id that finished at at (ms), or a key that is
// none.
func (q *Queue) listFinishedItem(tx kv.ReadTx, typ string, key []byte, ok bool, at int64, id string, f *listFilter) (*Job, *Unreadable, error) {
	if !ok {
		return nil, &Unreadable{Key: key, Err: corruptf("malformed %s index entry %q", Finished, key)}, nil
	}
	if !strings.HasPrefix(id, f.idPrefix) || !f.timeIn(at) {
		return nil, nil, nil
	}
	rec, err := q.load(tx, typ, id)
	if errors.Is(err, ErrCorrupt) {
		return nil, &Unreadable{ID: id, Key: key, Err: err}, nil
	}
	if err != nil || rec == nil {
		return nil, nil, err
	}
	if f.key != "" && rec.Key != f.key {
		return nil, nil, nil
	}
	return rec.job(typ, id), nil, nil
}

// later is the later of two keys.
func later(a, b []byte) []byte {
	if bytes.Compare(a, b) < 0 {
		return b
	}
	return a
}

// listCursor is where a listing of finished jobs stopped: its last key,
// the range of the index it is in, and the place it took (see
// listFinished).
type listCursor struct {
	r    int
	key  []byte
	some bool
	at   int64
	id   string
}

func encodeListCursor(c listCursor) string {
	return base64.RawURLEncoding.EncodeToString(tuple.Tuple{int64(c.r), c.key, c.some, c.at, c.id}.MustPack())
}

func decodeListCursor(s string) (listCursor, error) {
	var c listCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return c, err
	}
	t, err := tuple.Unpack(b)
	if err != nil {
		return c, err
	}
	if len(t) != 5 {
		return c, errors.New("not a cursor")
	}
	r, ok1 := t[0].(int64)
	key, ok2 := t[1].([]byte)
	some, ok3 := t[2].(bool)
	at, ok4 := t[3].(int64)
	id, ok5 := t[4].(string)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || r > math.MaxInt32 {
		return c, errors.New("not a cursor")
	}
	return listCursor{r: int(r), key: key, some: some, at: at, id: id}, nil
}

// rangeHas reports whether key is in r.
func rangeHas(r kv.Range, key []byte) bool {
	return bytes.Compare(key, r.Begin) >= 0 && bytes.Compare(key, r.End) < 0
}
