package fdbq_test

import (
	"context"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
)

// Within one commit the log has causes before effects: the finish of a
// workflow's job comes before the add of the dependent it readies, so a
// follower that resumes between the two never sees the dependent ready
// while its parent still runs.
func TestWorkflowEventsCausalOrder(t *testing.T) {
	q := newTypesQueue(t, "build", "deploy")
	ctx := context.Background()
	types := []string{"build", "deploy"}
	if _, err := q.AddWorkflow(ctx, q.DB(), fdbq.NewWorkflow{ID: "w", Jobs: []fdbq.WorkflowJob{
		{Name: "a", Job: fdbq.NewJob{Type: "build"}},
		{Name: "d", Job: fdbq.NewJob{Type: "deploy"}, DependsOn: []string{"a"}},
	}}); err != nil {
		t.Fatal(err)
	}
	ls, err := q.Accept(ctx, "build", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 {
		t.Fatalf("accept: %v %v", ls, err)
	}
	f := startFollow(t, q, fdbq.FollowOptions{Types: types})
	if err := q.Finish(ctx, q.DB(), ls[0], nil); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, f, 2)
	got := []string{evs[0].Type + " " + evs[0].ID + " " + string(evs[0].State), evs[1].Type + " " + evs[1].ID + " " + string(evs[1].State)}
	if got[0] != "build w:a finished" || got[1] != "deploy w:d pending" {
		t.Fatalf("events of a's finish in order %q, want a's finish before the add of d that it caused", got)
	}
}
