package fdbq

import (
	"context"
	"testing"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// A job snoozed as often as a record counts keeps being snoozed: its
// count stays at maxCount instead of passing it and leaving a record that
// does not read back.
func TestSnoozesStopCountingAtTheLimit(t *testing.T) {
	ctx := context.Background()
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	defer db.Close()
	q := New(db, Options{})
	if err := q.SetType(ctx, db, "email", DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Add(ctx, db, NewJob{Type: "email", ID: "a"}); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		ls, err := q.Accept(ctx, "email", AcceptOptions{})
		if err != nil || len(ls) != 1 {
			t.Fatalf("round %d: accept: %d leases, %v", round, len(ls), err)
		}
		if round == 0 {
			// Snoozed maxCount times already: only the count is set.
			if err := db.Transact(ctx, func(tx kv.Tx) error {
				rec, err := q.load(tx, "email", "a")
				if err != nil {
					return err
				}
				rec.Snoozes = maxCount
				b, err := rec.encode()
				if err != nil {
					return err
				}
				tx.Set(q.k.job("email", "a"), b)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := q.End(ctx, db, ls[0], Ending{How: AttemptSnoozed}); err != nil {
			t.Fatalf("round %d: snooze: %v", round, err)
		}
		j, err := q.Get(ctx, db, "email", "a")
		if err != nil {
			t.Fatalf("round %d: the snoozed job does not read back: %v", round, err)
		}
		if j.State != Pending || j.Snoozes != maxCount {
			t.Fatalf("round %d: %s with %d snoozes, want pending with %d", round, j.State, j.Snoozes, maxCount)
		}
	}
}
