// Package tracing carries OpenTelemetry traces through jobs: the trace
// context of the code that enqueues a job is stored with it
// (fdbq.NewJob.Trace), and the handler that works it continues that
// trace, on any process and after any number of retries.
//
// The spans jobstage makes, all with the tracer named TracerName:
//
//	jobstage.enqueue  kind producer, in the caller's context: one per
//	                  enqueue call (jobstage.Enqueue, EnqueueMany, the HTTP
//	                  API's enqueue route, a single job or a list); the
//	                  jobs store its context
//	jobstage.accept   kind consumer, a root: one per accept of a batch of
//	                  jobs by a pipeline's producer, with a link to each
//	                  job's stored context
//	jobstage.handle   kind consumer, a child of the job's stored context (a
//	                  root when it has none): one per attempt, around the
//	                  handler, whose context holds it
//	jobstage.finish   kind internal, a child of the attempt's handle span:
//	                  the commit of its outcome
//
// with the attributes AttrJobType, AttrJobID (for a single job) and
// AttrJobAttempt (handle and finish), AttrJobCount on a batch, and
// AttrAttemptOutcome on finish; a span whose work failed has status
// error. Every part that makes spans takes a trace.TracerProvider in its
// options; nil is otel.GetTracerProvider(), which does nothing until the
// program sets one. jobstage never sets the global provider itself.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobstage/jobstage/fdbq"
)

// TracerName names jobstage's tracer (its instrumentation scope).
const TracerName = "github.com/jobstage/jobstage"

// Span names.
const (
	SpanEnqueue = "jobstage.enqueue"
	SpanAccept  = "jobstage.accept"
	SpanHandle  = "jobstage.handle"
	SpanFinish  = "jobstage.finish"
)

// Attributes of jobstage's spans.
const (
	AttrJobType        = attribute.Key("jobstage.job.type")
	AttrJobID          = attribute.Key("jobstage.job.id")
	AttrJobAttempt     = attribute.Key("jobstage.job.attempt")
	AttrJobCount       = attribute.Key("jobstage.job.count")
	AttrAttemptOutcome = attribute.Key("jobstage.attempt.outcome")
)

// Tracer is jobstage's tracer from tp; nil: otel.GetTracerProvider().
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(TracerName)
}

// FromContext is the trace context of ctx's span, as a job stores it;
// zero when ctx holds none.
func FromContext(ctx context.Context) fdbq.TraceContext {
	return FromSpanContext(trace.SpanContextFromContext(ctx))
}

// FromSpanContext is sc as a job stores it; zero when sc is not valid.
func FromSpanContext(sc trace.SpanContext) fdbq.TraceContext {
	if !sc.IsValid() {
		return fdbq.TraceContext{}
	}
	t := fdbq.TraceContext{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: byte(sc.TraceFlags())}
	if ts := sc.TraceState(); ts.Len() > 0 {
		t.State = ts.String()
	}
	return t
}

// SpanContext is the remote span context t stores; not valid when t is
// zero. A tracestate OpenTelemetry cannot read is left out.
func SpanContext(t fdbq.TraceContext) trace.SpanContext {
	if t.IsZero() {
		return trace.SpanContext{}
	}
	c := trace.SpanContextConfig{TraceID: t.TraceID, SpanID: t.SpanID, TraceFlags: trace.TraceFlags(t.Flags), Remote: true}
	if t.State != "" {
		c.TraceState, _ = trace.ParseTraceState(t.State)
	}
	return trace.NewSpanContext(c)
}

// ContextWith returns ctx with t as its remote parent span context (what
// a span started in it continues); ctx itself when t is zero.
func ContextWith(ctx context.Context, t fdbq.TraceContext) context.Context {
	sc := SpanContext(t)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Env is the environment that hands ctx's span context to a child
// process: TRACEPARENT and, when there is one, TRACESTATE (the names
// OpenTelemetry's SDKs read for a process started in a trace); nil when
// ctx holds none.
func Env(ctx context.Context) []string {
	t := FromContext(ctx)
	if t.IsZero() {
		return nil
	}
	env := []string{"TRACEPARENT=" + t.Traceparent()}
	if t.State != "" {
		env = append(env, "TRACESTATE="+t.State)
	}
	return env
}

// EndEnqueue ends the enqueue span of jobs of type typ: the jobs added
// (AttrJobCount, and AttrJobID for one), or err as its status.
func EndEnqueue(span trace.Span, typ string, jobs []*fdbq.Job, err error) {
	if span.IsRecording() {
		span.SetAttributes(AttrJobType.String(typ), AttrJobCount.Int(len(jobs)))
		if len(jobs) == 1 {
			span.SetAttributes(AttrJobID.String(jobs[0].ID))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}
