package fdbq

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// legacyQueue returns a queue with type "email" and one job of it running
// as written by an earlier version: a format 0x01 (or JSON) record and a
// deadline-keyed entry.
func legacyQueue(t *testing.T, jsonFormat bool) (*Queue, *kv.DB, *Lease) {
	t.Helper()
	ctx := context.Background()
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	t.Cleanup(func() { db.Close() })
	wall := time.UnixMilli(1_700_000_000_000)
	q := New(db, Options{Now: func() time.Time { return wall }})
	if err := q.SetType(ctx, db, "email", DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	now := wall.UnixMilli()
	rec := &record{State: Running, Lock: "lock-old", Attempts: 1, MaxAttempts: 3,
		AddedAt: now, ScheduledAt: now, StartedAt: now, HeartbeatAt: now, ExpiresAt: now + 30_000}
	var old []byte
	if jsonFormat {
		old, err = json.Marshal(rec)
	} else {
		old = mustFormat1(t, rec)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Transact(ctx, func(tx kv.Tx) error {
		tx.Set(q.k.job("email", "old"), old)
		tx.Set(q.k.legacyActive("email", rec.ExpiresAt, "old"), nil)
		tx.Add(q.k.count("email", Running), 1)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return q, db, &Lease{Job: Job{Type: "email", ID: "old"}, Lock: "lock-old"}
}

// A job running since before the upgrade is listed by List(Running) before
// a monitor's sweep has moved its entry, as Count(Running) and Get count
// and show it.
func TestListRunningIncludesLegacyJobs(t *testing.T) {
	for _, jsonFormat := range []bool{false, true} {
		q, db, _ := legacyQueue(t, jsonFormat)
		ctx := context.Background()
		n, err := q.Count(ctx, db, "email", Running)
		if err != nil || n != 1 {
			t.Fatalf("count %d %v", n, err)
		}
		page, err := q.List(ctx, db, "email", ListOptions{State: Running})
		if err != nil || len(page.Jobs) != 1 {
			t.Fatalf("json %v: List(Running) of a job running since before the upgrade (Count says 1): %d jobs, %v", jsonFormat, len(page.Jobs), err)
		}
	}
}
