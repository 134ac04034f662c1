package fdbq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// Layout is the version of the data model (see the package doc) this
// fdbq reads and writes. A store keeps the version it is in at (P, 14);
// one written before that key existed is in layout 1. Layout 2 put the
// ready and scheduled indexes in zones (see Fairness in the package doc)
// and the activity index in lanes; layout 3 put the finished index in
// lanes too.
const Layout = 3

// ErrLayout: the store is in a layout this version of fdbq does not read
// or write. Detail says which layout and what to do.
var ErrLayout = errors.New("fdbq: the store's data layout is not this version's")

// CheckLayout checks that the store is in Layout, migrating it from
// layout 1 or 2 first (Migrate), and records that it is if it says nothing yet
// (a new store). A program calls it once it opens the store, before
// anything else: jobstage.Open, `jobstage serve` and the benchmark do. A
// store in a layout this version cannot read is *Error of ErrLayout, with
// nothing written; a layout key that does not decode is ErrCorrupt.
//
// It is idempotent, so a retry after commit_unknown_result, or two
// processes opening a store at once (one of them conflicts, reads the
// other's key and agrees), come to the same.
func (q *Queue) CheckLayout(ctx context.Context, tr kv.Transactor) error {
	v, err := q.layout(ctx, tr)
	if err != nil {
		return err
	}
	switch {
	case v == Layout:
		return nil
	case v > Layout:
		return errorf(ErrLayout, "the store is in layout %d, written by a newer version of jobstage; this one reads layout %d: run that version or a later one", v, Layout)
	case v == 1 || v == 2:
		_, err := q.Migrate(ctx, tr)
		return err
	default:
		return errorf(ErrLayout, "the store is in layout %d; this version reads layout %d and has no migration from it", v, Layout)
	}
}

// layout reads the store's layout version, writing Layout to a store that
// has no jobs and no version yet. A store with jobs and no version is in
// layout 1.
func (q *Queue) layout(ctx context.Context, tr kv.Transactor) (uint64, error) {
	key := q.k.root.MustPack(tuple.Tuple{tagLayout})
	return kv.Transact(ctx, tr, func(tx kv.Tx) (uint64, error) {
		b, err := tx.Get(key)
		if err != nil {
			return 0, err
		}
		if b != nil {
			if len(b) != 8 {
				return 0, corruptf("layout key %q holds %q, not a layout version", key, b)
			}
			return binary.LittleEndian.Uint64(b), nil
		}
		types, err := tx.GetRange(q.k.types().Range(), kv.RangeOptions{Limit: 1})
		if err != nil {
			return 0, err
		}
		if len(types) > 0 {
			return 1, nil
		}
		q.setLayout(tx, Layout)
		return Layout, nil
	})
}

func (q *Queue) setLayout(tx kv.Tx, v uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	tx.Set(q.k.root.MustPack(tuple.Tuple{tagLayout}), b[:])
}

// MigrateStats says what Migrate did.
type MigrateStats struct {
	From, To uint64
	// Moved is how many index entries it rewrote.
	Moved int
}

// migrateBatch bounds the entries one transaction of Migrate moves.
const migrateBatch = 500

// Migrate brings a store in layout 1 or 2 to Layout, in transactions of at
// most migrateBatch entries, and writes the layout key last: each type's
// ready and scheduled entries of layout 1, (P, 2, type, -priority,
// sched_ms, id) and (P, 11, type, sched_ms, -priority, id), move to the
// zone ("", 0) of layout 2, where records written before zones are, and
// the zones are marked; its activity entries (P, 12, type, timeout_ms,
// read_version, id) and renewal stamps (P, 13, type, read_version, token)
// move to their lanes; its finished entries of layouts 1 and 2, (P, 6,
// type, finished_ms, id), move to their lanes (layout 3). Each index is
// read whole, and keys already in the new layout are left, so a store in
// layout 2 has only its finished entries moved. An interrupted migration
// is taken up again by the next; every process of an earlier version must
// be stopped first, since those write the earlier layout's entries. A
// store already in Layout is left as it is. It logs a line when it begins and one when it is done.
func (q *Queue) Migrate(ctx context.Context, tr kv.Transactor) (MigrateStats, error) {
	v, err := q.layout(ctx, tr)
	st := MigrateStats{From: v, To: v}
	if err != nil || v == Layout {
		return st, err
	}
	if v != 1 && v != 2 {
		return st, errorf(ErrLayout, "the store is in layout %d; this version migrates from layouts 1 and 2 only", v)
	}
	types, err := kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) ([]string, error) {
		kvs, err := tx.GetRange(q.k.types().Range(), kv.RangeOptions{})
		if err != nil {
			return nil, err
		}
		var names []string
		for _, e := range kvs {
			if name, ok := parseTypeKey(q.k.types(), e.Key); ok {
				names = append(names, name)
			}
		}
		return names, nil
	})
	if err != nil {
		return st, err
	}
	what := "finished jobs into lanes"
	if v == 1 {
		what = "pending jobs into zones, running and finished ones into lanes"
	}
	q.logger().Info(fmt.Sprintf("fdbq: migrating the store from layout %d to %d (%s)", v, Layout, what), "types", len(types))
	for _, typ := range types {
		for index := range q.migrations(typ) {
			// Each transaction goes on from where the last stopped: the
			// keys it wrote sort before the ones it has yet to move
			// (their first element is a lane or a zone's key, smaller
			// than any time or version), so they are not read again; one
			// that is (an activity timeout under 16 ms) is left as the
			// new layout's.
			var from []byte
			for {
				n, next, err := q.migrateEntries(ctx, tr, typ, index, from)
				if err != nil {
					return st, err
				}
				st.Moved += n
				if next == nil {
					break
				}
				from = next
			}
		}
	}
	if err := tr.Transact(ctx, func(tx kv.Tx) error {
		q.setLayout(tx, Layout)
		return nil
	}); err != nil {
		return st, err
	}
	st.To = Layout
	q.logger().Info(fmt.Sprintf("fdbq: migrated the store to layout %d", Layout), "entries", st.Moved)
	return st, nil
}

// migrations are the keys of earlier layouts that Layout keys otherwise,
// by index: each turns such a key, as the tuple after the index's prefix,
// into the key of Layout, or reports false for a key that is not an
// earlier layout's (Layout's, or not one fdbq writes).
func (q *Queue) migrations(typ string) []struct {
	sub     tuple.Subspace
	convert func(t tuple.Tuple) ([]byte, bool)
} {
	ints := func(t tuple.Tuple, n int) ([]int64, bool) {
		out := make([]int64, n)
		for i := range n {
			v, ok := t[i].(int64)
			if !ok {
				return nil, false
			}
			out[i] = v
		}
		return out, true
	}
	withID := func(t tuple.Tuple) ([]int64, string, bool) {
		if len(t) != 3 {
			return nil, "", false
		}
		v, ok := ints(t, 2)
		id, ok2 := t[2].(string)
		return v, id, ok && ok2
	}
	return []struct {
		sub     tuple.Subspace
		convert func(t tuple.Tuple) ([]byte, bool)
	}{
		{q.k.pendingType(typ), func(t tuple.Tuple) ([]byte, bool) { // (-priority, sched, id)
			v, id, ok := withID(t)
			if !ok || v[0] == math.MinInt64 {
				return nil, false
			}
			return q.k.pending(typ, zone{}, int(-v[0]), v[1], id), true
		}},
		{q.k.scheduledType(typ), func(t tuple.Tuple) ([]byte, bool) { // (sched, -priority, id)
			v, id, ok := withID(t)
			if !ok || v[1] == math.MinInt64 {
				return nil, false
			}
			return q.k.scheduled(typ, zone{}, int(-v[1]), v[0], id), true
		}},
		{q.k.activeType(typ), func(t tuple.Tuple) ([]byte, bool) { // (timeout, read version, id)
			v, id, ok := withID(t)
			if !ok {
				return nil, false
			}
			return q.k.active(typ, v[0], v[1], id), true
		}},
		{q.k.finishedType(typ), func(t tuple.Tuple) ([]byte, bool) { // (finished_ms, id)
			if len(t) != 2 {
				return nil, false
			}
			at, ok := t[0].(int64)
			id, ok2 := t[1].(string)
			if !ok || !ok2 {
				return nil, false
			}
			return q.k.finished(typ, at, id), true
		}},
		{q.k.stampType(typ), func(t tuple.Tuple) ([]byte, bool) { // (read version, token)
			if len(t) != 2 {
				return nil, false
			}
			v, ok := ints(t, 2)
			if !ok || v[1] <= 0 {
				return nil, false
			}
			return q.k.stamp(typ, v[0], v[1]), true
		}},
	}
}

// migrateEntries moves the keys of an earlier layout of one of the type's
// indexes (migrations) to Layout's, with their values, among the first
// migrateBatch keys of the index at or after from (nil: its start), and
// marks the zone of the ready entries it moves. next is where the next
// transaction goes on, nil once the index is done; a transaction reads at
// most migrateBatch keys, moved or not.
func (q *Queue) migrateEntries(ctx context.Context, tr kv.Transactor, typ string, index int, from []byte) (moved int, next []byte, err error) {
	m := q.migrations(typ)[index]
	type result struct {
		moved int
		next  []byte
	}
	res, err := kv.Transact(ctx, tr, func(tx kv.Tx) (result, error) {
		r := m.sub.Range()
		if from != nil {
			r.Begin = from
		}
		kvs, err := tx.GetRange(r, kv.RangeOptions{Limit: migrateBatch})
		if err != nil {
			return result{}, err
		}
		moved := 0
		for _, e := range kvs {
			t, err := m.sub.Unpack(e.Key)
			if err != nil {
				continue
			}
			key, ok := m.convert(t)
			if !ok {
				continue // Layout's, or not a key fdbq writes
			}
			tx.Clear(e.Key)
			tx.Set(key, e.Value)
			if index == 0 {
				if err := q.markZone(tx, typ, zone{}, nil); err != nil {
					return result{}, err
				}
			}
			moved++
		}
		if len(kvs) < migrateBatch {
			return result{moved: moved}, nil
		}
		return result{moved, kv.KeyAfter(kvs[len(kvs)-1].Key)}, nil
	})
	return res.moved, res.next, err
}
