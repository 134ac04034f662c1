package fdbq

import (
	"context"
	"encoding/binary"
	"errors"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// Layout is the version of the data model (see the package doc) this
// fdbq reads and writes. A store keeps the version it is in at (P, 14);
// one written before that key existed is in layout 1.
const Layout = 1

// ErrLayout: the store is in a layout this version of fdbq does not read
// or write. Detail says which layout and what to do.
var ErrLayout = errors.New("fdbq: the store's data layout is not this version's")

// CheckLayout checks that the store is in Layout, and records that it is
// if it says nothing yet (a new store, or one written before the layout
// key existed, which is layout 1). A program calls it once it opens the
// store, before anything else: jobstage.Open, `jobstage serve` and the
// benchmark do. A store in another layout is *Error of ErrLayout, with
// nothing written; a layout key that does not decode is ErrCorrupt.
//
// It is idempotent, so a retry after commit_unknown_result, or two
// processes opening a new store at once (one of them conflicts, reads
// the other's key and agrees), come to the same.
func (q *Queue) CheckLayout(ctx context.Context, tr kv.Transactor) error {
	key := q.k.root.MustPack(tuple.Tuple{tagLayout})
	return tr.Transact(ctx, func(tx kv.Tx) error {
		b, err := tx.Get(key)
		if err != nil {
			return err
		}
		if b == nil {
			var v [8]byte
			binary.LittleEndian.PutUint64(v[:], Layout)
			tx.Set(key, v[:])
			return nil
		}
		if len(b) != 8 {
			return corruptf("layout key %q holds %q, not a layout version", key, b)
		}
		switch v := binary.LittleEndian.Uint64(b); {
		case v == Layout:
			return nil
		case v > Layout:
			return errorf(ErrLayout, "the store is in layout %d, written by a newer version of jobstage; this one reads layout %d: run that version or a later one", v, Layout)
		default:
			return errorf(ErrLayout, "the store is in layout %d; this version reads layout %d and has no migration from it", v, Layout)
		}
	})
}
