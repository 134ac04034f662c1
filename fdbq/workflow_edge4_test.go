package fdbq_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// Wide fan-in: 999 parents into one child, finished by 16 workers at
// once. Every finish must succeed (conflicts retry), the child is added
// once, and the time it takes is logged.
func TestWorkflowWideFanInConcurrent(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	w := fdbq.NewWorkflow{ID: "fanin"}
	var deps []string
	for i := range 999 {
		name := fmt.Sprintf("p%03d", i)
		deps = append(deps, name)
		w.Jobs = append(w.Jobs, fdbq.WorkflowJob{Name: name, Job: fdbq.NewJob{Type: "email"}})
	}
	w.Jobs = append(w.Jobs, fdbq.WorkflowJob{Name: "sink", DependsOn: deps, Job: fdbq.NewJob{Type: "email"}})
	if _, err := q.AddWorkflow(ctx, q.DB(), w); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	var finished, errs atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 4})
				if err != nil {
					t.Error(err)
					return
				}
				if len(ls) == 0 {
					return
				}
				for _, l := range ls {
					if l.Node == "sink" {
						continue
					}
					if err := q.Finish(ctx, q.DB(), l, nil); err != nil {
						errs.Add(1)
						t.Errorf("finish %s: %v", l.ID, err)
						continue
					}
					finished.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d finishes in %v, %d errors", finished.Load(), time.Since(start), errs.Load())
	in, err := q.GetWorkflow(ctx, q.DB(), "fanin")
	if err != nil {
		t.Fatal(err)
	}
	if sink := in.Jobs[len(in.Jobs)-1]; sink.State != fdbq.NodeAdded {
		t.Fatalf("sink: %+v", sink)
	}
}
