package fdbq_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
)

func TestOldestDue(t *testing.T) {
	ctx := context.Background()
	q, clock := newQueue(t)
	db := q.DB()
	if got, err := q.OldestDue(ctx, db, "email"); err != nil || !got.IsZero() {
		t.Fatalf("empty queue: %v, %v; want the zero time", got, err)
	}
	now := clock.Now()
	if _, err := q.AddBatch(ctx, db, []fdbq.NewJob{
		{Type: "email", Priority: 1, ScheduledAt: now.Add(time.Minute)}, // not due yet
		{Type: "email", Priority: 9, ScheduledAt: now.Add(-time.Minute)},
		{Type: "email", Priority: 5, ScheduledAt: now.Add(-time.Hour)}, // oldest, in a lower band
		{Type: "email", Priority: 5, ScheduledAt: now.Add(-time.Second)},
	}); err != nil {
		t.Fatal(err)
	}
	got, err := q.OldestDue(ctx, db, "email")
	if err != nil || !got.Equal(now.Add(-time.Hour)) {
		t.Fatalf("oldest due %v, %v; want %v", got, err, now.Add(-time.Hour))
	}
	// Inside a caller's transaction too.
	if err := db.Transact(ctx, func(tx kv.Tx) error {
		got, err = q.OldestDue(ctx, tx, "email")
		return err
	}); err != nil || !got.Equal(now.Add(-time.Hour)) {
		t.Fatalf("in a transaction: %v, %v", got, err)
	}
}

func TestOldestDueNothingDue(t *testing.T) {
	ctx := context.Background()
	q, clock := newQueue(t)
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ScheduledAt: clock.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got, err := q.OldestDue(ctx, q.DB(), "email"); err != nil || !got.IsZero() {
		t.Fatalf("%v, %v; want the zero time: the only job is not due", got, err)
	}
	clock.Advance(2 * time.Hour)
	if got, err := q.OldestDue(ctx, q.DB(), "email"); err != nil || !got.Equal(clock.Now().Add(-time.Hour)) {
		t.Fatalf("%v, %v; want the job's scheduled time once it is due", got, err)
	}
}
