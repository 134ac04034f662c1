package tracing_test

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/tracing"
)

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// A stored trace context becomes the remote span context it was, and
// back; Env hands it to a child process.
func TestStoredContextRoundTrip(t *testing.T) {
	tc, err := fdbq.ParseTraceContext(parent, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
	if err != nil {
		t.Fatal(err)
	}
	ctx := tracing.ContextWith(context.Background(), tc)
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsRemote() || !sc.IsSampled() || sc.TraceState().Get("congo") != "t61rcWkgMzE" {
		t.Fatalf("span context %+v", sc)
	}
	if back := tracing.FromContext(ctx); back != tc {
		t.Fatalf("read back %+v, want %+v", back, tc)
	}
	env := tracing.Env(ctx)
	if want := []string{"TRACEPARENT=" + parent, "TRACESTATE=rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"}; !slices.Equal(env, want) {
		t.Fatalf("env %q", env)
	}
	if tracing.Env(context.Background()) != nil || !tracing.FromContext(context.Background()).IsZero() {
		t.Fatal("a context without a span has a trace context")
	}
	if got := tracing.ContextWith(context.Background(), fdbq.TraceContext{}); trace.SpanContextFromContext(got).IsValid() {
		t.Fatal("no trace context made a span context")
	}
}

// What fdbq accepts as a traceparent, OpenTelemetry's W3C propagator
// reads as the same span context (fdbq is stricter: a version 00 header
// is exactly 55 bytes); and the span context a job continues is the one
// it stored.
func FuzzParseAgreesWithPropagator(f *testing.F) {
	f.Add(parent, "rojo=1")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-later", "")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", "a=1,,b=2 ")
	f.Add("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "")
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	f.Fuzz(func(t *testing.T, traceparent, tracestate string) {
		tc, err := fdbq.ParseTraceContext(traceparent, tracestate)
		if err != nil {
			return
		}
		carrier := propagation.MapCarrier{"traceparent": traceparent}
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
		if !sc.IsValid() {
			t.Fatalf("fdbq read %q, the propagator refused it", traceparent)
		}
		if sc.TraceID() != tc.TraceID || sc.SpanID() != tc.SpanID || byte(sc.TraceFlags()) != tc.Flags {
			t.Fatalf("%q: fdbq read %+v, the propagator %v", traceparent, tc, sc)
		}
		stored := tracing.SpanContext(tc)
		if stored.TraceID() != tc.TraceID || stored.SpanID() != tc.SpanID || !stored.IsRemote() {
			t.Fatalf("%+v became %v", tc, stored)
		}
	})
}
