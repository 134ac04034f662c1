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
type ListOptions struct {
	State  State  // required
	Limit  int    // default 100, at most 1000
	Cursor string // from the previous Page; empty: the first page
}

// Page is one page of a listing.
type Page struct {
	Jobs []*Job
	// Unreadable are the page's index entries whose job could not be read:
	// a record that does not decode, or a key that is not one fdbq writes.
	// They are not in Jobs, and the listing goes on past them.
	Unreadable []Unreadable
	// Next is the cursor of the next page; empty when this is the last.
	Next string
}

// List returns jobs of a type in a state, a page at a time, in index order:
// pending first those indexed as due (by zone, then priority, then
// scheduled time), then those scheduled for later (by scheduled time, then
// priority); running by lane (a hash of the id, see the package doc), then
// the activity timeout their last renewal gave them, then when it was
// (those running since before version-keyed entries first, by deadline);
// finished by finish time, then id (a read of each of the finished
// index's lanes, merged). Each page is one read of each index it reaches
// it reaches and of the page's records, so listing a large queue never
// holds it in memory. An entry whose job cannot be read is reported in
// Page.Unreadable, in the page whose limit counts it, and the listing goes
// on with the rest.
func (q *Queue) List(ctx context.Context, tr kv.ReadTransactor, typ string, o ListOptions) (*Page, error) {
	if err := checkName("type name", typ); err != nil {
		return nil, err
	}
	subs, arity, err := q.listIndexes(typ, o.State)
	if err != nil {
		return nil, err
	}
	limit := o.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	if o.State == Finished {
		return q.listFinished(ctx, tr, typ, limit, o.Cursor)
	}
	ranges := make([]kv.Range, len(subs))
	for i, sub := range subs {
		ranges[i] = sub.Range()
	}
	if o.Cursor != "" {
		after, err := base64.RawURLEncoding.DecodeString(o.Cursor)
		i := slices.IndexFunc(subs, func(sub tuple.Subspace) bool { return sub.Contains(after) })
		if err != nil || i < 0 {
			return nil, errorf(ErrInvalidJob, "list: bad cursor")
		}
		subs, arity, ranges = subs[i:], arity[i:], ranges[i:]
		ranges[0].Begin = kv.KeyAfter(after)
	}
	return kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) (*Page, error) {
		snap := snapshotOf(tx)
		var kvs []kv.KeyValue
		var of []int // the index of each of kvs
		for i, r := range ranges {
			if len(kvs) > limit {
				break
			}
			got, err := snap.GetRange(r, kv.RangeOptions{Limit: limit + 1 - len(kvs)})
			if err != nil {
				return nil, err
			}
			kvs = append(kvs, got...)
			for range got {
				of = append(of, i)
			}
		}
		page := &Page{}
		if len(kvs) > limit {
			kvs = kvs[:limit]
			page.Next = base64.RawURLEncoding.EncodeToString(kvs[len(kvs)-1].Key)
		}
		for i, e := range kvs {
			id, ok := entryIDIn(subs[of[i]], arity[of[i]], e.Key)
			if !ok {
				page.Unreadable = append(page.Unreadable, Unreadable{Key: e.Key,
					Err: corruptf("malformed %s index entry %q", o.State, e.Key)})
				continue
			}
			rec, err := q.load(snap, typ, id)
			if errors.Is(err, ErrCorrupt) {
				page.Unreadable = append(page.Unreadable, Unreadable{ID: id, Key: e.Key, Err: err})
				continue
			}
			if err != nil {
				return nil, err
			}
			if rec == nil {
				continue
			}
			page.Jobs = append(page.Jobs, rec.job(typ, id))
		}
		return page, nil
	})
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
// each lane's keys are in the merged order as they are in the lane, and a
// page reads at most limit+1 keys of each after the cursor's place.
func (q *Queue) listFinished(ctx context.Context, tr kv.ReadTransactor, typ string, limit int, cursor string) (*Page, error) {
	sub := q.k.finishedType(typ)
	// The index's keys in 18 ranges: before lane 0, the lanes, after the
	// last lane (the lanes' ranges are adjacent).
	ranges := make([]kv.Range, activityLanes+2)
	ranges[0] = kv.Range{Begin: sub.Range().Begin, End: q.k.finishedLane(typ, 0).Range().Begin}
	for lane := range activityLanes {
		ranges[lane+1] = q.k.finishedLane(typ, lane).Range()
	}
	ranges[activityLanes+1] = kv.Range{Begin: q.k.finishedLane(typ, activityLanes-1).Range().End, End: sub.Range().End}
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
	return kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) (*Page, error) {
		snap := snapshotOf(tx)
		var items []item
		for ri, r := range ranges {
			prev := place{}
			// skip: the keys before the range's first entry after the
			// cursor's place, which come before that place.
			skip := false
			if after != nil {
				switch {
				case ri == after.r:
					r.Begin, prev = kv.KeyAfter(after.key), after.place
				case after.some:
					if ri == 0 || ri == len(ranges)-1 {
						continue // no entries: every key is before the cursor's place
					}
					r.Begin = kv.KeyAfter(q.k.finishedLane(typ, ri-1).MustPack(tuple.Tuple{after.at, after.id}))
					skip = true
				default:
					skip = ri < after.r
				}
			}
			var got []item
			for len(got) <= limit {
				want := limit + 1 - len(got)
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
			items = append(items, got...)
		}
		slices.SortFunc(items, less)
		page := &Page{}
		if len(items) > limit {
			items = items[:limit]
			last := items[limit-1]
			page.Next = encodeListCursor(listCursor{r: last.r, key: last.key, some: last.some, at: last.at, id: last.id})
		}
		for _, it := range items {
			if !it.ok {
				page.Unreadable = append(page.Unreadable, Unreadable{Key: it.key,
					Err: corruptf("malformed %s index entry %q", Finished, it.key)})
				continue
			}
			rec, err := q.load(snap, typ, it.id)
			if errors.Is(err, ErrCorrupt) {
				page.Unreadable = append(page.Unreadable, Unreadable{ID: it.id, Key: it.key, Err: err})
				continue
			}
			if err != nil {
				return nil, err
			}
			if rec != nil {
				page.Jobs = append(page.Jobs, rec.job(typ, it.id))
			}
		}
		return page, nil
	})
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
