package fdbq_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
		{le(fdbq.Layout + 1), fdbq.ErrLayout, fmt.Sprintf("the store is in layout %d, written by a newer version of jobstage; this one reads layout %d: run that version or a later one", fdbq.Layout+1, fdbq.Layout)},
		{le(0), fdbq.ErrLayout, fmt.Sprintf("the store is in layout 0; this version reads layout %d and has no migration from it", fdbq.Layout)},
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

// A store in layout 1 (pending entries without zones, layout key 1) is
// migrated by CheckLayout: its ready and scheduled entries move to the
// zone of the jobs without a key, the zone is marked, the layout key
// says 2, and every job is accepted in the order layout 1 gave it. A
// migration cut short by a failed transaction is taken up again.
func TestMigrateFromLayout1(t *testing.T) {
	ctx := context.Background()
	db := jobtest.OpenDB(t)
	var log strings.Builder
	q := fdbq.New(db, fdbq.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err := q.SetType(ctx, db, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	const n = 1200 // more than one transaction of the migration
	for i := range n {
		at := time.Time{}
		if i%3 == 0 {
			at = time.Now().Add(time.Hour)
		}
		if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: fmt.Sprintf("j%04d", i), Priority: i % 5, ScheduledAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	// Some run: their activity entries and stamps are migrated too.
	running, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 50})
	if err != nil || len(running) != 50 {
		t.Fatalf("accept: %d, %v", len(running), err)
	}
	// Some finished: their entries are migrated too.
	for _, l := range running[30:] {
		if err := q.Finish(ctx, db, l, nil); err != nil {
			t.Fatal(err)
		}
	}
	root := tuple.FromBytes(fdbq.DefaultPrefix)
	// Rewrite the entries as layout 1 had them, and drop the zone's mark.
	if err := db.Transact(ctx, func(tx kv.Tx) error {
		for _, tag := range []int{2, 6, 11, 12, 13} {
			sub := root.Sub(tag, "email")
			kvs, err := tx.GetRange(sub.Range(), kv.RangeOptions{})
			if err != nil {
				return err
			}
			for _, e := range kvs {
				k, err := sub.Unpack(e.Key)
				if err != nil {
					return err
				}
				tx.Clear(e.Key)
				switch tag {
				case 2: // key, shard, -priority, sched, id
					tx.Set(root.MustPack(tuple.Tuple{2, "email", k[2], k[3], k[4]}), e.Value)
				case 11: // sched, -priority, key, shard, id
					tx.Set(root.MustPack(tuple.Tuple{11, "email", k[0], k[1], k[4]}), e.Value)
				case 12: // lane, timeout, read version, id
					tx.Set(root.MustPack(tuple.Tuple{12, "email", k[1], k[2], k[3]}), e.Value)
				case 13: // lane, read version, token
					tx.Set(root.MustPack(tuple.Tuple{13, "email", k[1], k[2]}), e.Value)
				case 6: // lane, finished, id
					tx.Set(root.MustPack(tuple.Tuple{6, "email", k[1], k[2]}), e.Value)
				}
			}
		}
		tx.ClearRange(root.Sub(15).Range())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	setLayout(t, db, le(1))
	if got := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10}); len(got) != 0 {
		t.Fatalf("accepted %v from a store in layout 1", leaseIDsOf(got))
	}
	// Its transactions conflict, fail unknown after applying or not.
	fdb, _ := kvtest.NewFaultyDB(db, kvtest.FaultOptions{Seed: 3, ConflictRate: 0.2, UnknownAppliedRate: 0.2, UnknownNotAppliedRate: 0.1})
	st, err := fdbq.New(fdb, fdbq.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))}).Migrate(ctx, fdb)
	if err != nil || st.To != fdbq.Layout || st.From != 1 || st.Moved > n+1 { // 1,150 pending, 30 running, their stamp, 20 finished
		t.Fatalf("migrate: %+v, %v", st, err)
	}
	if err := q.CheckLayout(ctx, db); err != nil {
		t.Fatal(err)
	}
	if got := getKey(t, db, layoutKey()); string(got) != string(le(fdbq.Layout)) {
		t.Fatalf("layout key %x after the migration", got)
	}
	if !strings.Contains(log.String(), fmt.Sprintf("migrating the store from layout 1 to %d", fdbq.Layout)) {
		t.Fatalf("no log line of the migration:\n%s", log.String())
	}
	if again, err := q.Migrate(ctx, db); err != nil || again.Moved != 0 || again.From != fdbq.Layout {
		t.Fatalf("a second migration: %+v, %v", again, err)
	}
	checkStore(t, db)
	if err := q.Heartbeat(ctx, db, running[0], fdbq.HeartbeatOptions{}); err != nil {
		t.Fatalf("a heartbeat of a job that ran across the migration: %v", err)
	}
	if err := q.Finish(ctx, db, running[1], nil); err != nil {
		t.Fatalf("a finish of a job that ran across the migration: %v", err)
	}
	prev := 1 << 30
	taken := 0
	for {
		ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 50})
		if len(ls) == 0 {
			break
		}
		for _, l := range ls {
			if l.Priority > prev {
				t.Fatalf("accepted %s of priority %d after one of %d", l.ID, l.Priority, prev)
			}
			prev = l.Priority
		}
		taken += len(ls)
	}
	if want := n - (n+2)/3 - 50; taken != want {
		t.Fatalf("accepted %d due jobs after the migration, want %d", taken, want)
	}
}

// A store in layout 2 (finished entries by time alone) is migrated to
// layout 3: its finished entries move to their lanes, and nothing else is
// rewritten. The listing of finished jobs is in finish order before and
// after.
func TestMigrateFromLayout2(t *testing.T) {
	ctx := context.Background()
	db := jobtest.OpenDB(t)
	var log strings.Builder
	q := fdbq.New(db, fdbq.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err := q.SetType(ctx, db, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	const n = 700 // more than one transaction of the migration
	for i := range n {
		if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: fmt.Sprintf("j%04d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for {
		ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 0 {
			break
		}
		for _, l := range ls {
			if err := q.Finish(ctx, db, l, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	listAll := func() []string {
		var ids []string
		o := fdbq.ListOptions{State: fdbq.Finished, Limit: 64}
		for {
			p, err := q.List(ctx, db, "email", o)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Unreadable) > 0 {
				t.Fatalf("unreadable entries listed: %v", p.Unreadable)
			}
			for _, j := range p.Jobs {
				ids = append(ids, j.ID)
			}
			if o.Cursor = p.Next; o.Cursor == "" {
				return ids
			}
		}
	}
	want := listAll()
	if len(want) != n {
		t.Fatalf("%d finished jobs listed, want %d", len(want), n)
	}
	root := tuple.FromBytes(fdbq.DefaultPrefix)
	sub := root.Sub(6, "email")
	if err := db.Transact(ctx, func(tx kv.Tx) error {
		kvs, err := tx.GetRange(sub.Range(), kv.RangeOptions{})
		if err != nil {
			return err
		}
		for _, e := range kvs {
			k, err := sub.Unpack(e.Key)
			if err != nil {
				return err
			}
			tx.Clear(e.Key)
			tx.Set(sub.MustPack(tuple.Tuple{k[1], k[2]}), e.Value) // finished, id
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	setLayout(t, db, le(2))
	fdb, _ := kvtest.NewFaultyDB(db, kvtest.FaultOptions{Seed: 5, ConflictRate: 0.2, UnknownAppliedRate: 0.2, UnknownNotAppliedRate: 0.1})
	st, err := fdbq.New(fdb, fdbq.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))}).Migrate(ctx, fdb)
	if err != nil || st.From != 2 || st.To != fdbq.Layout || st.Moved != n {
		t.Fatalf("migrate: %+v, %v; want %d entries moved", st, err, n)
	}
	if !strings.Contains(log.String(), fmt.Sprintf("migrating the store from layout 2 to %d (finished jobs into lanes)", fdbq.Layout)) {
		t.Fatalf("no log line of the migration:\n%s", log.String())
	}
	checkStore(t, db)
	if got := listAll(); !slices.Equal(got, want) {
		t.Fatalf("finished jobs listed after the migration: %d, first %v; want %d in finish order", len(got), got[:min(5, len(got))], len(want))
	}
}

// A migration's transactions read a bounded number of keys however many
// it has moved: each goes on after the last, not from the index's start,
// where the moved keys are (they read 115,000 keys for 10,000 entries).
func TestMigrateReadsEachKeyOnce(t *testing.T) {
	ctx := context.Background()
	db := jobtest.OpenDB(t)
	q := fdbq.New(db, fdbq.Options{Logger: slog.New(slog.DiscardHandler)})
	if err := q.SetType(ctx, db, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	const n = 10_000
	sub := tuple.FromBytes(fdbq.DefaultPrefix).Sub(6, "email")
	for b := 0; b < n; b += 1000 {
		if err := db.Transact(ctx, func(tx kv.Tx) error {
			for i := b; i < b+1000; i++ {
				tx.Set(sub.MustPack(tuple.Tuple{int64(1_700_000_000_000 + i), fmt.Sprintf("j%05d", i)}), nil) // layout 2's
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	setLayout(t, db, le(2))
	cdb, counts := countingDB(db)
	st, err := fdbq.New(cdb, fdbq.Options{Logger: slog.New(slog.DiscardHandler)}).Migrate(ctx, cdb)
	if err != nil || st.Moved != n {
		t.Fatalf("migrate: %+v, %v; want %d moved", st, err, n)
	}
	_, _, keys := counts.snapshot()
	txs := counts.begins.Load()
	if keys > 3*n || keys > 2*500*txs {
		t.Fatalf("the migration read %d keys in %d transactions; want at most %d in all and %d a transaction on average", keys, txs, 3*n, 2*500)
	}
	t.Logf("%d entries moved: %d keys read in %d transactions", n, keys, txs)
}
