package jobstage_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
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
	if n := settledLoops(1); n != 1 {
		t.Fatalf("%d activity monitors run over the client's queue, want 1", n)
	}
}

// settledLoops counts the activity monitors running in the process once
// they are want, or after a second: a monitor's goroutine that has not
// run yet is not counted as its loop, and one whose Stop returned may
// still be leaving it.
func settledLoops(want int) int {
	loops := func() int {
		buf := make([]byte, 1<<22)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "fdbq.(*Monitor).loop(")
	}
	n := loops()
	for deadline := time.Now().Add(time.Second); n != want && time.Now().Before(deadline); n = loops() {
		time.Sleep(5 * time.Millisecond)
	}
	return n
}
