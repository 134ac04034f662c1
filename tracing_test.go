package jobstage_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/jobstagetest"
	"github.com/jobstage/jobstage/tracing"
)

// spansNamed are the spans of exp named name, in the order they ended.
func spansNamed(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, k attribute.Key) attribute.Value {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value
		}
	}
	return attribute.Value{}
}

// A job enqueued in a request's span is worked in the same trace: its
// enqueue span is the request's child, each attempt's handle span (and
// the handler's context) the enqueue span's child, the second attempt
// after a failure too, with attempt 2; each commit's finish span is its
// attempt's child; the accept links to the job's context.
func TestTraceFromEnqueueToHandler(t *testing.T) {
	ctx := within(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet, TracerProvider: tp})
	var seen []trace.SpanContext // by attempt
	if err := jobstage.WorkResult(c, func(ctx context.Context, j *jobstage.Job[Report]) (int, error) {
		seen = append(seen, trace.SpanContextFromContext(ctx))
		if j.Attempt == 1 {
			return 0, errors.New("the ledger is locked")
		}
		return j.Attempt, nil
	}, &jobstage.WorkOptions{Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	reqCtx, req := tp.Tracer("test").Start(ctx, "request")
	job, err := jobstage.Enqueue(reqCtx, c, Report{Month: "2026-12"}, nil)
	req.End()
	if err != nil {
		t.Fatal(err)
	}
	if job.Trace.TraceID != req.SpanContext().TraceID() {
		t.Fatalf("the job stores trace %s, want the request's %s", job.Trace.TraceIDString(), req.SpanContext().TraceID())
	}
	if _, _, err := jobstage.WaitResult[Report, int](ctx, c, job.ID); err != nil {
		t.Fatal(err)
	}
	// Stop drains the pipeline: every commit, and its finish span, is done.
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	traceID := req.SpanContext().TraceID()
	enq := spansNamed(exp, tracing.SpanEnqueue)
	if len(enq) != 1 || enq[0].Parent.SpanID() != req.SpanContext().SpanID() || enq[0].SpanContext.TraceID() != traceID {
		t.Fatalf("enqueue spans %+v", enq)
	}
	if got := attr(enq[0], tracing.AttrJobID).AsString(); got != job.ID {
		t.Errorf("enqueue span's job id %q", got)
	}
	if job.Trace.SpanID != enq[0].SpanContext.SpanID() {
		t.Errorf("the job stores span %x, want the enqueue span's %s", job.Trace.SpanID, enq[0].SpanContext.SpanID())
	}
	handles := spansNamed(exp, tracing.SpanHandle)
	if len(handles) != 2 || len(seen) != 2 {
		t.Fatalf("%d handle spans, %d attempts", len(handles), len(seen))
	}
	for i, h := range handles {
		if h.SpanContext.TraceID() != traceID || h.Parent.SpanID() != enq[0].SpanContext.SpanID() || !h.Parent.IsRemote() {
			t.Errorf("attempt %d: trace %s parent %s, want trace %s parent %s", i+1, h.SpanContext.TraceID(), h.Parent.SpanID(), traceID, enq[0].SpanContext.SpanID())
		}
		if seen[i].SpanID() != h.SpanContext.SpanID() {
			t.Errorf("attempt %d: the handler's context holds span %s, not its handle span %s", i+1, seen[i].SpanID(), h.SpanContext.SpanID())
		}
		if a := attr(h, tracing.AttrJobAttempt).AsInt64(); a != int64(i+1) {
			t.Errorf("attempt %d: attribute attempt %d", i+1, a)
		}
		if attr(h, tracing.AttrJobType).AsString() != "report" || attr(h, tracing.AttrJobID).AsString() != job.ID {
			t.Errorf("attempt %d: attributes %v", i+1, h.Attributes)
		}
		if h.SpanKind != trace.SpanKindConsumer {
			t.Errorf("attempt %d: kind %v", i+1, h.SpanKind)
		}
	}
	if handles[0].Status.Code != codes.Error || handles[1].Status.Code == codes.Error {
		t.Errorf("statuses %v, %v: want error, then not", handles[0].Status, handles[1].Status)
	}
	finishes := spansNamed(exp, tracing.SpanFinish)
	if len(finishes) != 2 {
		t.Fatalf("%d finish spans", len(finishes))
	}
	for i, f := range finishes {
		if f.Parent.SpanID() != handles[i].SpanContext.SpanID() || f.SpanContext.TraceID() != traceID {
			t.Errorf("finish %d: parent %s, want %s", i+1, f.Parent.SpanID(), handles[i].SpanContext.SpanID())
		}
	}
	if o := attr(finishes[0], tracing.AttrAttemptOutcome).AsString(); o != "failed" {
		t.Errorf("first finish: outcome %q", o)
	}
	linked := false
	for _, a := range spansNamed(exp, tracing.SpanAccept) {
		if a.Parent.IsValid() {
			t.Errorf("an accept span has parent %s", a.Parent.SpanID())
		}
		for _, l := range a.Links {
			linked = linked || l.SpanContext.SpanID() == enq[0].SpanContext.SpanID()
		}
	}
	if !linked {
		t.Error("no accept span links to the job's context")
	}
}

// A job stored with no trace context (added through fdbq, or by an
// earlier version) is handled in a trace of its own: its handle span is
// a root.
func TestTraceWithoutStoredContextIsRoot(t *testing.T) {
	ctx := within(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet, TracerProvider: tp})
	var seen trace.SpanContext
	if err := jobstage.Work(c, func(ctx context.Context, j *jobstage.Job[Report]) error {
		seen = trace.SpanContextFromContext(ctx)
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	job, err := c.Queue().Add(ctx, c.DB(), fdbq.NewJob{Type: "report", Data: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if !job.Trace.IsZero() {
		t.Fatalf("stored trace %+v", job.Trace)
	}
	if done, err := jobstage.Wait[Report](ctx, c, job.ID); err != nil || done.Outcome != fdbq.Succeeded {
		t.Fatalf("%v %+v", err, done)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	handles := spansNamed(exp, tracing.SpanHandle)
	if len(handles) != 1 || handles[0].Parent.IsValid() || !seen.IsValid() || seen.SpanID() != handles[0].SpanContext.SpanID() {
		t.Fatalf("handle spans %+v; handler's context %v", handles, seen)
	}
}

// A job enqueued over HTTP, on a real listener, with a traceparent
// header is handled in the caller's trace: the HTTP API's enqueue span is
// the header's span's child, and the handle span the enqueue span's.
func TestTraceFromHTTPHeaderToHandler(t *testing.T) {
	ctx := within(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet, TracerProvider: tp})
	seen := make(chan trace.SpanContext, 1)
	if err := jobstage.Work(c, func(ctx context.Context, j *jobstage.Job[Report]) error {
		seen <- trace.SpanContextFromContext(ctx)
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(c.Queue(), httpapi.Options{Logger: quiet, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(api)
	defer hs.Close()
	const traceID, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	req, err := http.NewRequestWithContext(ctx, "POST", hs.URL+"/v1/types/report/jobs", strings.NewReader(`{"id":"r1","data":{"month":"2026-12"}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", "00-"+traceID+"-"+parent+"-01")
	req.Header.Set("tracestate", "congo=t61rcWkgMzE")
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("enqueue: %s", resp.Status)
	}
	sc := <-seen
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	enq := spansNamed(exp, tracing.SpanEnqueue)
	handles := spansNamed(exp, tracing.SpanHandle)
	if len(enq) != 1 || len(handles) != 1 {
		t.Fatalf("%d enqueue and %d handle spans", len(enq), len(handles))
	}
	if enq[0].SpanContext.TraceID().String() != traceID || enq[0].Parent.SpanID().String() != parent {
		t.Fatalf("enqueue span in trace %s, parent %s", enq[0].SpanContext.TraceID(), enq[0].Parent.SpanID())
	}
	h := handles[0]
	if h.SpanContext.TraceID().String() != traceID || h.Parent.SpanID() != enq[0].SpanContext.SpanID() || sc.SpanID() != h.SpanContext.SpanID() {
		t.Fatalf("handle span in trace %s, parent %s; the handler's context %s", h.SpanContext.TraceID(), h.Parent.SpanID(), sc.SpanID())
	}
	if h.SpanContext.TraceState().Get("congo") != "t61rcWkgMzE" {
		t.Errorf("tracestate %q", h.SpanContext.TraceState())
	}
}
