package fdbq_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv/embedded"
)

// End says what it did to the job, and the stored job agrees: each way
// of ending an attempt, with attempts left and without.
func TestEnd(t *testing.T) {
	later := time.UnixMilli(1_800_000_000_000)
	for _, tc := range []struct {
		name    string
		failed  int // attempts failed before the one that ends
		e       fdbq.Ending
		want    fdbq.Ended // At zero: any time after now, the stored one
		err     string
		snoozes int
	}{
		{name: "succeeded", e: fdbq.Ending{How: fdbq.AttemptSucceeded, Result: json.RawMessage(`{"ok":1}`)},
			want: fdbq.Ended{State: fdbq.Finished, Outcome: fdbq.Succeeded, Attempts: 1}},
		{name: "failed, backoff", e: fdbq.Ending{How: fdbq.AttemptFailed, Cause: "boom"},
			want: fdbq.Ended{State: fdbq.Pending, Attempts: 1, Retried: true}, err: "boom"},
		{name: "failed, at a time", e: fdbq.Ending{How: fdbq.AttemptFailed, Cause: "boom", At: later},
			want: fdbq.Ended{State: fdbq.Pending, At: later, Attempts: 1, Retried: true}, err: "boom"},
		{name: "failed, last attempt, at a time", failed: 2, e: fdbq.Ending{How: fdbq.AttemptFailed, Cause: "boom", At: later},
			want: fdbq.Ended{State: fdbq.Finished, Outcome: fdbq.Failed, Attempts: 3}, err: "boom"},
		{name: "canceled with attempts left", e: fdbq.Ending{How: fdbq.AttemptCanceled, Cause: "no such user"},
			want: fdbq.Ended{State: fdbq.Finished, Outcome: fdbq.Canceled, Attempts: 1}, err: "no such user"},
		{name: "snoozed", failed: 1, e: fdbq.Ending{How: fdbq.AttemptSnoozed, At: later},
			want: fdbq.Ended{State: fdbq.Pending, At: later, Attempts: 1}, snoozes: 1},
		{name: "snoozed to now", e: fdbq.Ending{How: fdbq.AttemptSnoozed},
			want: fdbq.Ended{State: fdbq.Pending, Attempts: 0}, snoozes: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fdbq.DefaultTypeSettings()
			s.Retry = fdbq.RetryPolicy{MaxAttempts: 3, Backoff: fdbq.Constant, Base: time.Second}
			q, c := openTestQueue(t, nil, s)
			ctx := context.Background()
			addJob(t, q, fdbq.NewJob{ID: "a"})
			for range tc.failed {
				l := acceptNoWait(t, q, fdbq.AcceptOptions{})[0]
				if err := q.Fail(ctx, q.DB(), l, "first"); err != nil {
					t.Fatal(err)
				}
				c.Advance(time.Hour)
			}
			l := acceptNoWait(t, q, fdbq.AcceptOptions{})[0]
			got, err := q.End(ctx, q.DB(), l, tc.e)
			if err != nil {
				t.Fatalf("End: %v", err)
			}
			j, err := q.Get(ctx, q.DB(), "email", "a")
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want.State == fdbq.Pending {
				if want.At.IsZero() {
					want.At = j.ScheduledAt
					if j.ScheduledAt.Before(c.Now()) {
						t.Errorf("the job runs again at %v, before now (%v)", j.ScheduledAt, c.Now())
					}
				}
				if !j.ScheduledAt.Equal(want.At) {
					t.Errorf("stored job runs at %v, want %v", j.ScheduledAt, want.At)
				}
			}
			if !got.At.Equal(want.At) {
				t.Errorf("End said At %v, want %v", got.At, want.At)
			}
			got.At, want.At = time.Time{}, time.Time{}
			if got != want {
				t.Errorf("End answered %+v, want %+v", got, want)
			}
			if j.State != tc.want.State || j.Outcome != tc.want.Outcome || j.Attempts != tc.want.Attempts || j.Error != tc.err || j.Snoozes != tc.snoozes {
				t.Errorf("stored job: %s/%s, %d attempts, error %q, %d snoozes; want %+v, error %q and %d snoozes",
					j.State, j.Outcome, j.Attempts, j.Error, j.Snoozes, tc.want, tc.err, tc.snoozes)
			}
			// The lease has ended its attempt: a heartbeat is refused.
			if err := q.Heartbeat(ctx, q.DB(), l, fdbq.HeartbeatOptions{}); !errors.Is(err, fdbq.ErrHalt) {
				t.Errorf("heartbeat after End: %v, want ErrHalt", err)
			}
		})
	}
}

// A snoozed job's next lease says how often it was snoozed, and its
// attempt number is the one it had: the snooze did not count.
func TestEndSnoozeVisibleToNextAttempt(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	addJob(t, q, fdbq.NewJob{ID: "a"})
	for i := 1; i <= 3; i++ {
		l := acceptNoWait(t, q, fdbq.AcceptOptions{})[0]
		if l.Attempts != 1 || l.Snoozes != i-1 {
			t.Fatalf("lease %d: attempt %d, %d snoozes; want attempt 1, %d snoozes", i, l.Attempts, l.Snoozes, i-1)
		}
		if _, err := q.End(ctx, q.DB(), l, fdbq.Ending{How: fdbq.AttemptSnoozed, At: c.Now().Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		if ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{}); err != nil || len(ls) != 0 {
			t.Fatalf("accept of a job snoozed for a minute: %d leases, %v", len(ls), err)
		}
		c.Advance(time.Minute)
	}
}

// A call whose commit applied and answered commit_unknown_result
// commits once and answers as the call that wrote (the store's commit
// markers tell its retry that it applied); the same call sent again
// afterwards (a worker that did not hear the answer) writes nothing and
// says it was a replay, with what the first call did.
func TestEndReplayed(t *testing.T) {
	for _, e := range []fdbq.Ending{
		{How: fdbq.AttemptSucceeded},
		{How: fdbq.AttemptFailed, Cause: "boom"},
		{How: fdbq.AttemptCanceled, Cause: "no"},
		{How: fdbq.AttemptSnoozed},
	} {
		t.Run(e.How.String(), func(t *testing.T) {
			st, err := embedded.Open("", embedded.Options{InMemory: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			x := newFtQ(t, st, "replay")
			x.add("a", `{}`)
			x.accept()
			x.b.applied = 0
			x.b.arm("1021 after applying", nil)
			got, err := x.q.End(x.ctx, x.db, x.lease, e)
			if err != nil {
				t.Fatalf("End: %v", err)
			}
			if x.b.hits != 1 || x.b.applied != 1 {
				t.Fatalf("%d faults, %d commits that applied: want 1 and 1", x.b.hits, x.b.applied)
			}
			if got.Replayed {
				t.Errorf("End whose commit applied answered %+v: a replay", got)
			}
			again, err := x.q.End(x.ctx, x.db, x.lease, e)
			if err != nil || !again.Replayed || again.State != got.State || again.Retried != got.Retried || again.Outcome != got.Outcome {
				t.Errorf("End sent again: %+v, %v; the first said %+v", again, err, got)
			}
			if x.b.applied != 1 {
				t.Errorf("End sent again wrote: %d commits applied", x.b.applied)
			}
			// The attempt's error is in the history once, however often
			// its ending was sent.
			want := 0
			if e.How == fdbq.AttemptFailed || e.How == fdbq.AttemptCanceled {
				want = 1
			}
			if j, err := x.q.Get(x.ctx, x.db, "email", "a"); err != nil || len(j.Errors) != want {
				t.Errorf("after End and its replay: %v, history %+v, want %d entries", err, j.Errors, want)
			}
			// Another way to end the same attempt is refused: the lease
			// ended it already.
			other := fdbq.Ending{How: fdbq.AttemptCanceled}
			if e.How == fdbq.AttemptCanceled {
				other.How = fdbq.AttemptSucceeded
			}
			if _, err := x.q.End(x.ctx, x.db, x.lease, other); !errors.Is(err, fdbq.ErrHalt) {
				t.Errorf("End %v after %v: %v, want ErrHalt", other.How, e.How, err)
			}
		})
	}
}

// End refuses what it cannot do before reading the store.
func TestEndRefusesBadEnding(t *testing.T) {
	q, _ := newQueue(t)
	addJob(t, q, fdbq.NewJob{ID: "a"})
	l := acceptNoWait(t, q, fdbq.AcceptOptions{})[0]
	for _, e := range []fdbq.Ending{{How: fdbq.AttemptEnd(9)}, {How: fdbq.AttemptSucceeded, Result: json.RawMessage(`{`)}} {
		if _, err := q.End(context.Background(), q.DB(), l, e); !errors.Is(err, fdbq.ErrInvalidJob) {
			t.Errorf("End(%+v): %v, want ErrInvalidJob", e, err)
		}
	}
	stateIs(t, q, "a", fdbq.Running)
}

// Each failed attempt leaves its error in the job's history, with its
// attempt and time: a failure, a take-back by the monitor, a last
// failure; a start clears the last error but not the history, and a
// requeue keeps it.
func TestAttemptErrors(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	m := fdbq.NewMonitor(q, fdbq.MonitorOptions{Clock: c.Now})
	addJob(t, q, fdbq.NewJob{ID: "a", MaxAttempts: 3})
	t1 := c.Now()
	l := acceptNoWait(t, q, fdbq.AcceptOptions{})[0]
	if _, err := q.End(ctx, q.DB(), l, fdbq.Ending{How: fdbq.AttemptFailed, Cause: "smtp: 421 try later"}); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Minute)
	acceptNoWait(t, q, fdbq.AcceptOptions{})
	if j := stateIs(t, q, "a", fdbq.Running); j.Error != "" || len(j.Errors) != 1 {
		t.Fatalf("a started job: error %q, history %+v", j.Error, j.Errors)
	}
	sweep(t, m)
	c.Advance(activityTimeout)
	t3 := c.Now()
	if st := sweep(t, m); st.Recycled != 1 {
		t.Fatalf("sweep: %+v", st)
	}
	c.Advance(time.Minute)
	l = acceptNoWait(t, q, fdbq.AcceptOptions{})[0]
	c.Advance(time.Second)
	t4 := c.Now()
	if _, err := q.End(ctx, q.DB(), l, fdbq.Ending{How: fdbq.AttemptFailed, Cause: "smtp: 550 no such user"}); err != nil {
		t.Fatal(err)
	}
	j := stateIs(t, q, "a", fdbq.Finished)
	want := []fdbq.AttemptError{
		{Attempt: 1, At: t1, Error: "smtp: 421 try later"},
		{Attempt: 2, At: t3, Error: "activity timeout: no heartbeat for " + activityTimeout.String()},
		{Attempt: 3, At: t4, Error: "smtp: 550 no such user"},
	}
	same := func(got []fdbq.AttemptError) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if got[i].Attempt != want[i].Attempt || !got[i].At.Equal(want[i].At) || got[i].Error != want[i].Error {
				return false
			}
		}
		return true
	}
	if j.Outcome != fdbq.Failed || !same(j.Errors) {
		t.Fatalf("history %+v, want %+v", j.Errors, want)
	}
	if err := q.Requeue(ctx, q.DB(), "email", "a"); err != nil {
		t.Fatal(err)
	}
	if j := stateIs(t, q, "a", fdbq.Pending); !same(j.Errors) {
		t.Fatalf("history after a requeue %+v", j.Errors)
	}
}
