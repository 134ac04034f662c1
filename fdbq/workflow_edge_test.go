package fdbq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// A plain job that holds the id a workflow's waiting job will have must
// not take the node's place. Added before the workflow: AddWorkflow must
// refuse (as it does for a root's id). Added while the node waits: the
// workflow must still end (here: the node skipped), not show b "added"
// with the plain job, never done, c waiting for ever.
func TestWorkflowPlainJobTakesNodeID(t *testing.T) {
	ctx := context.Background()
	plain := func(t *testing.T, q *fdbq.Queue, id string) {
		t.Helper()
		if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: id, Data: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	w := fdbq.NewWorkflow{ID: "w", Jobs: []fdbq.WorkflowJob{wfJob("a"), wfJob("b", "a"), wfJob("c", "b")}}
	t.Run("before", func(t *testing.T) {
		q, _ := newQueue(t)
		plain(t, q, "w:b")
		_, err := q.AddWorkflow(ctx, q.DB(), w)
		if !errors.Is(err, fdbq.ErrWorkflowExists) {
			work(t, q, "w", "a", fdbq.AttemptSucceeded)
			t.Fatalf("added over a plain job at w:b (%v); after a: %s", err, states(t, q, "w"))
		}
	})
	t.Run("while waiting", func(t *testing.T) {
		q, _ := newQueue(t)
		if _, err := q.AddWorkflow(ctx, q.DB(), w); err != nil {
			t.Fatal(err)
		}
		plain(t, q, "w:b")
		ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if err := q.Finish(ctx, q.DB(), l, nil); err != nil {
				t.Fatal(err)
			}
		}
		in, err := q.GetWorkflow(ctx, q.DB(), "w")
		if err != nil {
			t.Fatal(err)
		}
		if !in.Done {
			t.Fatalf("a and the plain w:b finished, the workflow never ends: %s", states(t, q, "w"))
		}
	})
}

// A job's node over the 100 KB value limit: within every documented
// limit (one job of 89 KB data, 999 dependencies, names of 64 bytes),
// AddWorkflow fails with a store error rather than adding it (or
// refusing it with ErrDataTooLarge naming a limit).
func TestWorkflowNodeOverValueLimit(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	w := fdbq.NewWorkflow{ID: "fanin"}
	var deps []string
	for i := range 999 {
		name := fmt.Sprintf("%064d", i)
		deps = append(deps, name)
		w.Jobs = append(w.Jobs, fdbq.WorkflowJob{Name: name, Job: fdbq.NewJob{Type: "email"}})
	}
	w.Jobs = append(w.Jobs, fdbq.WorkflowJob{Name: "sink", DependsOn: deps,
		Job: fdbq.NewJob{Type: "email", Data: json.RawMessage(`"` + strings.Repeat("x", 89_000) + `"`)}})
	if err := fdbq.ValidateWorkflow(w); err != nil && !errors.Is(err, fdbq.ErrDataTooLarge) {
		t.Fatalf("validate: %v", err)
	}
	_, err := q.AddWorkflow(ctx, q.DB(), w)
	if err != nil && !errors.Is(err, fdbq.ErrDataTooLarge) {
		t.Fatalf("a workflow within the documented limits: %v", err)
	}
}

// Largest workflow within the limits: 1000 roots, 4 MiB of data, long
// type name and key and retry policy: does it fit one transaction?
func TestWorkflowAddNearLimits(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	typ := strings.Repeat("t", fdbq.MaxTypeNameSize)
	s := fdbq.DefaultTypeSettings()
	if err := q.SetType(ctx, q.DB(), typ, s); err != nil {
		t.Fatal(err)
	}
	w := fdbq.NewWorkflow{ID: strings.Repeat("w", fdbq.MaxWorkflowIDSize)}
	per := fdbq.MaxWorkflowBytes / fdbq.MaxWorkflowJobs
	for i := range fdbq.MaxWorkflowJobs {
		name := fmt.Sprintf("%064d", i)
		data := `"` + strings.Repeat("x", per-2) + `"`
		w.Jobs = append(w.Jobs, fdbq.WorkflowJob{Name: name, Job: fdbq.NewJob{Type: typ, Data: json.RawMessage(data),
			Key: strings.Repeat("k", fdbq.MaxKeySize), MaxAttempts: 5, Priority: 1 << 40,
			Retry: &fdbq.RetryPolicy{MaxAttempts: 3, Backoff: fdbq.Constant, Base: time.Second}}})
	}
	start := time.Now()
	_, err := q.AddWorkflow(ctx, q.DB(), w)
	t.Logf("add took %v", time.Since(start))
	if err != nil && !errors.Is(err, fdbq.ErrDataTooLarge) {
		t.Fatalf("a workflow within the documented limits: %v", err)
	}
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
}

// Fan-out at the limits: the root's finish adds 999 dependents carrying
// 4 MiB of data. Does the finish transaction fit?
func TestWorkflowFanOutFinish(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	typ := strings.Repeat("t", fdbq.MaxTypeNameSize)
	if err := q.SetType(ctx, q.DB(), typ, fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	w := fdbq.NewWorkflow{ID: strings.Repeat("w", fdbq.MaxWorkflowIDSize)}
	w.Jobs = append(w.Jobs, fdbq.WorkflowJob{Name: "root", Job: fdbq.NewJob{Type: typ}})
	per := fdbq.MaxWorkflowBytes / (fdbq.MaxWorkflowJobs - 1)
	for i := range fdbq.MaxWorkflowJobs - 1 {
		name := fmt.Sprintf("%064d", i)
		data := `"` + strings.Repeat("x", per-2) + `"`
		w.Jobs = append(w.Jobs, fdbq.WorkflowJob{Name: name, DependsOn: []string{"root"}, Job: fdbq.NewJob{Type: typ, Data: json.RawMessage(data),
			Key: strings.Repeat("k", fdbq.MaxKeySize), MaxAttempts: 5, Priority: 1 << 40,
			Retry: &fdbq.RetryPolicy{MaxAttempts: 3, Backoff: fdbq.Constant, Base: time.Second}}})
	}
	if _, err := q.AddWorkflow(ctx, q.DB(), w); err != nil {
		t.Fatal(err)
	}
	ls, err := q.Accept(ctx, typ, fdbq.AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 {
		t.Fatal(ls, err)
	}
	start := time.Now()
	err = q.Finish(ctx, q.DB(), ls[0], json.RawMessage(`"`+strings.Repeat("r", 80_000)+`"`))
	t.Logf("finish took %v", time.Since(start))
	if err != nil {
		t.Fatalf("the root's finish: %v", err)
	}
}
