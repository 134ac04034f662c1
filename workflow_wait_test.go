package jobstage_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/jobstagetest"
)

// WaitWorkflow whose ctx ends before the workflow is done must say so
// with an error, as Wait does (ctx.Err()); a nil error with Done false
// reads as success to a caller that checks err only.
func TestWaitWorkflowCtxEnd(t *testing.T) {
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	w := &jobstage.Workflow{ID: "never"}
	jobstage.Step(w, "charge", Charge{1}, nil) // no worker: never done
	if _, err := jobstage.EnqueueWorkflow(context.Background(), c, w); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	in, err := jobstage.WaitWorkflow(ctx, c, "never")
	if err == nil {
		t.Fatalf("WaitWorkflow returned nil error at ctx end; Done=%v", in.Done)
	}
}
