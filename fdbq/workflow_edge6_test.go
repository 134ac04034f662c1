package fdbq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// CancelWorkflow of a workflow at the documented limits (1000 pending
// jobs, 4 MiB of data, short names): one transaction must do it.
func TestWorkflowCancelAtLimits(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	per := fdbq.MaxWorkflowBytes / fdbq.MaxWorkflowJobs
	data := json.RawMessage(`"` + strings.Repeat("x", per-2) + `"`)
	w := fdbq.NewWorkflow{ID: "big"}
	for i := range fdbq.MaxWorkflowJobs {
		w.Jobs = append(w.Jobs, fdbq.WorkflowJob{Name: fmt.Sprintf("j%d", i), Job: fdbq.NewJob{Type: "email", Data: data}})
	}
	if _, err := q.AddWorkflow(ctx, q.DB(), w); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	in, err := q.CancelWorkflow(ctx, q.DB(), "big")
	t.Logf("cancel took %v", time.Since(start))
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if !in.Done {
		t.Fatal("not done")
	}
}

// CancelWorkflow of a 1000-job workflow (names of 64 bytes) finishes
// within 30 s under -race. Each of its 1000 cancels runs workflowStep,
// which decodes the whole header (all 1000 names, 67 KB) again: O(n²),
// over 5 s a transaction under -race, so every attempt fails with
// transaction_too_old and the cancel never commits.
func TestWorkflowCancelSmall(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	w := fdbq.NewWorkflow{ID: strings.Repeat("w", 64)}
	for i := range fdbq.MaxWorkflowJobs {
		w.Jobs = append(w.Jobs, fdbq.WorkflowJob{Name: fmt.Sprintf("%064d", i), Job: fdbq.NewJob{Type: "email"}})
	}
	if _, err := q.AddWorkflow(ctx, q.DB(), w); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := q.CancelWorkflow(c, q.DB(), w.ID)
	t.Logf("cancel took %v", time.Since(start))
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
}
