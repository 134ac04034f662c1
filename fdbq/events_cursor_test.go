package fdbq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// newTypesQueue is newQueue with types registered besides "email".
func newTypesQueue(t *testing.T, types ...string) *fdbq.Queue {
	t.Helper()
	q, _ := newQueue(t)
	for _, typ := range types {
		if err := q.SetType(context.Background(), q.DB(), typ, fdbq.DefaultTypeSettings()); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

// collect reads n job events of f, checks their cursors are distinct and
// growing, and returns them.
func collect(t *testing.T, f *follow, n int) []fdbq.Event {
	t.Helper()
	var evs []fdbq.Event
	for i := range n {
		e := f.next(t)
		if e.Kind != fdbq.EventJob {
			t.Fatalf("event %d: %+v, want a job event", i, e)
		}
		if i > 0 && e.Cursor.String() <= evs[i-1].Cursor.String() {
			t.Fatalf("event %d (%s %s) at %s, not after event %d (%s %s) at %s",
				i, e.Type, e.ID, e.Cursor, i-1, evs[i-1].Type, evs[i-1].ID, evs[i-1].Cursor)
		}
		evs = append(evs, e)
	}
	return evs
}

// resumeEach checks that a Follow resumed after each event reports the
// events after it, exactly: two events at one cursor would lose the second
// to a follower that reconnects between them.
func resumeEach(t *testing.T, q *fdbq.Queue, types []string, evs []fdbq.Event) {
	t.Helper()
	for i := range evs[:len(evs)-1] {
		g := startFollow(t, q, fdbq.FollowOptions{Types: types, After: evs[i].Cursor})
		for j, want := range evs[i+1:] {
			e := g.next(t)
			if e.Kind != fdbq.EventJob || e.Type != want.Type || e.ID != want.ID || e.Cursor != want.Cursor {
				t.Fatalf("resumed after event %d: event %d is %+v, want %s %s at %s", i, j, e, want.Type, want.ID, want.Cursor)
			}
		}
		g.stop()
	}
}

// One transaction that changes jobs of two types logs one event in each
// type's log; a follower of both gets them at distinct cursors, so that
// resuming after the first still reports the second.
func TestFollowOneCommitTwoTypes(t *testing.T) {
	q := newTypesQueue(t, "sms")
	ctx := context.Background()
	types := []string{"email", "sms"}
	f := startFollow(t, q, fdbq.FollowOptions{Types: types})
	if err := q.DB().Transact(ctx, func(tx kv.Tx) error {
		for _, j := range []fdbq.NewJob{{Type: "sms", ID: "1"}, {Type: "email", ID: "2"}, {Type: "sms", ID: "3"}, {Type: "email", ID: "4"}} {
			if _, err := q.Add(ctx, tx, j); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, f, 4)
	// Within one commit, the events come in the order the transaction
	// made its changes, whatever their types.
	for i, want := range []string{"sms 1", "email 2", "sms 3", "email 4"} {
		if got := evs[i].Type + " " + evs[i].ID; got != want {
			t.Fatalf("event %d is %s, want %s", i, got, want)
		}
	}
	resumeEach(t, q, types, evs)
}

// The jobs of a workflow added in one transaction may span types.
func TestFollowWorkflowOfTwoTypes(t *testing.T) {
	q := newTypesQueue(t, "build", "deploy")
	ctx := context.Background()
	types := []string{"build", "deploy"}
	f := startFollow(t, q, fdbq.FollowOptions{Types: types})
	if _, err := q.AddWorkflow(ctx, q.DB(), fdbq.NewWorkflow{ID: "w", Jobs: []fdbq.WorkflowJob{
		{Name: "a", Job: fdbq.NewJob{Type: "build"}},
		{Name: "b", Job: fdbq.NewJob{Type: "deploy"}},
		{Name: "c", Job: fdbq.NewJob{Type: "build"}},
		{Name: "d", Job: fdbq.NewJob{Type: "deploy"}, DependsOn: []string{"a"}},
	}}); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, f, 3)
	seen := map[string]bool{}
	for _, e := range evs {
		seen[e.Type+" "+e.ID+" "+string(e.State)] = true
	}
	if len(seen) != 3 || !seen["build w:a pending"] || !seen["deploy w:b pending"] || !seen["build w:c pending"] {
		t.Fatalf("events %v, want the three jobs of the workflow that depend on none", seen)
	}
	// The finish of a adds d in its transaction: one commit, two types.
	ls, err := q.Accept(ctx, "build", fdbq.AcceptOptions{Max: 2})
	if err != nil || len(ls) != 2 {
		t.Fatalf("accept: %v %v", ls, err)
	}
	for _, l := range ls {
		if l.ID == "w:a" {
			if err := q.Finish(ctx, q.DB(), l, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	more := collect(t, f, 4)
	got := map[string]bool{}
	for _, e := range more {
		got[e.Type+" "+e.ID+" "+string(e.State)] = true
	}
	if !got["build w:a running"] || !got["build w:c running"] || !got["build w:a finished"] || !got["deploy w:d pending"] {
		t.Fatalf("events %v, want the starts of a and c, a's finish and d's add", got)
	}
	evs = append(evs, more...)
	resumeEach(t, q, types, evs)
}

// A transaction the caller creates and commits itself keeps nothing
// between operations (kv.Memo gives each call a fresh value): two Adds in
// it still log two events, neither overwriting the other.
func TestFollowCallerCommittedTransaction(t *testing.T) {
	q := newTypesQueue(t, "sms")
	ctx := context.Background()
	types := []string{"email", "sms"}
	f := startFollow(t, q, fdbq.FollowOptions{Types: types})
	tx, err := q.DB().CreateTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i, typ := range []string{"email", "email", "sms", "email"} {
		id := fmt.Sprint(i)
		if _, err := q.Add(ctx, tx, fdbq.NewJob{Type: typ, ID: id}); err != nil {
			t.Fatal(err)
		}
		want = append(want, typ+" "+id)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, f, len(want))
	for i, w := range want {
		if got := evs[i].Type + " " + evs[i].ID; got != w {
			t.Fatalf("event %d is %s, want %s", i, got, w)
		}
	}
	resumeEach(t, q, types, evs)
	if log, err := q.EventLog(ctx, "email"); err != nil || len(log) != 3 {
		t.Fatalf("email's log holds %d entries (%v), want 3", len(log), err)
	}
}

// A hold on a type never registered would never be cleared (a monitor
// clears the entries of registered types): following one, or waiting on
// one of its jobs, is refused and writes nothing.
func TestHoldOfUnknownTypeRefused(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	for _, types := range [][]string{{"nosuch"}, {"email", "nosuch"}} {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := q.Follow(fctx, fdbq.FollowOptions{Types: types}, func(fdbq.Event) error { return nil })
		cancel()
		if !errors.Is(err, fdbq.ErrUnknownType) || !strings.Contains(err.Error(), "nosuch") {
			t.Fatalf("follow of %q: %v, want ErrUnknownType naming nosuch", types, err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := q.WaitOne(wctx, "nosuch", "a", fdbq.Finished); !errors.Is(err, fdbq.ErrUnknownType) && !errors.Is(err, fdbq.ErrNotFound) {
		t.Fatalf("wait on a job of an unknown type: %v, want ErrUnknownType or ErrNotFound", err)
	}
	for _, typ := range []string{"nosuch", "email"} {
		if n := len(interestEntries(t, q, typ)); n != 0 {
			t.Errorf("type %s: %d interest entries", typ, n)
		}
		if n := interestCount(t, q, typ); n != 0 {
			t.Errorf("type %s: interest count %d", typ, n)
		}
		if n := kv.DecodeInt64(rawGet(t, q, tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{25, typ}))); n != 0 {
			t.Errorf("type %s: events count %d", typ, n)
		}
	}
	// The type registered, it is followed.
	if err := q.SetType(ctx, q.DB(), "nosuch", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	f := startFollow(t, q, fdbq.FollowOptions{Types: []string{"nosuch"}})
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "nosuch", ID: "a"}); err != nil {
		t.Fatal(err)
	}
	f.expect(t, "nosuch", "a pending")
}
