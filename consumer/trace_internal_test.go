package consumer

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/tracing"
)

// BenchmarkAttemptTracing measures what tracing adds to each job's
// attempt: the handle span around the handler and the finish span around
// the commit, for a job stored without a trace context and one with;
// with no tracer provider set (otel's global one, which makes no spans)
// and with the provider jobstage serve uses without a tracing section
// (ids, nothing recorded).
//
//	go test -run '^$' -bench AttemptTracing -benchmem ./consumer
func BenchmarkAttemptTracing(b *testing.B) {
	traced, err := fdbq.ParseTraceContext("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "")
	if err != nil {
		b.Fatal(err)
	}
	ids := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	for _, c := range []struct {
		name  string
		trace fdbq.TraceContext
	}{{"stored=none", fdbq.TraceContext{}}, {"stored=traceparent", traced}} {
		for _, p := range []struct {
			name string
			tp   trace.TracerProvider
		}{{"provider=none", nil}, {"provider=ids", ids}} {
			b.Run(c.name+"/"+p.name, func(b *testing.B) {
				tracer := tracing.Tracer(p.tp)
				l := &fdbq.Lease{Job: fdbq.Job{Type: "t", ID: "id", Attempts: 1, Trace: c.trace}}
				e := &Envelope{Lease: l, ctx: context.Background()}
				b.ReportAllocs()
				for b.Loop() {
					e.tracer, e.handled = nil, nil
					e.traceWith(tracer)
					ctx, span := startHandle(e, tracer)
					endHandle(ctx, span, nil)
					e.finishSpan = e.startFinish()
					e.finishHow = "succeeded"
					e.endFinish()
				}
			})
		}
	}
}
