package fdbq_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv/tuple"
)

func wfNodeKey(wf, name string) []byte {
	return tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{23, wf, 1, name})
}

// Remove of a workflow's job whose record does not decode clears it, but
// the workflow never learns: the node stays added with no job, the
// workflow is never done and its dependents wait for ever. Remove of a
// readable pending job counts as removed (TestWorkflowRemovedParent).
func TestWorkflowRemoveUnreadableJob(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	if _, err := q.AddWorkflow(ctx, q.DB(), diamond("wr", fdbq.CancelDependents)); err != nil {
		t.Fatal(err)
	}
	unPlant(t, q.DB(), trJobKey("email", "wr:a"), unreadableRecords["unknown format"])
	if err := q.Remove(ctx, q.DB(), "email", "wr:a"); err != nil {
		t.Fatal(err)
	}
	if got := states(t, q, "wr"); got != "a=done/removed b=skipped c=skipped d=skipped done" {
		t.Fatalf("after removing the unreadable a: %s", got)
	}
}

// A node damaged so that its job cannot be stored (data over
// MaxDataSize) must not keep its dependency from finishing.
func TestWorkflowDamagedNodeBlocksFinish(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	if _, err := q.AddWorkflow(ctx, q.DB(), diamond("wd", fdbq.CancelDependents)); err != nil {
		t.Fatal(err)
	}
	node := `{"type":"email","data":"` + strings.Repeat("x", 95_000) + `","depends_on":["a"],"remaining":1,"state":"waiting"}`
	unPlant(t, q.DB(), wfNodeKey("wd", "b"), []byte(node))
	ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 {
		t.Fatal(ls, err)
	}
	if err := q.Finish(ctx, q.DB(), ls[0], nil); err != nil {
		t.Fatalf("finish of a, whose dependent b's node is damaged: %v", err)
	}
}

// A damaged node (not JSON), a damaged header: the finish goes on.
func TestWorkflowDamagedRecordsFinish(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	if _, err := q.AddWorkflow(ctx, q.DB(), diamond("wx", fdbq.CancelDependents)); err != nil {
		t.Fatal(err)
	}
	unPlant(t, q.DB(), wfNodeKey("wx", "b"), []byte("{nope"))
	work(t, q, "wx", "a", fdbq.AttemptSucceeded)
	unPlant(t, q.DB(), tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{23, "wx", 0}), []byte("[1"))
	work(t, q, "wx", "c", fdbq.AttemptSucceeded)
	if _, err := q.GetWorkflow(ctx, q.DB(), "wx"); !errors.Is(err, fdbq.ErrCorrupt) {
		t.Fatalf("get of a damaged workflow: %v", err)
	}
}

// The monitor taking back a workflow job out of attempts fails it, and
// its dependents are skipped.
func TestWorkflowRecycledOutOfAttempts(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	w := diamond("wm", fdbq.CancelDependents)
	w.Jobs[0].Job.MaxAttempts = 1
	if _, err := q.AddWorkflow(ctx, q.DB(), w); err != nil {
		t.Fatal(err)
	}
	ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 {
		t.Fatal(ls, err)
	}
	st, err := staleSweep(ctx, q, fdbq.MonitorOptions{})
	if err != nil || st.Failed != 1 {
		t.Fatalf("sweep: %+v %v", st, err)
	}
	if got := states(t, q, "wm"); got != "a=done/failed b=skipped c=skipped d=skipped done" {
		t.Fatal(got)
	}
	if err := q.Finish(ctx, q.DB(), ls[0], nil); !errors.Is(err, fdbq.ErrHalt) {
		t.Fatalf("finish after recycle: %v", err)
	}
}

// CancelWorkflow while a job runs: its worker's Finish gets ErrHalt, and
// nothing of the finish is written.
func TestWorkflowCancelRunningFinish(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	if _, err := q.AddWorkflow(ctx, q.DB(), diamond("wc", fdbq.RunDependents)); err != nil {
		t.Fatal(err)
	}
	ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 {
		t.Fatal(ls, err)
	}
	if _, err := q.CancelWorkflow(ctx, q.DB(), "wc"); err != nil {
		t.Fatal(err)
	}
	if err := q.Finish(ctx, q.DB(), ls[0], json.RawMessage(`1`)); !errors.Is(err, fdbq.ErrHalt) {
		t.Fatalf("finish after cancel: %v", err)
	}
	if got := states(t, q, "wc"); got != "a=done/canceled b=skipped c=skipped d=skipped done" {
		t.Fatal(got)
	}
}

// Requeue of a canceled job of a canceled workflow: it runs again, and its
// finish under RunDependents must not add dependents the cancel skipped.
func TestWorkflowRequeueAfterCancel(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	if _, err := q.AddWorkflow(ctx, q.DB(), diamond("wq", fdbq.RunDependents)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.CancelWorkflow(ctx, q.DB(), "wq"); err != nil {
		t.Fatal(err)
	}
	if err := q.Requeue(ctx, q.DB(), "email", "wq:a"); err != nil {
		t.Fatal(err)
	}
	work(t, q, "wq", "a", fdbq.AttemptSucceeded)
	noneDue(t, q)
	if got := states(t, q, "wq"); got != "a=done/succeeded b=skipped c=skipped d=skipped done" {
		t.Fatal(got)
	}
}

// Add of a running workflow job's id (resubmit): when it finishes, it
// runs again, and the dependents wait for the run after.
func TestWorkflowResubmitWhileRunning(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	if _, err := q.AddWorkflow(ctx, q.DB(), diamond("ws", fdbq.CancelDependents)); err != nil {
		t.Fatal(err)
	}
	ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 {
		t.Fatal(ls, err)
	}
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: "ws:a", Data: json.RawMessage(`2`)}); err != nil {
		t.Fatal(err)
	}
	if err := q.Finish(ctx, q.DB(), ls[0], nil); err != nil {
		t.Fatal(err)
	}
	if got := states(t, q, "ws"); got != "a=added:pending b=waiting c=waiting d=waiting" {
		t.Fatal(got)
	}
	work(t, q, "ws", "a", fdbq.AttemptSucceeded)
	if got := states(t, q, "ws"); got != "a=done/succeeded b=added:pending c=added:pending d=waiting" {
		t.Fatal(got)
	}
}

// Add of a finished workflow job's id: done no more; when it finishes
// again the workflow is done again, counted once.
func TestWorkflowReaddFinished(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	w := fdbq.NewWorkflow{ID: "wa", Jobs: []fdbq.WorkflowJob{wfJob("a")}}
	if _, err := q.AddWorkflow(ctx, q.DB(), w); err != nil {
		t.Fatal(err)
	}
	work(t, q, "wa", "a", fdbq.AttemptSucceeded)
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: "wa:a"}); err != nil {
		t.Fatal(err)
	}
	if in, err := q.WaitWorkflow(ctx, "wa", 0); err != nil || in.Done {
		t.Fatalf("re-added: %+v %v", in, err)
	}
	work(t, q, "wa", "a", fdbq.AttemptSucceeded)
	in, err := q.WaitWorkflow(ctx, "wa", time.Second)
	if err != nil || !in.Done {
		t.Fatalf("done again: %+v %v", in, err)
	}
}
