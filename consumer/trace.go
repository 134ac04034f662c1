package consumer

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/tracing"
)

// startHandle starts the attempt's handle span, a child of the trace
// context the job was enqueued in (a root when it has none), and
// returns the envelope's context with it: the handler's context. The
// finish span of the envelope's commit is its child.
func startHandle(e *Envelope, tracer trace.Tracer) (context.Context, trace.Span) {
	l := e.Lease
	ctx := tracing.ContextWith(e.Context(), l.Trace)
	ctx, span := tracer.Start(ctx, tracing.SpanHandle, handleOptions...)
	if span.IsRecording() {
		span.SetAttributes(jobAttributes(l)...)
	}
	e.mu.Lock()
	e.handled = ctx
	e.mu.Unlock()
	return ctx, span
}

// handleOptions are the options of every handle span, made once: an
// attempt with no tracer provider set should cost next to nothing.
var handleOptions = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}

// endHandle ends the handle span of an attempt that ran with ctx and
// returned err: its outcome (AttemptOutcome) as an attribute, and status
// error unless it succeeded or the handler chose how it ends (Cancel,
// Snooze).
func endHandle(ctx context.Context, span trace.Span, err error) {
	if span.IsRecording() {
		outcome := AttemptOutcome(ctx, err)
		span.SetAttributes(tracing.AttrAttemptOutcome.String(outcome))
		if err != nil && outcome != OutcomeSnoozed && outcome != OutcomeCanceled {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

func jobAttributes(l *fdbq.Lease) []attribute.KeyValue {
	return []attribute.KeyValue{
		tracing.AttrJobType.String(l.Type),
		tracing.AttrJobID.String(l.ID),
		tracing.AttrJobAttempt.Int(l.Attempts),
	}
}

// traceWith has the envelope's commit traced by tracer (a finish span);
// the first consumer to run the envelope sets it.
func (e *Envelope) traceWith(tracer trace.Tracer) {
	e.mu.Lock()
	if e.tracer == nil {
		e.tracer = tracer
	}
	e.mu.Unlock()
}

// startFinish starts the finish span of the envelope's commit, a child
// of its last handle span (or of the job's stored context, when no
// handler ran); nil without a tracer.
func (e *Envelope) startFinish() trace.Span {
	e.mu.Lock()
	tracer, ctx := e.tracer, e.handled
	e.mu.Unlock()
	if tracer == nil {
		return nil
	}
	if ctx == nil {
		ctx = tracing.ContextWith(context.Background(), e.Lease.Trace)
	}
	_, span := tracer.Start(ctx, tracing.SpanFinish)
	if span.IsRecording() {
		span.SetAttributes(jobAttributes(e.Lease)...)
	}
	return span
}

// endFinish ends the finish span once the commit answered: how the
// attempt ended, and status error when the commit failed (a halt too).
func (e *Envelope) endFinish() {
	span, how := e.finishSpan, e.finishHow
	if span == nil {
		return
	}
	if span.IsRecording() {
		if how != "" {
			span.SetAttributes(tracing.AttrAttemptOutcome.String(how))
		}
		if err := e.outErr; err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}
