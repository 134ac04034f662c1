package jobstage_test

import (
	"context"
	"fmt"
	"log"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobstage/jobstage"
)

// A job enqueued in a request's span is handled in the same trace: the
// handler's context holds its attempt's span, a child of the enqueue
// span. A program exports with sdktrace.WithBatcher and an OTLP exporter;
// the example keeps its spans in memory.
func ExampleConfig_tracerProvider() {
	ctx := context.Background()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(ctx)
	c, err := jobstage.Open(ctx, jobstage.Config{TracerProvider: tp}) // in memory
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	handled := make(chan trace.SpanContext, 1)
	jobstage.Work(c, func(ctx context.Context, j *jobstage.Job[Invoice]) error {
		handled <- trace.SpanContextFromContext(ctx)
		return nil
	}, nil)
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	ctx, request := tp.Tracer("shop").Start(ctx, "checkout")
	job, err := jobstage.Enqueue(ctx, c, Invoice{Order: "42", Cents: 1999}, nil)
	request.End()
	if err != nil {
		log.Fatal(err)
	}
	sc := <-handled
	fmt.Println("job stores the request's trace:", job.Trace.TraceID == request.SpanContext().TraceID())
	fmt.Println("handler runs in the request's trace:", sc.TraceID() == request.SpanContext().TraceID())
	// Output:
	// job stores the request's trace: true
	// handler runs in the request's trace: true
}
