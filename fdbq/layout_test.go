package fdbq_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/kvtest"
	"github.com/jobstage/jobstage/kv/tuple"
)

// layoutKey is (P, 14) under the default prefix.
func layoutKey() []byte {
	return tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{14})
}

func setLayout(t *testing.T, db *kv.DB, v []byte) {
	t.Helper()
	if err := db.Transact(context.Background(), func(tx kv.Tx) error { tx.Set(layoutKey(), v); return nil }); err != nil {
		t.Fatal(err)
	}
}

func le(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// A store without a layout key (new, or written before the key existed)
// is recorded as Layout; one of a newer or older layout is refused with
// ErrLayout and left as it is; a key that does not decode is ErrCorrupt.
func TestCheckLayout(t *testing.T) {
	ctx := context.Background()
	db := jobtest.OpenDB(t)
	q := fdbq.New(db, fdbq.Options{})
	// A store of before the key: a type and a job, no layout key.
	if err := q.SetType(ctx, db, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: "j1"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := q.CheckLayout(ctx, db); err != nil {
			t.Fatal(err)
		}
		if got := getKey(t, db, layoutKey()); string(got) != string(le(fdbq.Layout)) {
			t.Fatalf("layout key %x, want %d", got, fdbq.Layout)
		}
	}

	for _, c := range []struct {
		value  []byte
		is     error
		detail string
	}{
		{le(fdbq.Layout + 1), fdbq.ErrLayout, "the store is in layout 2, written by a newer version of jobstage; this one reads layout 1: run that version or a later one"},
		{le(0), fdbq.ErrLayout, "the store is in layout 0; this version reads layout 1 and has no migration from it"},
		{[]byte("v2"), fdbq.ErrCorrupt, `holds "v2", not a layout version`},
	} {
		setLayout(t, db, c.value)
		err := q.CheckLayout(ctx, db)
		var fe *fdbq.Error
		if !errors.Is(err, c.is) || !errors.As(err, &fe) || !strings.Contains(fe.Detail, c.detail) {
			t.Errorf("layout %q: %v, want %v saying %q", c.value, err, c.is, c.detail)
		}
		if got := getKey(t, db, layoutKey()); string(got) != string(c.value) {
			t.Errorf("a refused layout was rewritten: %q, was %q", got, c.value)
		}
	}
}

// Processes that open a new store at once, through commits that conflict,
// come back unknown after applying, or fail, all agree on Layout.
func TestCheckLayoutUnderFaults(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		inner := jobtest.OpenDB(t)
		db, fb := kvtest.NewFaultyDB(inner, kvtest.DefaultFaultOptions(seed))
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- fdbq.New(db, fdbq.Options{}).CheckLayout(context.Background(), db)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("seed %d: %v (faults %+v)", seed, err, fb.Counts())
			}
		}
		if got := getKey(t, inner, layoutKey()); string(got) != string(le(fdbq.Layout)) {
			t.Fatalf("seed %d: layout key %x", seed, got)
		}
	}
}

func getKey(t *testing.T, db *kv.DB, key []byte) []byte {
	t.Helper()
	var v []byte
	if err := db.Transact(context.Background(), func(tx kv.Tx) error {
		var err error
		v, err = tx.Get(key)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return v
}
