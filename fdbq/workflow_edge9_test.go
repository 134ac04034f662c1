package fdbq_test

import (
	"context"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
)

// A dependency that finishes twice (finished, made pending again by an
// Add of its id or by Requeue, finished again) is counted twice by its
// waiting dependents: c, which depends on a and b, is added while b has
// not even started.
func TestWorkflowDependencyCountedTwice(t *testing.T) {
	for _, again := range []string{"add", "requeue"} {
		t.Run(again, func(t *testing.T) {
			q, _ := newQueue(t)
			ctx := context.Background()
			w := fdbq.NewWorkflow{ID: "w2x", Policy: fdbq.RunDependents, Jobs: []fdbq.WorkflowJob{wfJob("a"), wfJob("b"), wfJob("c", "a", "b")}}
			w.Jobs[0].Job.MaxAttempts = 1
			w.Jobs[1].Job.ScheduledAt = q.Now().Add(1000 * 3600 * 1e9) // b waits far ahead
			if _, err := q.AddWorkflow(ctx, q.DB(), w); err != nil {
				t.Fatal(err)
			}
			how := fdbq.AttemptSucceeded
			if again == "requeue" {
				how = fdbq.AttemptFailed
			}
			work(t, q, "w2x", "a", how)
			if again == "add" {
				if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: "w2x:a"}); err != nil {
					t.Fatal(err)
				}
			} else if err := q.Requeue(ctx, q.DB(), "email", "w2x:a"); err != nil {
				t.Fatal(err)
			}
			work(t, q, "w2x", "a", how)
			if got := states(t, q, "w2x"); got != "a=done/"+map[string]string{"add": "succeeded", "requeue": "failed"}[again]+" b=added:pending c=waiting" {
				t.Fatalf("a finished twice, b pending: %s", got)
			}
		})
	}
}
