package fdbq

import (
	"context"
	"encoding/base64"
	"fmt"
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
		return 0, fmt.Errorf("%w: count: unknown state %q", ErrInvalidJob, s)
	}
	return kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) (int64, error) {
		b, err := snapshotOf(tx).Get(q.k.count(typ, s))
		return kv.DecodeInt64(b), err
	})
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
	// Next is the cursor of the next page; empty when this is the last.
	Next string
}

// List returns jobs of a type in a state, a page at a time, in index order:
// pending first those indexed as due (by priority, then scheduled time),
// then those scheduled for later (by scheduled time, then priority),
// running by activity deadline, finished by finish time. Each page is one
// read of each index it reaches and of the page's records, so listing a
// large queue never holds it in memory.
func (q *Queue) List(ctx context.Context, tr kv.ReadTransactor, typ string, o ListOptions) (*Page, error) {
	if err := checkName("type name", typ); err != nil {
		return nil, err
	}
	var subs []tuple.Subspace
	switch o.State {
	case Pending:
		subs = []tuple.Subspace{q.k.pendingType(typ), q.k.scheduledType(typ)}
	case Running:
		subs = []tuple.Subspace{q.k.activeType(typ)}
	case Finished:
		subs = []tuple.Subspace{q.k.finishedType(typ)}
	default:
		return nil, fmt.Errorf("%w: list: unknown state %q", ErrInvalidJob, o.State)
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
			return nil, fmt.Errorf("%w: list: bad cursor", ErrInvalidJob)
		}
		subs, ranges = subs[i:], ranges[i:]
		ranges[0].Begin = kv.KeyAfter(after)
	}
	return kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) (*Page, error) {
		snap := snapshotOf(tx)
		var kvs []kv.KeyValue
		var of []tuple.Subspace // the index of each of kvs
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
				of = append(of, subs[i])
			}
		}
		page := &Page{}
		if len(kvs) > limit {
			kvs = kvs[:limit]
			page.Next = base64.RawURLEncoding.EncodeToString(kvs[len(kvs)-1].Key)
		}
		for i, e := range kvs {
			t, err := of[i].Unpack(e.Key)
			if err != nil {
				return nil, err
			}
			id, _ := t[len(t)-1].(string)
			rec, err := q.load(snap, typ, id)
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

// snapshotOf returns the snapshot view of tx when it has one: reads for
// inspection should not make a caller's transaction conflict.
func snapshotOf(tx kv.ReadTx) kv.ReadTx {
	if t, ok := tx.(kv.Tx); ok {
		return t.Snapshot()
	}
	return tx
}
