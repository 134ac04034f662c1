package handlers_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/handlers"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// TestExecInPipeline runs the exec handler as a pipeline's consumer on the
// embedded store: a job that succeeds finishes with the command's output,
// one that fails finishes failed with the exit status and stderr.
func TestExecInPipeline(t *testing.T) {
	ctx := context.Background()
	db := jobtest.OpenDB(t)
	q := fdbq.New(db, fdbq.Options{})
	s := fdbq.DefaultTypeSettings()
	s.Retry.MaxAttempts = 1
	if err := q.SetType(ctx, db, "resize", s); err != nil {
		t.Fatal(err)
	}
	h, err := handlers.Exec(handlers.ExecOptions{Command: sh(`d=$(cat); case "$d" in *fail*) echo "cannot resize" >&2; exit 2;; esac; printf '{"got":%s}' "$d"`)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(h, consumer.Options{Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.From(producer.New(q, "resize", producer.Options{})).To(c).Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(ctx)

	if _, err := q.AddBatch(ctx, db, []fdbq.NewJob{
		{Type: "resize", ID: "ok", Data: json.RawMessage(`{"w":640}`)},
		{Type: "resize", ID: "bad", Data: json.RawMessage(`"fail"`)},
	}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	ok, err := q.WaitOne(wctx, "resize", "ok", fdbq.Finished)
	if err != nil {
		t.Fatal(err)
	}
	if ok.Outcome != fdbq.Succeeded || string(ok.Result) != `{"got":{"w":640}}` {
		t.Errorf("job ok: %s, result %s, error %q", ok.Outcome, ok.Result, ok.Error)
	}
	bad, err := q.WaitOne(wctx, "resize", "bad", fdbq.Finished)
	if err != nil {
		t.Fatal(err)
	}
	if bad.Outcome != fdbq.Failed || !strings.Contains(bad.Error, "exit status 2: cannot resize") {
		t.Errorf("job bad: %s, error %q", bad.Outcome, bad.Error)
	}
}
