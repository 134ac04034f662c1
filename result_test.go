package jobstage_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/jobstagetest"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

type Quote struct {
	Item string `json:"item"`
}

func (Quote) Kind() string { return "quote" }

type Price struct {
	Cents int `json:"cents"`
}

type Ping struct{}

func (Ping) Kind() string { return "ping" }

// WaitResult gives the handler's result typed; a job that has none says
// why: canceled (an *OutcomeError, with the job), not finished yet,
// worked by a handler without a result, a result of another shape.
func TestWaitResult(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	if err := jobstage.WorkResult(c, func(ctx context.Context, j *jobstage.Job[Quote]) (Price, error) {
		if j.Data.Item == "" {
			return Price{}, jobstage.Cancel("no item\nsecond line")
		}
		return Price{Cents: len(j.Data.Item) * 100}, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := jobstage.Work(c, func(context.Context, *jobstage.Job[Ping]) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}

	tea, _ := jobstage.Enqueue(ctx, c, Quote{Item: "tea"}, nil)
	info, price, err := jobstage.WaitResult[Quote, Price](ctx, c, tea.ID)
	if err != nil || price.Cents != 300 || info.Data.Item != "tea" || info.Outcome != fdbq.Succeeded {
		t.Fatalf("tea: %+v %+v %v", info, price, err)
	}

	none, _ := jobstage.Enqueue(ctx, c, Quote{}, nil)
	info, price, err = jobstage.WaitResult[Quote, Price](ctx, c, none.ID)
	var oe *jobstage.OutcomeError
	if !errors.As(err, &oe) || oe.Job.Outcome != fdbq.Canceled || info == nil || info.ID != none.ID || price != (Price{}) ||
		err.Error() != "jobstage: job quote/"+none.ID+" finished canceled: no item …" {
		t.Fatalf("canceled: %+v %+v %v", info, price, err)
	}

	ping, _ := jobstage.Enqueue(ctx, c, Ping{}, nil)
	pinged, err := jobstage.Wait[Ping](ctx, c, ping.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobstage.ResultOf[Price](pinged.Job); err == nil || !strings.Contains(err.Error(), "succeeded with no result") {
		t.Fatalf("a job of Work: %v", err)
	}
	if _, err := jobstage.ResultOf[[]string](info.Job); !errors.As(err, &oe) {
		t.Fatalf("ResultOf a canceled job: %v", err)
	}
	if err := info.DecodeResult(new(Price)); !errors.As(err, &oe) {
		t.Fatalf("DecodeResult of a canceled job: %v", err)
	}
	teaDone, _ := jobstage.Get[Quote](ctx, c, tea.ID)
	if _, err := jobstage.ResultOf[[]string](teaDone.Job); err == nil || !strings.Contains(err.Error(), "does not decode into []string") {
		t.Fatalf("a result of another shape: %v", err)
	}

	// Not finished yet: a kind nobody works.
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	later, _ := jobstage.Enqueue(ctx, c, Quote{Item: "later"}, nil)
	pending, _ := jobstage.Get[Quote](ctx, c, later.ID)
	if _, err := jobstage.ResultOf[Price](pending.Job); err == nil || !strings.Contains(err.Error(), "is pending: no result yet") {
		t.Fatalf("a pending job: %v", err)
	}
}

// A job canceled through the queue before any attempt has no error: its
// OutcomeError says how it finished, with no empty quote after a colon.
func TestWaitResultOfAJobCanceledByAnOperator(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	j, err := jobstage.Enqueue(ctx, c, Quote{Item: "tea"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Queue().Cancel(ctx, c.DB(), "quote", j.ID); err != nil {
		t.Fatal(err)
	}
	_, _, err = jobstage.WaitResult[Quote, Price](ctx, c, j.ID)
	var oe *jobstage.OutcomeError
	if !errors.As(err, &oe) || err.Error() != "jobstage: job quote/"+j.ID+" finished canceled" {
		t.Fatalf("canceled by an operator: %q", err)
	}
}

// A pipeline a program builds on the client's queue, with default
// options, joins the client's monitor instead of running a second.
func TestPipelineOnClientQueueJoinsItsMonitor(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	if err := c.Queue().DeclareType(ctx, c.DB(), "raw", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
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
	if n := jobtest.MonitorLoops(1); n != 1 {
		t.Fatalf("%d activity monitors run over the client's queue, want 1", n)
	}
}
