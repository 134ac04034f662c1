package fdbq

import (
	"context"
	"encoding/base64"
	"fmt"

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
// pending by priority then scheduled time, running by activity deadline,
// finished by finish time. Each page is one read of the index and of the
// page's records, so listing a large queue never holds it in memory.
func (q *Queue) List(ctx context.Context, tr kv.ReadTransactor, typ string, o ListOptions) (*Page, error) {
	if err := checkName("type name", typ); err != nil {
		return nil, err
	}
	var sub tuple.Subspace
	switch o.State {
	case Pending:
		sub = q.k.pendingType(typ)
	case Running:
		sub = q.k.activeType(typ)
	case Finished:
		sub = q.k.finishedType(typ)
	default:
		return nil, fmt.Errorf("%w: list: unknown state %q", ErrInvalidJob, o.State)
	}
	limit := o.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	r := sub.Range()
	if o.Cursor != "" {
		after, err := base64.RawURLEncoding.DecodeString(o.Cursor)
		if err != nil || !sub.Contains(after) {
			return nil, fmt.Errorf("%w: list: bad cursor", ErrInvalidJob)
		}
		r.Begin = kv.KeyAfter(after)
	}
	return kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) (*Page, error) {
		snap := snapshotOf(tx)
		kvs, err := snap.GetRange(r, kv.RangeOptions{Limit: limit + 1})
		if err != nil {
			return nil, err
		}
		page := &Page{}
		if len(kvs) > limit {
			kvs = kvs[:limit]
			page.Next = base64.RawURLEncoding.EncodeToString(kvs[len(kvs)-1].Key)
		}
		for _, e := range kvs {
			t, err := sub.Unpack(e.Key)
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
