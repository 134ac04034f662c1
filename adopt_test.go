package jobstage_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/jobstagetest"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// A pipeline a program starts on the client's queue before the client
// starts runs its own monitor until then; the client's start moves it to
// the client's, so one monitor runs, as when it starts after.
func TestPipelineStartedBeforeTheClientMovesToItsMonitor(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	if err := c.Queue().DeclareType(ctx, c.DB(), "raw", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	cons := consumer.Must(consumer.NewFunc(func(context.Context, *consumer.Job[json.RawMessage]) error { return nil }, consumer.Options{}))
	p, err := pipeline.From(producer.New(c.Queue(), "raw", producer.Options{})).To(cons).Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(ctx)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if n := jobtest.MonitorLoops(1); n != 1 {
		t.Fatalf("%d activity monitors run over the client's queue, want 1", n)
	}
}
