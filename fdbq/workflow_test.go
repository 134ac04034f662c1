package fdbq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv/kvtest"
)

func wfJob(name string, deps ...string) fdbq.WorkflowJob {
	return fdbq.WorkflowJob{Name: name, Job: fdbq.NewJob{Type: "email", Data: json.RawMessage(fmt.Sprintf(`{"step":%q}`, name))}, DependsOn: deps}
}

// diamond is a → (b, c) → d.
func diamond(id string, p fdbq.WorkflowPolicy) fdbq.NewWorkflow {
	return fdbq.NewWorkflow{ID: id, Policy: p, Jobs: []fdbq.WorkflowJob{wfJob("a"), wfJob("b", "a"), wfJob("c", "a"), wfJob("d", "b", "c")}}
}

// states returns the workflow's node states as "name=state[/outcome]".
func states(t *testing.T, q *fdbq.Queue, id string) string {
	t.Helper()
	in, err := q.GetWorkflow(context.Background(), q.DB(), id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range in.Jobs {
		s := n.Name + "=" + n.State
		if n.Outcome != "" {
			s += "/" + string(n.Outcome)
		}
		if n.State == fdbq.NodeAdded && n.Job != nil {
			s += ":" + string(n.Job.State)
		}
		out = append(out, s)
	}
	if in.Done {
		out = append(out, "done")
	}
	return strings.Join(out, " ")
}

// work accepts the due jobs of "email", ends name's as how says, and
// hands the others back (snoozed until now).
func work(t *testing.T, q *fdbq.Queue, wf, name string, how fdbq.AttemptEnd) *fdbq.Lease {
	t.Helper()
	ctx := context.Background()
	ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	var mine *fdbq.Lease
	for _, l := range ls {
		if l.ID != fdbq.WorkflowJobID(wf, name) {
			if _, err := q.End(ctx, q.DB(), l, fdbq.Ending{How: fdbq.AttemptSnoozed}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		mine = l
	}
	if mine == nil || mine.Workflow != wf || mine.Node != name {
		t.Fatalf("%s is not due (accepted %v)", name, ls)
	}
	if _, err := q.End(ctx, q.DB(), mine, fdbq.Ending{How: how, Result: json.RawMessage(`"` + name + `-result"`), Cause: name + " broke"}); err != nil {
		t.Fatal(err)
	}
	return mine
}

func noneDue(t *testing.T, q *fdbq.Queue) {
	t.Helper()
	ls, err := q.Accept(context.Background(), "email", fdbq.AcceptOptions{Max: 10})
	if err != nil || len(ls) != 0 {
		t.Fatalf("jobs due that should wait: %v %v", ls, err)
	}
}

func TestWorkflowDiamond(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	in, err := q.AddWorkflow(ctx, q.DB(), diamond("w1", fdbq.CancelDependents))
	if err != nil {
		t.Fatal(err)
	}
	if in.ID != "w1" || len(in.Jobs) != 4 || in.Done {
		t.Fatalf("added %+v", in)
	}
	if got := states(t, q, "w1"); got != "a=added:pending b=waiting c=waiting d=waiting" {
		t.Fatal(got)
	}
	work(t, q, "w1", "a", fdbq.AttemptSucceeded)
	if got := states(t, q, "w1"); got != "a=done/succeeded b=added:pending c=added:pending d=waiting" {
		t.Fatal(got)
	}
	work(t, q, "w1", "b", fdbq.AttemptSucceeded)
	if got := states(t, q, "w1"); got != "a=done/succeeded b=done/succeeded c=added:pending d=waiting" {
		t.Fatal(got)
	}
	work(t, q, "w1", "c", fdbq.AttemptSucceeded)
	parents, err := q.Parents(ctx, q.DB(), "email", "w1:d")
	if err != nil || len(parents) != 2 || string(parents["b"].Result) != `"b-result"` || string(parents["c"].Result) != `"c-result"` {
		t.Fatalf("parents of d: %v %v", parents, err)
	}
	work(t, q, "w1", "d", fdbq.AttemptSucceeded)
	if got := states(t, q, "w1"); got != "a=done/succeeded b=done/succeeded c=done/succeeded d=done/succeeded done" {
		t.Fatal(got)
	}
	if _, err := q.AddWorkflow(ctx, q.DB(), diamond("w1", fdbq.CancelDependents)); !errors.Is(err, fdbq.ErrWorkflowExists) {
		t.Fatalf("adding w1 again: %v", err)
	}
	if p, err := q.Parents(ctx, q.DB(), "email", "w1:a"); err != nil || len(p) != 0 {
		t.Fatalf("parents of a root: %v %v", p, err)
	}
}

func TestWorkflowFailureCancelsDependents(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	w := diamond("w2", fdbq.CancelDependents)
	w.Jobs[2].Job.MaxAttempts = 1 // c fails at once
	if _, err := q.AddWorkflow(ctx, q.DB(), w); err != nil {
		t.Fatal(err)
	}
	work(t, q, "w2", "a", fdbq.AttemptSucceeded)
	work(t, q, "w2", "b", fdbq.AttemptSucceeded)
	work(t, q, "w2", "c", fdbq.AttemptFailed)
	noneDue(t, q)
	if got := states(t, q, "w2"); got != "a=done/succeeded b=done/succeeded c=done/failed d=skipped done" {
		t.Fatal(got)
	}
}

func TestWorkflowRunDependents(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	w := diamond("w3", fdbq.RunDependents)
	w.Jobs[0].Job.MaxAttempts = 1
	if _, err := q.AddWorkflow(ctx, q.DB(), w); err != nil {
		t.Fatal(err)
	}
	work(t, q, "w3", "a", fdbq.AttemptFailed)
	if got := states(t, q, "w3"); got != "a=done/failed b=added:pending c=added:pending d=waiting" {
		t.Fatal(got)
	}
	p, err := q.Parents(ctx, q.DB(), "email", "w3:b")
	if err != nil || p["a"].Outcome != fdbq.Failed || p["a"].Error != "a broke" {
		t.Fatalf("b reads a: %+v %v", p["a"], err)
	}
}

// TestWorkflowRemovedParent: a job removed before it finished counts as
// not succeeded.
func TestWorkflowRemovedParent(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	if _, err := q.AddWorkflow(ctx, q.DB(), diamond("w4", fdbq.CancelDependents)); err != nil {
		t.Fatal(err)
	}
	if err := q.Remove(ctx, q.DB(), "email", "w4:a"); err != nil {
		t.Fatal(err)
	}
	if got := states(t, q, "w4"); got != "a=done/removed b=skipped c=skipped d=skipped done" {
		t.Fatal(got)
	}
}

func TestWorkflowCancel(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	w := fdbq.NewWorkflow{ID: "w5", Jobs: []fdbq.WorkflowJob{wfJob("a"), wfJob("b"), wfJob("c", "a"), wfJob("d", "c")}}
	if _, err := q.AddWorkflow(ctx, q.DB(), w); err != nil {
		t.Fatal(err)
	}
	ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 {
		t.Fatal(ls, err)
	}
	running := ls[0]
	in, err := q.CancelWorkflow(ctx, q.DB(), "w5")
	if err != nil || !in.Canceled || !in.Done {
		t.Fatalf("cancel: %+v %v", in, err)
	}
	got := states(t, q, "w5")
	if got != "a=done/canceled b=done/canceled c=skipped d=skipped done" {
		t.Fatal(got)
	}
	if err := q.Heartbeat(ctx, q.DB(), running, fdbq.HeartbeatOptions{}); !errors.Is(err, fdbq.ErrHalt) {
		t.Fatalf("heartbeat of a canceled workflow's job: %v", err)
	}
	noneDue(t, q)
	// Canceling again changes nothing.
	if _, err := q.CancelWorkflow(ctx, q.DB(), "w5"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.CancelWorkflow(ctx, q.DB(), "nope"); !errors.Is(err, fdbq.ErrUnknownWorkflow) {
		t.Fatalf("cancel of an unknown workflow: %v", err)
	}
}

func TestWorkflowWait(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	if _, err := q.AddWorkflow(ctx, q.DB(), diamond("w6", fdbq.CancelDependents)); err != nil {
		t.Fatal(err)
	}
	if in, err := q.WaitWorkflow(ctx, "w6", 0); err != nil || in.Done {
		t.Fatalf("wait 0 on a new workflow: %+v %v", in, err)
	}
	done := make(chan *fdbq.WorkflowInfo, 1)
	go func() {
		in, err := q.WaitWorkflow(ctx, "w6", time.Minute)
		if err != nil {
			t.Error(err)
		}
		done <- in
	}()
	for _, n := range []string{"a", "b", "c", "d"} {
		work(t, q, "w6", n, fdbq.AttemptSucceeded)
	}
	select {
	case in := <-done:
		if in == nil || !in.Done {
			t.Fatalf("wait returned %+v", in)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the wait did not return once the workflow was done")
	}
	if _, err := q.WaitWorkflow(ctx, "nope", 0); !errors.Is(err, fdbq.ErrUnknownWorkflow) {
		t.Fatalf("wait on an unknown workflow: %v", err)
	}
}

func TestWorkflowRefused(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	many := fdbq.NewWorkflow{ID: "big"}
	for i := range fdbq.MaxWorkflowJobs + 1 {
		many.Jobs = append(many.Jobs, wfJob(fmt.Sprintf("j%d", i)))
	}
	heavy := fdbq.NewWorkflow{ID: "heavy"}
	for i := range 50 {
		heavy.Jobs = append(heavy.Jobs, fdbq.WorkflowJob{Name: fmt.Sprintf("j%d", i),
			Job: fdbq.NewJob{Type: "email", Data: json.RawMessage(`"` + strings.Repeat("x", 89_000) + `"`)}})
	}
	unique := fdbq.NewWorkflow{ID: "u", Jobs: []fdbq.WorkflowJob{wfJob("a")}}
	unique.Jobs[0].Job.Unique = &fdbq.Unique{}
	withID := fdbq.NewWorkflow{ID: "i", Jobs: []fdbq.WorkflowJob{wfJob("a")}}
	withID.Jobs[0].Job.ID = "x"
	for _, c := range []struct {
		w    fdbq.NewWorkflow
		err  error
		want string
	}{
		{fdbq.NewWorkflow{ID: "e"}, fdbq.ErrInvalidWorkflow, "has no job"},
		{fdbq.NewWorkflow{ID: "c", Jobs: []fdbq.WorkflowJob{wfJob("a", "c"), wfJob("b", "a"), wfJob("c", "b"), wfJob("d")}}, fdbq.ErrInvalidWorkflow, "cycle among a, b, c"},
		{fdbq.NewWorkflow{ID: "s", Jobs: []fdbq.WorkflowJob{wfJob("a", "a")}}, fdbq.ErrInvalidWorkflow, "depends on itself"},
		{fdbq.NewWorkflow{ID: "u2", Jobs: []fdbq.WorkflowJob{wfJob("a", "zz")}}, fdbq.ErrInvalidWorkflow, `depends on "zz"`},
		{fdbq.NewWorkflow{ID: "d", Jobs: []fdbq.WorkflowJob{wfJob("a"), wfJob("a")}}, fdbq.ErrInvalidWorkflow, "two jobs a"},
		{fdbq.NewWorkflow{ID: "t", Jobs: []fdbq.WorkflowJob{wfJob("a"), wfJob("b", "a", "a")}}, fdbq.ErrInvalidWorkflow, "twice"},
		{fdbq.NewWorkflow{ID: "bad id", Jobs: []fdbq.WorkflowJob{wfJob("a")}}, fdbq.ErrInvalidWorkflow, "workflow id"},
		{fdbq.NewWorkflow{ID: "n", Jobs: []fdbq.WorkflowJob{wfJob("a:b")}}, fdbq.ErrInvalidWorkflow, "job name"},
		{fdbq.NewWorkflow{ID: "p", Policy: 9, Jobs: []fdbq.WorkflowJob{wfJob("a")}}, fdbq.ErrInvalidWorkflow, "policy"},
		{many, fdbq.ErrDataTooLarge, "at most 1000"},
		{heavy, fdbq.ErrDataTooLarge, "at most 4194304"},
		{unique, fdbq.ErrInvalidWorkflow, "cannot be unique"},
		{withID, fdbq.ErrInvalidWorkflow, "leave Job.ID empty"},
		{fdbq.NewWorkflow{ID: "ty", Jobs: []fdbq.WorkflowJob{wfJob("a"), {Name: "b", Job: fdbq.NewJob{Type: "sms"}, DependsOn: []string{"a"}}}}, fdbq.ErrUnknownType, "sms"},
	} {
		_, err := q.AddWorkflow(ctx, q.DB(), c.w)
		if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("workflow %s: %v, want %v saying %q", c.w.ID, err, c.err, c.want)
		}
	}
	// Nothing of a refused workflow was written.
	if n, _ := q.Count(ctx, q.DB(), "email", fdbq.Pending); n != 0 {
		t.Fatalf("%d jobs added by refused workflows", n)
	}
	if _, err := q.GetWorkflow(ctx, q.DB(), "ty"); !errors.Is(err, fdbq.ErrUnknownWorkflow) {
		t.Fatalf("a workflow refused for its type was stored: %v", err)
	}
}

// TestWorkflowAddRunTwice: AddWorkflow's transaction function run again
// after its commit applied answers the workflow, not that it exists.
func TestWorkflowAddRunTwice(t *testing.T) {
	q, _ := newQueue(t)
	in, err := q.AddWorkflow(context.Background(), rerun{q.DB()}, diamond("w7", fdbq.CancelDependents))
	if err != nil || in.ID != "w7" {
		t.Fatalf("add run twice: %+v %v", in, err)
	}
}

// TestWorkflowsConcurrent runs random workflows (DAGs of 1 to 12 jobs,
// either policy) with four workers at once through the fault-injecting
// store over the durable one: workers succeed, fail (two attempts each),
// or crash holding a job, which the activity monitor takes back. Each
// accepted job's dependencies must all have succeeded (under
// RunDependents: finished) — no child starts before them — and at the end
// every workflow is done, each job that all its dependencies allowed ran,
// and the others were skipped: none is left waiting. JOBSTAGE_SEED
// replays the workflows and the faults.
func TestWorkflowsConcurrent(t *testing.T) {
	seed := int64(jobtest.Seed(t))
	t.Logf("seed %d (JOBSTAGE_SEED replays it)", seed)
	rnd := rand.New(rand.NewPCG(uint64(seed), 23))
	base := openDisk(t, t.TempDir())
	ctx := context.Background()
	c := newClock()
	db, faults := kvtest.NewFaultyDB(base, kvtest.DefaultFaultOptions(seed))
	q := fdbq.New(db, fdbq.Options{Now: c.Now, Logger: slog.New(slog.DiscardHandler)})
	s := fdbq.DefaultTypeSettings()
	s.Retry = fdbq.RetryPolicy{MaxAttempts: 2, Backoff: fdbq.Constant, Base: time.Second}
	s.ActivityTimeout = 10 * time.Second
	if err := q.SetType(ctx, db, "email", s); err != nil {
		t.Fatal(err)
	}
	workflows := 20
	if testing.Short() {
		workflows = 8
	}
	policy := map[string]fdbq.WorkflowPolicy{}
	for w := range workflows {
		id := fmt.Sprintf("wf%d", w)
		nw := fdbq.NewWorkflow{ID: id, Policy: fdbq.WorkflowPolicy(rnd.IntN(2))}
		n := 1 + rnd.IntN(12)
		for i := range n {
			var deps []string
			for p := range i {
				if rnd.IntN(3) == 0 {
					deps = append(deps, fmt.Sprintf("n%d", p))
				}
			}
			nw.Jobs = append(nw.Jobs, wfJob(fmt.Sprintf("n%d", i), deps...))
		}
		if _, err := q.AddWorkflow(ctx, db, nw); err != nil {
			t.Fatal(err)
		}
		policy[id] = nw.Policy
	}
	var mu sync.Mutex
	var broken []string
	started := map[string]int{}
	worker := func(seed uint64) {
		r := rand.New(rand.NewPCG(seed, 1))
		ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 3})
		if err != nil {
			mu.Lock()
			broken = append(broken, fmt.Sprintf("accept: %v", err))
			mu.Unlock()
			return
		}
		for _, l := range ls {
			parents, err := q.Parents(ctx, db, "email", l.ID)
			mu.Lock()
			started[l.ID]++
			if err != nil {
				broken = append(broken, fmt.Sprintf("parents of %s: %v", l.ID, err))
			}
			for name, p := range parents {
				if p.State != fdbq.Finished || policy[l.Workflow] == fdbq.CancelDependents && p.Outcome != fdbq.Succeeded {
					broken = append(broken, fmt.Sprintf("%s started while its dependency %s is %s %s", l.ID, name, p.State, p.Outcome))
				}
			}
			mu.Unlock()
			how := fdbq.AttemptSucceeded
			switch x := r.IntN(10); {
			case x < 2:
				how = fdbq.AttemptFailed
			case x == 2:
				continue // the worker crashed: the monitor takes the job back
			}
			if _, err := q.End(ctx, db, l, fdbq.Ending{How: how, Cause: "x"}); err != nil && !errors.Is(err, fdbq.ErrHalt) {
				mu.Lock()
				broken = append(broken, fmt.Sprintf("end %s: %v", l.ID, err))
				mu.Unlock()
			}
		}
	}
	for round := 0; ; round++ {
		if round > 3000 {
			t.Fatalf("seed %d: the workflows did not finish", seed)
		}
		var wg sync.WaitGroup
		for range 4 {
			ws := rnd.Uint64()
			wg.Go(func() { worker(ws) })
		}
		wg.Wait()
		if len(broken) > 0 {
			t.Fatalf("seed %d: %s", seed, strings.Join(broken, "\n"))
		}
		c.Advance(time.Second)
		if round%10 == 9 {
			if _, err := staleSweep(ctx, q, fdbq.MonitorOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		done := true
		for w := range workflows {
			in, err := q.GetWorkflow(ctx, base, fmt.Sprintf("wf%d", w))
			if err != nil {
				t.Fatal(err)
			}
			done = done && in.Done
		}
		if done {
			break
		}
	}
	for w := range workflows {
		in, err := q.GetWorkflow(ctx, base, fmt.Sprintf("wf%d", w))
		if err != nil {
			t.Fatal(err)
		}
		outcome := map[string]fdbq.Outcome{}
		for _, n := range in.Jobs {
			outcome[n.Name] = n.Outcome
			allowed := true
			for _, d := range n.DependsOn {
				if outcome[d] == "" || in.Policy == fdbq.CancelDependents && outcome[d] != fdbq.Succeeded {
					allowed = false
				}
			}
			switch {
			case n.Err != nil:
				t.Fatalf("seed %d: %s: %v", seed, n.ID, n.Err)
			case allowed && (n.State != fdbq.NodeDone || n.Job == nil || n.Job.Outcome != n.Outcome || started[n.ID] == 0):
				t.Fatalf("seed %d: %s could run and is %s %s (job %+v)", seed, n.ID, n.State, n.Outcome, n.Job)
			case !allowed && (n.State != fdbq.NodeSkipped || started[n.ID] != 0):
				t.Fatalf("seed %d: %s could not run and is %s, started %d times", seed, n.ID, n.State, started[n.ID])
			}
		}
	}
	counts := faults.Counts()
	if counts.Conflicts+counts.UnknownApplied == 0 {
		t.Fatalf("seed %d: no fault injected: %+v", seed, counts)
	}
	t.Logf("%d jobs started; faults %+v", len(started), counts)
}
