package fdbq

import (
	"context"
	"encoding/base64"
	"errors"
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
	// Unreadable are the page's index entries whose job could not be read:
	// a record that does not decode, or a key that is not one fdbq writes.
	// They are not in Jobs, and the listing goes on past them.
	Unreadable []Unreadable
	// Next is the cursor of the next page; empty when this is the last.
	Next string
}

// List returns jobs of a type in a state, a page at a time, in index order:
// pending by priority then scheduled time, running by activity deadline,
// finished by finish time. Each page is one read of the index and of the
// page's records, so listing a large queue never holds it in memory. An
// entry whose job cannot be read is reported in Page.Unreadable, in the
// page whose limit counts it, and the listing goes on with the rest.
func (q *Queue) List(ctx context.Context, tr kv.ReadTransactor, typ string, o ListOptions) (*Page, error) {
	if err := checkName("type name", typ); err != nil {
		return nil, err
	}
	switch o.State {
	case Pending, Running, Finished:
	default:
		return nil, fmt.Errorf("%w: list: unknown state %q", ErrInvalidJob, o.State)
	}
	sub := q.index(typ, o.State)
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
			id, ok := q.entryID(typ, o.State, e.Key)
			if !ok {
				page.Unreadable = append(page.Unreadable, Unreadable{Key: e.Key,
					Err: corrupt(fmt.Errorf("fdbq: malformed %s index entry %q", o.State, e.Key))})
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

// index is the type's index of jobs in state s.
func (q *Queue) index(typ string, s State) tuple.Subspace {
	switch s {
	case Pending:
		return q.k.pendingType(typ)
	case Running:
		return q.k.activeType(typ)
	}
	return q.k.finishedType(typ)
}

// entryID reads the job id of an entry of the type's index of state s, or
// reports false when the key is not one fdbq writes.
func (q *Queue) entryID(typ string, s State, key []byte) (string, bool) {
	switch s {
	case Pending:
		_, _, id, err := q.parsePending(typ, key)
		return id, err == nil
	case Running:
		_, id, ok := parseIndexEntry(q.k.activeType(typ), key)
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
