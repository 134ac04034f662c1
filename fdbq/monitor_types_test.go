package fdbq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// A sweep spends transactions on the types that have something to sweep:
// registering types with nothing running, nothing past its retention and
// no stamps left adds none, while jobs of another type run. (Each idle
// type cost a sweep two or three transactions: reading its activity
// groups, its expiry batch, its stamp clearing.)
func TestSweepTransactionsDoNotGrowWithIdleTypes(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	cdb, counts := countingDB(q.DB())
	cq := fdbq.New(cdb, fdbq.Options{Now: c.Now})
	m := fdbq.NewMonitor(cq, fdbq.MonitorOptions{Clock: c.Now, Logger: quietLog})

	for i := range 3 {
		addJob(t, q, fdbq.NewJob{ID: fmt.Sprintf("run%d", i)})
	}
	leases := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 3})
	if len(leases) != 3 {
		t.Fatalf("accepted %d jobs, want 3", len(leases))
	}
	sweepTx := func() int64 {
		t.Helper()
		for _, l := range leases {
			if err := q.Heartbeat(ctx, q.DB(), l, fdbq.HeartbeatOptions{}); err != nil {
				t.Fatalf("heartbeat: %v", err)
			}
		}
		c.Advance(time.Second)
		before := counts.begins.Load()
		if st := sweep(t, m); st.Recycled != 0 || st.Expired != 0 || st.Skipped != 0 {
			t.Fatalf("sweep of heartbeating jobs did something: %+v", st)
		}
		return counts.begins.Load() - before
	}
	sweepTx()
	one := sweepTx()
	if one == 0 {
		t.Fatal("a sweep with running jobs made no transaction")
	}

	// Idle types of every kind: never used; used, with finished jobs
	// kept (not past the retention); used, with retention off.
	const idle = 30
	for i := range idle {
		typ := fmt.Sprintf("idle%02d", i)
		s := fdbq.DefaultTypeSettings()
		if i%3 == 2 {
			s.Retention = 0
		}
		if err := q.SetType(ctx, q.DB(), typ, s); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			continue
		}
		addJob(t, q, fdbq.NewJob{Type: typ, ID: "done"})
		ls, err := q.Accept(ctx, typ, fdbq.AcceptOptions{})
		if err != nil || len(ls) != 1 {
			t.Fatalf("accept of %s: %v, %d leases", typ, err, len(ls))
		}
		if err := q.Finish(ctx, q.DB(), ls[0], nil); err != nil {
			t.Fatal(err)
		}
	}
	st := sweep(t, m) // clears the finished jobs' stamps
	if len(st.ByType) != idle+1 {
		t.Fatalf("a sweep went through %d types, want %d: %+v", len(st.ByType), idle+1, st)
	}
	if many := sweepTx(); many != one {
		t.Fatalf("a sweep with %d idle types made %d transactions, %d with none", idle, many, one)
	}

	// A job of an idle type past its retention is still expired, and
	// costs that one type its transactions.
	c.Advance(fdbq.DefaultRetention)
	for _, l := range leases {
		if err := q.Heartbeat(ctx, q.DB(), l, fdbq.HeartbeatOptions{}); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
	}
	want := idle / 3
	if st := sweep(t, m); st.Expired != want || st.Recycled != 0 {
		t.Fatalf("sweep after the retention expired %d jobs and recycled %d, want %d and 0", st.Expired, st.Recycled, want)
	}
}
