package jobstage_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/jobstagetest"
)

// Charge, Ship and Notify are the steps of an order's workflow.
type Charge struct{ Order int }

func (Charge) Kind() string { return "charge" }

type Ship struct{ Order int }

func (Ship) Kind() string { return "ship" }

type Notify struct{ Order int }

func (Notify) Kind() string { return "notify" }

// TestWorkflow: charge, then ship, then notify reading what charge and
// ship returned; the workflow is waited on until done.
func TestWorkflow(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	if err := jobstage.WorkResult(c, func(_ context.Context, j *jobstage.Job[Charge]) (string, error) {
		note("charge")
		return fmt.Sprintf("receipt-%d", j.Data.Order), nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := jobstage.WorkResult(c, func(_ context.Context, j *jobstage.Job[Ship]) (string, error) {
		note("ship")
		return "parcel", nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := jobstage.WorkResult(c, func(ctx context.Context, j *jobstage.Job[Notify]) (string, error) {
		receipt, err := jobstage.ParentResult[string](ctx, c, j, "charge")
		if err != nil {
			return "", err
		}
		parcel, err := jobstage.ParentResult[string](ctx, c, j, "ship")
		if err != nil {
			return "", err
		}
		note("notify")
		return receipt + "+" + parcel, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	w := &jobstage.Workflow{ID: "order-7"}
	jobstage.Step(w, "charge", Charge{7}, nil)
	jobstage.Step(w, "ship", Ship{7}, nil, "charge")
	jobstage.Step(w, "notify", Notify{7}, nil, "charge", "ship")
	if _, err := jobstage.EnqueueWorkflow(ctx, c, w); err != nil {
		t.Fatal(err)
	}
	in, err := jobstage.WaitWorkflow(ctx, c, "order-7")
	if err != nil || !in.Done {
		t.Fatalf("wait: %+v %v", in, err)
	}
	if got := strings.Join(order, " "); got != "charge ship notify" {
		t.Fatalf("ran %s", got)
	}
	last := in.Jobs[2]
	if last.Outcome != fdbq.Succeeded || string(last.Job.Result) != `"receipt-7+parcel"` {
		t.Fatalf("notify: %+v %s", last, last.Job.Result)
	}
	bad := &jobstage.Workflow{}
	jobstage.Step(bad, "a", Charge{1}, &jobstage.EnqueueOptions{ID: "x"})
	if _, err := jobstage.EnqueueWorkflow(ctx, c, bad); err == nil {
		t.Fatal("a step with an id was taken")
	}
	cyc := &jobstage.Workflow{}
	jobstage.Step(cyc, "a", Charge{1}, nil, "b")
	jobstage.Step(cyc, "b", Ship{1}, nil, "a")
	if _, err := jobstage.EnqueueWorkflow(ctx, c, cyc); !strings.Contains(fmt.Sprint(err), "cycle") {
		t.Fatalf("a cycle: %v", err)
	}
}
