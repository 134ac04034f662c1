package fdbq_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

func TestLifecycleSmoke(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	db := q.DB()
	j, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: "a", Data: json.RawMessage(`{"to":"x"}`)})
	if err != nil || j.State != fdbq.Pending {
		t.Fatalf("add: %+v %v", j, err)
	}
	ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 10})
	if err != nil || len(ls) != 1 || ls[0].ID != "a" {
		t.Fatalf("accept: %v %v", ls, err)
	}
	if err := q.Fail(ctx, db, ls[0], "boom"); err != nil {
		t.Fatal(err)
	}
	if ls2, _ := q.Accept(ctx, "email", fdbq.AcceptOptions{}); len(ls2) != 0 {
		t.Fatal("accepted before backoff")
	}
	c.Advance(time.Hour)
	ls, err = q.Accept(ctx, "email", fdbq.AcceptOptions{})
	if err != nil || len(ls) != 1 || ls[0].Attempts != 2 {
		t.Fatalf("accept after backoff: %v %v", ls, err)
	}
	if err := q.Finish(ctx, db, ls[0], json.RawMessage(`"ok"`)); err != nil {
		t.Fatal(err)
	}
	if err := q.Finish(ctx, db, ls[0], nil); err != nil {
		t.Fatalf("repeated finish by the same lease should be idempotent: %v", err)
	}
	if err := q.Heartbeat(ctx, db, ls[0], fdbq.HeartbeatOptions{}); !errors.Is(err, fdbq.ErrHalt) {
		t.Fatalf("heartbeat after finish: %v", err)
	}
	got, err := q.WaitOne(ctx, "email", "a", fdbq.Finished)
	if err != nil || got.Outcome != fdbq.Succeeded || string(got.Result) != `"ok"` {
		t.Fatalf("wait: %+v %v", got, err)
	}
	n, _ := q.Count(ctx, db, "email", fdbq.Finished)
	if n != 1 {
		t.Fatalf("finished count %d", n)
	}
}
