package fdbq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
)

// Plain shapes at the documented limits, short names, type "email",
// no key, no retry: 1000 jobs and 4 MiB of data.
func TestWorkflowPlainLimits(t *testing.T) {
	ctx := context.Background()
	per := fdbq.MaxWorkflowBytes / fdbq.MaxWorkflowJobs
	data := json.RawMessage(`"` + strings.Repeat("x", per-2) + `"`)
	t.Run("roots", func(t *testing.T) {
		q, _ := newQueue(t)
		w := fdbq.NewWorkflow{ID: "roots"}
		for i := range fdbq.MaxWorkflowJobs {
			w.Jobs = append(w.Jobs, fdbq.WorkflowJob{Name: fmt.Sprintf("j%d", i), Job: fdbq.NewJob{Type: "email", Data: data}})
		}
		if _, err := q.AddWorkflow(ctx, q.DB(), w); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("fanout", func(t *testing.T) {
		q, _ := newQueue(t)
		w := fdbq.NewWorkflow{ID: "fan", Jobs: []fdbq.WorkflowJob{{Name: "root", Job: fdbq.NewJob{Type: "email"}}}}
		d := json.RawMessage(`"` + strings.Repeat("x", fdbq.MaxWorkflowBytes/999-2) + `"`)
		for i := range fdbq.MaxWorkflowJobs - 1 {
			w.Jobs = append(w.Jobs, fdbq.WorkflowJob{Name: fmt.Sprintf("j%d", i), DependsOn: []string{"root"}, Job: fdbq.NewJob{Type: "email", Data: d}})
		}
		if _, err := q.AddWorkflow(ctx, q.DB(), w); err != nil {
			t.Fatal(err)
		}
		ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
		if err != nil || len(ls) != 1 {
			t.Fatal(ls, err)
		}
		if err := q.Finish(ctx, q.DB(), ls[0], nil); err != nil {
			t.Fatalf("root's finish: %v", err)
		}
	})
}
