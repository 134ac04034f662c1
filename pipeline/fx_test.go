package pipeline_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

func TestFxApplication(t *testing.T) {
	handled := make(chan string, 1)
	var q *fdbq.Queue
	var mon *fdbq.Monitor
	app := fxtest.New(t,
		fx.NopLogger,
		fx.Supply(embedded.Config{Options: embedded.Options{InMemory: true}}),
		embedded.Module,
		fdbq.Module,
		fdbq.MonitorModule,
		fdbq.DeclareType("email", fdbq.DefaultTypeSettings()),
		pipeline.Module,
		pipeline.Provide(func(q *fdbq.Queue) (*pipeline.Pipeline, error) {
			c, err := consumer.New(func(ctx context.Context, j *consumer.Job[email]) (string, error) {
				handled <- j.Data.To
				return "ok", nil
			}, consumer.Options{Concurrency: 2})
			if err != nil {
				return nil, err
			}
			return pipeline.From(producer.New(q, "email", producer.Options{})).To(c).Build()
		}),
		fx.Populate(&q, &mon),
	)
	app.RequireStart()
	ctx := context.Background()
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: "1", Data: []byte(`{"to":"a@b.c"}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case to := <-handled:
		if to != "a@b.c" {
			t.Fatalf("handler got %q", to)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the pipeline did not run the job")
	}
	j, err := q.WaitOne(ctx, "email", "1", fdbq.Finished)
	if err != nil || j.Outcome != fdbq.Succeeded {
		t.Fatalf("job: %+v, %v", j, err)
	}
	app.RequireStop()
	// The monitor was started and stopped with the application: stopping
	// it again is a no-op.
	if err := mon.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
