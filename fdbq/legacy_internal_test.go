package fdbq

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// mustFormat1 encodes rec as earlier versions did.
func mustFormat1(t testing.TB, rec *record) []byte {
	t.Helper()
	b, err := rec.encodeAs(formatBinary1)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A job that started running under an earlier version (a format 0x01
// record, its entry keyed by a deadline of the worker's clock) is moved to
// the version-keyed index by the first sweep, whatever that deadline
// says, keeps its lease, and is taken back a timeout after the move if
// its worker is gone.
func TestLegacyRunningJobMoved(t *testing.T) {
	ctx := context.Background()
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	defer db.Close()
	wall := time.UnixMilli(1_700_000_000_000)
	q := New(db, Options{Now: func() time.Time { return wall }})
	if err := q.SetType(ctx, db, "email", DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	now := wall.UnixMilli()
	for _, j := range []struct {
		id       string
		deadline int64 // by the earlier worker's clock
	}{{"past", now - time.Hour.Milliseconds()}, {"future", now + time.Hour.Milliseconds()}} {
		rec := &record{State: Running, Lock: "lock-" + j.id, Attempts: 1, MaxAttempts: 3,
			AddedAt: now, ScheduledAt: now, StartedAt: now, HeartbeatAt: j.deadline - 30_000, ExpiresAt: j.deadline}
		old := mustFormat1(t, rec)
		if err := db.Transact(ctx, func(tx kv.Tx) error {
			tx.Set(q.k.job("email", j.id), old)
			tx.Set(q.k.legacyActive("email", j.deadline, j.id), nil)
			tx.Add(q.k.count("email", Running), 1)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	own := time.Unix(0, 0)
	m := NewMonitor(q, MonitorOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: func() time.Time { return own }})
	if st, err := m.Sweep(ctx); err != nil || st.Recycled != 0 || st.Skipped != 0 {
		t.Fatalf("first sweep: %+v %v", st, err)
	}
	left, err := kv.ReadTransact(ctx, db, func(tx kv.ReadTx) ([]kv.KeyValue, error) {
		return tx.GetRange(q.k.legacyActiveType("email").Range(), kv.RangeOptions{})
	})
	if err != nil || len(left) != 0 {
		t.Fatalf("deadline-keyed entries left after a sweep: %d %v", len(left), err)
	}
	page, err := q.List(ctx, db, "email", ListOptions{State: Running})
	if err != nil || len(page.Jobs) != 2 {
		t.Fatalf("running after the move: %v %v", page, err)
	}
	// The monitor's next transaction (its loop reads the deadlines right
	// after a sweep) learns of the move.
	if _, err := m.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	// The lease still holds: a heartbeat renews "future".
	own = own.Add(20 * time.Second)
	live := &Lease{Job: Job{Type: "email", ID: "future"}, Lock: "lock-future"}
	if err := q.Heartbeat(ctx, db, live, HeartbeatOptions{}); err != nil {
		t.Fatalf("heartbeat of a moved job: %v", err)
	}
	if _, err := m.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	own = own.Add(DefaultActivityTimeout - 20*time.Second)
	st2, err := m.Sweep(ctx)
	if err != nil || st2.Recycled != 1 {
		t.Fatalf("a timeout after the move: %+v %v", st2, err)
	}
	if j, err := q.Get(ctx, db, "email", "past"); err != nil || j.State != Pending {
		t.Fatalf("the job whose worker is gone: %+v %v", j, err)
	}
	if j, err := q.Get(ctx, db, "email", "future"); err != nil || j.State != Running {
		t.Fatalf("the job whose worker heartbeated: %+v %v", j, err)
	}
	if err := q.Finish(ctx, db, live, nil); err != nil {
		t.Fatalf("finish: %v", err)
	}
	if n, err := q.Count(ctx, db, "email", Running); err != nil || n != 0 {
		t.Fatalf("running count %d %v", n, err)
	}
}
