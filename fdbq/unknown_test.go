package fdbq_test

import (
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// TestUnknownCommitThenInterference: every operation answers what it did,
// also when its commit applied, answered commit_unknown_result, and
// another client moved the job before the retry. The store's commit-once
// transactions tell the retry that the commit applied, so the operation
// does not run again against a job that has moved on: ErrHalt,
// ErrWrongState and ErrNotFound mean that nothing of the call committed,
// success that it committed exactly once.
func TestUnknownCommitThenInterference(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup prepares job a and returns what the operation needs.
		setup func(x *trQ) *fdbq.Lease
		// op is the operation whose commit applies and is reported
		// unknown; between runs after it applied, before the retry.
		op      func(x *trQ, l *fdbq.Lease) error
		between func(x *trQ, l *fdbq.Lease)
		// check runs after op returned nil.
		check func(x *trQ, l *fdbq.Lease)
	}{
		{
			name:  "finish, then re-added and accepted by another worker",
			setup: func(x *trQ) *fdbq.Lease { x.add(fdbq.NewJob{ID: "a"}); return x.acceptOne("a") },
			op:    func(x *trQ, l *fdbq.Lease) error { return x.q.Finish(x.ctx, x.q.DB(), l, trJS(`"done"`)) },
			between: func(x *trQ, _ *fdbq.Lease) {
				x.add(fdbq.NewJob{ID: "a"})
				x.acceptOne("a")
			},
			check: func(x *trQ, _ *fdbq.Lease) { x.is("a", fdbq.Running, "", 1) },
		},
		{
			name:    "fail with attempts left, then accepted by another worker",
			setup:   func(x *trQ) *fdbq.Lease { x.add(fdbq.NewJob{ID: "a"}); return x.acceptOne("a") },
			op:      func(x *trQ, l *fdbq.Lease) error { return x.q.Fail(x.ctx, x.q.DB(), l, "boom") },
			between: func(x *trQ, _ *fdbq.Lease) { x.c.Advance(time.Second); x.acceptOne("a") },
			check:   func(x *trQ, _ *fdbq.Lease) { x.is("a", fdbq.Running, "", 2) },
		},
		{
			name:    "resubmit, then accepted by another worker",
			setup:   func(x *trQ) *fdbq.Lease { x.add(fdbq.NewJob{ID: "a"}); return x.acceptOne("a") },
			op:      func(x *trQ, l *fdbq.Lease) error { return x.q.Resubmit(x.ctx, x.q.DB(), l, time.Time{}) },
			between: func(x *trQ, _ *fdbq.Lease) { x.acceptOne("a") },
			check:   func(x *trQ, _ *fdbq.Lease) { x.is("a", fdbq.Running, "", 1) },
		},
		{
			name:  "cancel",
			setup: func(x *trQ) *fdbq.Lease { x.add(fdbq.NewJob{ID: "a"}); return nil },
			op:    func(x *trQ, _ *fdbq.Lease) error { return x.q.Cancel(x.ctx, x.q.DB(), "email", "a") },
			check: func(x *trQ, _ *fdbq.Lease) { x.is("a", fdbq.Finished, fdbq.Canceled, 0) },
		},
		{
			name:  "remove",
			setup: func(x *trQ) *fdbq.Lease { x.add(fdbq.NewJob{ID: "a"}); return nil },
			op:    func(x *trQ, _ *fdbq.Lease) error { return x.q.Remove(x.ctx, x.q.DB(), "email", "a") },
			check: func(x *trQ, _ *fdbq.Lease) { x.gone("a") },
		},
		{
			name: "requeue",
			setup: func(x *trQ) *fdbq.Lease {
				x.add(fdbq.NewJob{ID: "a"})
				trMust(x.t, "cancel", x.q.Cancel(x.ctx, x.q.DB(), "email", "a"))
				return nil
			},
			op:    func(x *trQ, _ *fdbq.Lease) error { return x.q.Requeue(x.ctx, x.q.DB(), "email", "a") },
			check: func(x *trQ, _ *fdbq.Lease) { x.is("a", fdbq.Pending, "", 0) },
		},
		{
			name:  "add, then removed by someone",
			setup: func(*trQ) *fdbq.Lease { return nil },
			op: func(x *trQ, _ *fdbq.Lease) error {
				_, err := x.q.Add(x.ctx, x.q.DB(), fdbq.NewJob{Type: "email", ID: "a"})
				return err
			},
			between: func(x *trQ, _ *fdbq.Lease) {
				trMust(x.t, "remove", x.q.Remove(x.ctx, x.q.DB(), "email", "a"))
			},
			check: func(x *trQ, _ *fdbq.Lease) { x.gone("a") },
		},
		{
			name:  "batch naming one id twice, then accepted and finished",
			setup: func(*trQ) *fdbq.Lease { return nil },
			op: func(x *trQ, _ *fdbq.Lease) error {
				_, err := x.q.AddBatch(x.ctx, x.q.DB(), []fdbq.NewJob{
					{Type: "email", ID: "a", Data: trJS(`1`)},
					{Type: "email", ID: "a", Data: trJS(`2`)},
				})
				return err
			},
			between: func(x *trQ, _ *fdbq.Lease) {
				l := x.acceptOne("a")
				trMust(x.t, "finish", x.q.Finish(x.ctx, x.q.DB(), l, nil))
			},
			// Run once: finished, not sent round again by a replayed
			// resubmit.
			check: func(x *trQ, _ *fdbq.Lease) { x.is("a", fdbq.Finished, fdbq.Succeeded, 1) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, b := newTrUnknownXQ(t)
			l := tc.setup(x)
			n := b.hits.Load()
			b.unknownOnce(func() {
				if tc.between != nil {
					tc.between(x, l)
				}
			})
			trMust(t, tc.name+": the operation whose commit applied", tc.op(x, l))
			if b.hits.Load() != n+1 {
				t.Fatal("no commit_unknown_result was injected")
			}
			tc.check(x, l)
		})
	}
}

// TestReAddPendingKeepsItsPlace: re-adding a pending job with the same
// data and no scheduled time writes nothing and leaves the job where it
// was in the queue (couch_jobs: a resubmit that changes nothing is
// read-only), so a periodic re-add does not starve it; new data is
// written without moving it either.
func TestReAddPendingKeepsItsPlace(t *testing.T) {
	x := newTrQ(t)
	for _, id := range []string{"a", "b", "c"} {
		x.add(fdbq.NewJob{ID: id, Data: trJS(`{"n":1}`)})
		x.c.Advance(time.Millisecond)
	}
	rawBefore, changeBefore := x.raw(trJobKey("email", "a")), x.raw(trChangeKey("email"))
	x.c.Advance(time.Second)
	x.add(fdbq.NewJob{ID: "a", Data: trJS(`{"n":1}`)})
	if got := x.raw(trJobKey("email", "a")); string(got) != string(rawBefore) {
		t.Fatal("re-adding a pending job unchanged rewrote its record")
	}
	if got := x.raw(trChangeKey("email")); string(got) != string(changeBefore) {
		t.Fatal("re-adding a pending job unchanged moved the type's change counter")
	}
	x.add(fdbq.NewJob{ID: "b", Data: trJS(`{"n":2}`)})
	if j := x.get("b"); string(j.Data) != `{"n":2}` {
		t.Fatalf("re-add with new data: stored %s", j.Data)
	}
	strict := fdbq.AcceptOptions{Max: 1, Window: 1}
	for _, want := range []string{"a", "b", "c"} {
		ls := x.accept(strict)
		if got := trLeaseIDs(ls); len(got) != 1 || got[0] != want {
			t.Fatalf("accept in queue order took %v, want %s", got, want)
		}
	}
}
