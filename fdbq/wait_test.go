package fdbq_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

type waitOutcome struct {
	results []fdbq.WaitResult
	err     error
}

func waitInBackground(ctx context.Context, q *fdbq.Queue, ids []string, state fdbq.State) <-chan waitOutcome {
	ch := make(chan waitOutcome, 1)
	go func() {
		res, err := q.Wait(ctx, "email", ids, state)
		ch <- waitOutcome{res, err}
	}()
	return ch
}

// startWaiting starts a Wait through a queue whose commits signal, and
// returns once its first transaction committed: it read the jobs, found
// some not there yet and set its watch.
func startWaiting(t *testing.T, ctx context.Context, q *fdbq.Queue, c *clock, ids []string, state fdbq.State) (<-chan waitOutcome, <-chan error) {
	t.Helper()
	hq, hb := hookedQueue(q, c.Now)
	commits := signalCommits(hb)
	res := waitInBackground(ctx, hq, ids, state)
	if err := recvWithin(t, commits, "the wait transaction"); err != nil {
		t.Fatal(err)
	}
	select {
	case out := <-res:
		t.Fatalf("wait returned before anything happened: %+v %v", out.results, out.err)
	default:
	}
	return res, commits
}

func TestWaitOneReturnsWhenWorkerFinishes(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	addJob(t, q, fdbq.NewJob{ID: "a"})
	res, _ := startWaiting(t, ctx, q, c, []string{"a"}, fdbq.Finished)

	worker := make(chan error, 1)
	go func() {
		ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{})
		if err == nil && len(ls) != 1 {
			err = errors.New("worker accepted nothing")
		}
		if err == nil {
			err = q.Finish(ctx, q.DB(), ls[0], json.RawMessage(`{"sent":true}`))
		}
		worker <- err
	}()
	out := recvWithin(t, res, "the wait")
	if err := recvWithin(t, worker, "the worker"); err != nil {
		t.Fatal(err)
	}
	if out.err != nil || len(out.results) != 1 {
		t.Fatalf("wait: %+v %v", out.results, out.err)
	}
	j := out.results[0].Job
	if out.results[0].Err != nil || j == nil || j.State != fdbq.Finished || j.Outcome != fdbq.Succeeded || string(j.Result) != `{"sent":true}` {
		t.Fatalf("wait result: %+v %v", j, out.results[0].Err)
	}
}

func TestWaitManyJobs(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	ids := []string{"a", "b", "c", "d"}
	for _, id := range ids {
		addJob(t, q, fdbq.NewJob{ID: id})
	}
	waitFor := append([]string{"missing"}, ids...)
	res, _ := startWaiting(t, ctx, q, c, waitFor, fdbq.Finished)

	// One at a time: the waiter wakes on each change and must go on
	// waiting until the last job is done.
	worker := make(chan error, 1)
	go func() {
		for range ids {
			ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{})
			if err != nil {
				worker <- err
				return
			}
			if len(ls) != 1 {
				worker <- errors.New("worker accepted nothing")
				return
			}
			if ls[0].ID == "c" {
				err = q.Cancel(ctx, q.DB(), "email", "c")
			} else {
				err = q.Finish(ctx, q.DB(), ls[0], nil)
			}
			if err != nil {
				worker <- err
				return
			}
		}
		worker <- nil
	}()
	out := recvWithin(t, res, "the wait")
	if err := recvWithin(t, worker, "the worker"); err != nil {
		t.Fatal(err)
	}
	if out.err != nil || len(out.results) != len(waitFor) {
		t.Fatalf("wait: %+v %v", out.results, out.err)
	}
	if r := out.results[0]; !errors.Is(r.Err, fdbq.ErrNotFound) || r.Job != nil {
		t.Fatalf("missing job: %+v", r)
	}
	for i, id := range ids {
		r := out.results[i+1]
		if r.Err != nil || r.Job == nil || r.Job.ID != id || r.Job.State != fdbq.Finished {
			t.Fatalf("result %d: %+v %v, want %s finished", i+1, r.Job, r.Err, id)
		}
		want := fdbq.Succeeded
		if id == "c" {
			want = fdbq.Canceled
		}
		if r.Job.Outcome != want {
			t.Fatalf("%s: outcome %s, want %s", id, r.Job.Outcome, want)
		}
	}
}

func TestWaitRemovedJobIsNotFound(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	addJob(t, q, fdbq.NewJob{ID: "a"})
	res, _ := startWaiting(t, ctx, q, c, []string{"a"}, fdbq.Finished)
	if err := q.Remove(ctx, q.DB(), "email", "a"); err != nil {
		t.Fatal(err)
	}
	out := recvWithin(t, res, "the wait")
	if out.err != nil || len(out.results) != 1 || !errors.Is(out.results[0].Err, fdbq.ErrNotFound) {
		t.Fatalf("wait for a removed job: %+v %v", out.results, out.err)
	}
	if _, err := q.WaitOne(ctx, "email", "a", fdbq.Finished); !errors.Is(err, fdbq.ErrNotFound) {
		t.Fatalf("WaitOne for a removed job: %v", err)
	}
}

func TestWaitRunningReturnsOnceAccepted(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	addJob(t, q, fdbq.NewJob{ID: "a"})
	res, _ := startWaiting(t, ctx, q, c, []string{"a"}, fdbq.Running)
	// A change to another job wakes the waiter, which must wait on.
	addJob(t, q, fdbq.NewJob{ID: "other", ScheduledAt: c.Now().Add(time.Hour)})
	ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{})
	if err != nil || len(ls) != 1 || ls[0].ID != "a" {
		t.Fatalf("accept: %v %v", leaseIDsOf(ls), err)
	}
	out := recvWithin(t, res, "the wait")
	if out.err != nil {
		t.Fatal(out.err)
	}
	if j := out.results[0].Job; j == nil || j.State != fdbq.Running || j.Attempts != 1 {
		t.Fatalf("wait for running: %+v %v", j, out.results[0].Err)
	}
}

func TestWaitContextCancel(t *testing.T) {
	q, c := newQueue(t)
	addJob(t, q, fdbq.NewJob{ID: "a"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, _ := startWaiting(t, ctx, q, c, []string{"a"}, fdbq.Finished)
	cancel()
	out := recvWithin(t, res, "the cancelled wait")
	if !errors.Is(out.err, context.Canceled) {
		t.Fatalf("cancelled wait: %+v %v", out.results, out.err)
	}
}

func TestWaitAlreadyThereReturnsAtOnce(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	addJob(t, q, fdbq.NewJob{ID: "p"})
	addJob(t, q, fdbq.NewJob{ID: "f"})
	for _, l := range acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10}) {
		if l.ID == "f" {
			if err := q.Finish(ctx, q.DB(), l, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	addJob(t, q, fdbq.NewJob{ID: "r"})
	// "p" was accepted along with "f"; put it back to pending.
	if err := q.Cancel(ctx, q.DB(), "email", "p"); err != nil {
		t.Fatal(err)
	}
	if err := q.Requeue(ctx, q.DB(), "email", "p"); err != nil {
		t.Fatal(err)
	}

	hq, hb := hookedQueue(q, c.Now)
	commits := signalCommits(hb)
	for _, tc := range []struct {
		id    string
		state fdbq.State
		want  fdbq.State
	}{
		{"p", fdbq.Pending, fdbq.Pending},
		{"r", fdbq.Pending, fdbq.Pending},
		{"f", fdbq.Finished, fdbq.Finished},
		// A finished job will not reach an earlier state: waiting for one
		// returns it as it is.
		{"f", fdbq.Running, fdbq.Finished},
		{"f", fdbq.Pending, fdbq.Finished},
	} {
		out := recvWithin(t, waitInBackground(ctx, hq, []string{tc.id}, tc.state), "a wait that should return at once")
		if out.err != nil || out.results[0].Err != nil || out.results[0].Job.State != tc.want {
			t.Fatalf("wait %s for %s: %+v %v", tc.id, tc.state, out.results, out.err)
		}
		if n := len(commits); n != 1 {
			t.Fatalf("wait %s for %s took %d transactions, want 1", tc.id, tc.state, n)
		}
		<-commits
	}
	if _, err := hq.WaitOne(ctx, "email", "never", fdbq.Finished); !errors.Is(err, fdbq.ErrNotFound) {
		t.Fatalf("wait for a job that never existed: %v", err)
	}
	if _, err := hq.WaitOne(ctx, "email", "p", fdbq.State("bogus")); !errors.Is(err, fdbq.ErrInvalidJob) {
		t.Fatalf("wait for a bogus state: %v", err)
	}
}
