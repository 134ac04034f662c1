package fdbq_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
)

// An accept names its holder; the job shows it while it runs, and not
// once it has left running. The lock still fences: another worker's lock
// for the same job is refused.
func TestAcceptHolder(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	db := q.DB()
	for _, id := range []string{"a", "b"} {
		if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1, Holder: "host-1/42 · worker ✓"})
	if err != nil || len(ls) != 1 {
		t.Fatalf("accept: %v %v", ls, err)
	}
	if ls[0].Holder != "host-1/42 · worker ✓" {
		t.Fatalf("lease's job holder %q", ls[0].Holder)
	}
	j, err := q.Get(ctx, db, "email", ls[0].ID)
	if err != nil || j.Holder != "host-1/42 · worker ✓" {
		t.Fatalf("running job: holder %q, %v", j.Holder, err)
	}
	// An accept that names none holds the other job unnamed.
	other, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(other) != 1 {
		t.Fatalf("accept: %v %v", other, err)
	}
	if j, err := q.Get(ctx, db, "email", other[0].ID); err != nil || j.Holder != "" {
		t.Fatalf("job accepted without a holder: holder %q, %v", j.Holder, err)
	}
	// A lock naming the same holder with another token is not the lock.
	forged := *ls[0]
	forged.Lock = strings.Repeat("0", 32) + "@host-1/42 · worker ✓"
	if err := q.Finish(ctx, db, &forged, nil); !errors.Is(err, fdbq.ErrHalt) {
		t.Fatalf("finish with a forged lock naming the holder: %v, want ErrHalt", err)
	}
	if err := q.Heartbeat(ctx, db, ls[0], fdbq.HeartbeatOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := q.Finish(ctx, db, ls[0], nil); err != nil {
		t.Fatal(err)
	}
	if j, err := q.Get(ctx, db, "email", ls[0].ID); err != nil || j.State != fdbq.Finished || j.Holder != "" {
		t.Fatalf("finished job: %+v, %v; want no holder", j, err)
	}
}

func TestAcceptHolderRefused(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: "a"}); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{
		strings.Repeat("x", fdbq.MaxHolderSize+1),
		"bad\xff",
		"esc\x1b[2J",
		"new\nline",
		"bidi\u202eevil",
		"zero\u200bwidth",
		"del\x7f",
	} {
		if err := fdbq.ValidateHolder(h); !errors.Is(err, fdbq.ErrInvalidJob) {
			t.Errorf("ValidateHolder(%q): %v", h, err)
		}
		if ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Holder: h}); !errors.Is(err, fdbq.ErrInvalidJob) || len(ls) != 0 {
			t.Errorf("accept with holder %q: %v %v", h, ls, err)
		}
	}
	if err := fdbq.ValidateHolder(strings.Repeat("é", fdbq.MaxHolderSize/2)); err != nil {
		t.Errorf("a holder of %d bytes: %v", fdbq.MaxHolderSize, err)
	}
	// Nothing was taken by the refused accepts.
	if n, err := q.Count(ctx, q.DB(), "email", fdbq.Pending); err != nil || n != 1 {
		t.Fatalf("pending %d, %v", n, err)
	}
}
