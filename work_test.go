package jobstage_test

import (
	"context"
	"testing"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/jobstagetest"
)

// Work's handler has nothing to return: its job succeeds and stores no
// result.
func TestWorkStoresNoResult(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	if err := jobstage.Work(c, func(ctx context.Context, j *jobstage.Job[Report]) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	job, err := jobstage.Enqueue(ctx, c, Report{Month: "2026-12"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done, err := jobstage.Wait[Report](ctx, c, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.Outcome != fdbq.Succeeded || len(done.Result) != 0 {
		t.Fatalf("job: %s %q, result %q; want succeeded with no result", done.Outcome, done.Error, done.Result)
	}
}
