package fxjobstage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/fxjobstage"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

type email struct {
	To string `json:"to"`
}

// An application of every module runs a job through a pipeline, and stops
// the monitor and the pipeline with it.
func TestApplication(t *testing.T) {
	handled := make(chan string, 1)
	var q *fdbq.Queue
	var mon *fdbq.Monitor
	app := fxtest.New(t,
		fx.NopLogger,
		fx.Supply(fxjobstage.EmbeddedConfig{Options: embedded.Options{InMemory: true}}),
		fxjobstage.EmbeddedStoreModule,
		fxjobstage.QueueModule,
		fxjobstage.MonitorModule,
		fxjobstage.DeclareType("email", fdbq.DefaultTypeSettings()),
		fxjobstage.PipelinesModule,
		fxjobstage.ProvidePipeline(func(q *fdbq.Queue) (*pipeline.Pipeline, error) {
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

// DeclareType refuses a bad name when the application is built, so a
// misnamed type never reaches the store.
func TestDeclareTypeBadName(t *testing.T) {
	app := fx.New(fx.NopLogger, fxjobstage.DeclareType("send email", fdbq.DefaultTypeSettings()))
	if err := app.Err(); !errors.Is(err, fdbq.ErrInvalidJob) {
		t.Fatalf("declaring a bad name: %v", err)
	}
}

// The declared types are declared at start with fdbq.Queue.DeclareType:
// a restart keeps an operator's pause and takes the declared settings.
func TestDeclareTypeAtStart(t *testing.T) {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	start := func(s fdbq.TypeSettings) *fdbq.Queue {
		t.Helper()
		var q *fdbq.Queue
		app := fxtest.New(t, fx.NopLogger, fx.Supply(db), fxjobstage.QueueModule,
			fxjobstage.DeclareType("email", s), fx.Populate(&q))
		app.RequireStart()
		app.RequireStop()
		return q
	}
	s := fdbq.DefaultTypeSettings()
	q := start(s)
	if err := q.Pause(ctx, db, "email"); err != nil {
		t.Fatal(err)
	}
	s.ActivityTimeout = time.Minute
	q = start(s)
	info, err := q.GetType(ctx, db, "email")
	if err != nil {
		t.Fatal(err)
	}
	if want := (fdbq.TypeSettings{ActivityTimeout: time.Minute, Retry: s.Retry, Paused: true, Retention: s.Retention}); !info.Settings.Equal(want) {
		t.Fatalf("after restart: %+v, want %+v", info.Settings, want)
	}
}
