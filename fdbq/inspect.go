package fdbq

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"

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
// pending first those indexed as due (by priority, then scheduled time),
// then those scheduled for later (by scheduled time, then priority);
// running by the activity timeout their last renewal gave them, then by
// when it was (those running since before version-keyed entries first, by
// deadline); finished by finish time. Each page is one read of each index
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
		return []tuple.Subspace{q.k.finishedType(typ)}, []string{shapeByTime}, nil
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
		_, id, ok := parseIndexEntry(q.k.finishedType(typ), key)
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
