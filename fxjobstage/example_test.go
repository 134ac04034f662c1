package fxjobstage_test

import (
	"context"
	"fmt"
	"log"

	"go.uber.org/fx"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/fxjobstage"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

type welcome struct {
	To string `json:"to"`
}

// newWelcomePipeline is an fx constructor: it gets the queue from the
// application and returns the pipeline PipelinesModule runs.
func newWelcomePipeline(q *fdbq.Queue) (*pipeline.Pipeline, error) {
	send := func(ctx context.Context, j *consumer.Job[welcome]) (string, error) {
		return "welcomed " + j.Data.To, nil
	}
	c, err := consumer.New(send, consumer.Options{Concurrency: 2})
	if err != nil {
		return nil, err
	}
	return pipeline.From(producer.New(q, "welcome", producer.Options{})).To(c).Build()
}

// An application of every module: starting it opens the store, declares
// the type and starts the monitor and the pipeline; stopping it drains
// the pipeline, stops the monitor and closes the store.
func Example() {
	var q *fdbq.Queue
	app := fx.New(
		fx.NopLogger,
		fx.Supply(fxjobstage.EmbeddedConfig{Options: embedded.Options{InMemory: true}}), // or Dir: "data"
		fxjobstage.EmbeddedStoreModule,
		fxjobstage.QueueModule,
		fxjobstage.DeclareType("welcome", fdbq.DefaultTypeSettings()),
		fxjobstage.MonitorModule,
		fxjobstage.PipelinesModule,
		fxjobstage.ProvidePipeline(newWelcomePipeline),
		fx.Populate(&q),
	)
	ctx := context.Background()
	if err := app.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "welcome", ID: "ann", Data: []byte(`{"to":"ann@example.com"}`)}); err != nil {
		log.Fatal(err)
	}
	j, err := q.WaitOne(ctx, "welcome", "ann", fdbq.Finished)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(j.Outcome, string(j.Result))
	if err := app.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// succeeded "welcomed ann@example.com"
}

// DeclareType checks the type's name when the application is built, so a
// misnamed type fails it before anything starts.
func ExampleDeclareType() {
	app := fx.New(fx.NopLogger, fxjobstage.DeclareType("send email", fdbq.DefaultTypeSettings()))
	fmt.Println(app.Err() != nil)
	// Output:
	// true
}
