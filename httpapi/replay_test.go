package httpapi_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

// A finish or fail sent again with the same lock (an external worker's
// retry after a lost answer) answers 204 again, as the first did, and is
// no second outcome: OnOutcome sees each attempt's end once.
func TestReplayedOutcomesCountOnce(t *testing.T) {
	var mu sync.Mutex
	var events []string
	e := newEnv(t, httpapi.Options{
		OnOutcome: func(typ, outcome string) { mu.Lock(); events = append(events, outcome+" "+typ); mu.Unlock() },
	})
	ctx := context.Background()
	c := e.client("")
	for _, nj := range []httpapi.NewJob{{ID: "ok"}, {ID: "again"}, {ID: "last", MaxAttempts: 1}, {ID: "readded"}} {
		if _, err := c.Enqueue(ctx, "email", nj); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := c.Accept(ctx, "email", httpapi.AcceptRequest{Max: 4})
	if err != nil || len(ls) != 4 {
		t.Fatalf("accept: %v, %d jobs", err, len(ls))
	}
	byID := map[string]*httpapi.Lease{}
	for _, l := range ls {
		byID[l.ID] = l
	}
	for range 2 {
		if err := c.Finish(ctx, byID["ok"], nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Fail(ctx, byID["again"], "boom"); err != nil { // retried: pending again
			t.Fatal(err)
		}
		if err := c.Fail(ctx, byID["last"], "boom"); err != nil { // out of attempts
			t.Fatal(err)
		}
	}
	// Added again while running: the finish makes it pending, and a new
	// accept runs it under a new lock. The first lock's finish sent again
	// then finds the job held by another: 409 halt, no outcome.
	if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: "readded"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Finish(ctx, byID["readded"], nil); err != nil {
		t.Fatal(err)
	}
	var again *httpapi.Lease
	for again == nil {
		ls, err := c.Accept(ctx, "email", httpapi.AcceptRequest{Max: 4})
		if err != nil || len(ls) == 0 {
			t.Fatalf("accept again: %v %v", ls, err)
		}
		for _, l := range ls {
			if l.ID == "readded" {
				again = l
			}
		}
	}
	var ae *httpapi.APIError
	if err := c.Finish(ctx, byID["readded"], nil); !errors.As(err, &ae) || ae.Code != httpapi.CodeHalt {
		t.Fatalf("finish with the first lock of a job running again: %v", err)
	}
	if err := c.Finish(ctx, again, nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	got := slices.Clone(events)
	slices.Sort(got)
	want := []string{"failed email", "retried email", "succeeded email", "succeeded email", "succeeded email"}
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes %s, want %s", strings.Join(got, "; "), strings.Join(want, "; "))
	}
	j, err := c.Get(ctx, "email", "again")
	if err != nil || j.State != fdbq.Pending || j.Attempts != 1 {
		t.Fatalf("job again: %+v %v", j, err)
	}
}
