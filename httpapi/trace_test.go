package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/tracing"
)

const (
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	traceparent = "00-" + traceID + "-00f067aa0ba902b7-01"
)

// enqueueWith posts body to the enqueue route with the headers given
// (each value its own header line) and answers the jobs enqueued.
func (e *env) enqueueWith(t *testing.T, body string, headers map[string][]string) []httpapi.Job {
	t.Helper()
	req, err := http.NewRequest("POST", e.url+"/v1/types/email/jobs", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := e.hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d for headers %q", resp.StatusCode, headers)
	}
	var jobs []httpapi.Job
	if strings.HasPrefix(body, "[") {
		err = json.NewDecoder(resp.Body).Decode(&jobs)
	} else {
		var j httpapi.Job
		err = json.NewDecoder(resp.Body).Decode(&j)
		jobs = append(jobs, j)
	}
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

// An enqueue with a traceparent header, one job or a batch, runs its
// enqueue span in that trace and stores the span's context with each
// job, whose trace_id the answer and a later GET show; the tracestate
// goes with it.
func TestEnqueueContinuesTraceparent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	e := newEnv(t, httpapi.Options{TracerProvider: tp})
	h := map[string][]string{"Traceparent": {traceparent}, "Tracestate": {"rojo=1", "congo=2"}}
	one := e.enqueueWith(t, `{"id":"one","data":1}`, h)
	batch := e.enqueueWith(t, `[{"id":"b1"},{"id":"b2"}]`, h)
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	for i, s := range spans {
		if s.Name != tracing.SpanEnqueue || s.SpanContext.TraceID().String() != traceID || s.Parent.SpanID().String() != "00f067aa0ba902b7" {
			t.Fatalf("span %d: %s in trace %s, parent %s", i, s.Name, s.SpanContext.TraceID(), s.Parent.SpanID())
		}
	}
	for i, j := range append(one, batch...) {
		if j.TraceID != traceID {
			t.Fatalf("job %d answered trace_id %q", i, j.TraceID)
		}
		stored, err := e.q.Get(context.Background(), e.db, "email", j.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := spans[min(i, 1)].SpanContext
		if stored.Trace.SpanID != want.SpanID() || stored.Trace.State != "rojo=1,congo=2" {
			t.Fatalf("job %s stores %+v, want span %s", j.ID, stored.Trace, want.SpanID())
		}
	}
	var got httpapi.Job
	a := e.do("GET", "/v1/types/email/jobs/b2", "", "")
	if err := json.Unmarshal(a.body, &got); err != nil || got.TraceID != traceID {
		t.Fatalf("GET: %v %s", err, a.body)
	}
}

// Without a tracer provider set (the global one does nothing), the jobs
// still store the caller's trace context, so the handler continues it.
func TestEnqueueTraceparentWithoutProvider(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	j := e.enqueueWith(t, `{"data":1}`, map[string][]string{"Traceparent": {traceparent}})[0]
	stored, err := e.q.Get(context.Background(), e.db, "email", j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.TraceID != traceID || stored.Trace.Traceparent() != traceparent {
		t.Fatalf("answered %q, stored %q", j.TraceID, stored.Trace.Traceparent())
	}
	// A job enqueued without one has none, and its JSON no trace_id.
	a := e.do("POST", "/v1/types/email/jobs", "", `{"id":"plain"}`)
	if a.status != http.StatusCreated || strings.Contains(string(a.body), "trace_id") {
		t.Fatalf("%d %s", a.status, a.body)
	}
}

// Hostile trace headers never cost the job: each enqueue is answered
// 201, the job is stored, and what it stores is a valid context or none,
// its tracestate within fdbq.MaxTraceStateSize.
func TestEnqueueHostileTraceHeaders(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	e := newEnv(t, httpapi.Options{TracerProvider: tp})
	huge := strings.Repeat("a", 64<<10)
	for i, h := range []map[string][]string{
		{"Traceparent": {"00-" + traceID + "-00f067aa0ba902b7-01", traceparent}}, // twice
		{"Traceparent": {"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}},
		{"Traceparent": {"00-" + strings.ToUpper(traceID) + "-00f067aa0ba902b7-01"}},
		{"Traceparent": {"ff-" + traceID + "-00f067aa0ba902b7-01"}},
		{"Traceparent": {traceparent + "-extra"}},
		{"Traceparent": {huge}},
		{"Traceparent": {"\xff\xfe-" + traceID}},
		{"Traceparent": {traceparent}, "Tracestate": {huge}},
		{"Traceparent": {traceparent}, "Tracestate": {strings.Repeat("k="+strings.Repeat("v", 200)+",", 31)}},
		{"Traceparent": {traceparent}, "Tracestate": {"=,=,\xff=\x80"}},
		{"Tracestate": {"rojo=1"}},
	} {
		j := e.enqueueWith(t, `{"data":1}`, h)[0]
		stored, err := e.q.Get(context.Background(), e.db, "email", j.ID)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		tc := stored.Trace
		if len(tc.State) > fdbq.MaxTraceStateSize {
			t.Fatalf("case %d: a tracestate of %d bytes stored", i, len(tc.State))
		}
		if _, err := fdbq.ParseTraceContext(tc.Traceparent(), tc.State); err != nil {
			t.Fatalf("case %d: stored %+v: %v", i, tc, err)
		}
		// An enqueue with a provider always has a span; its trace is the
		// header's only when the header is valid.
		if tc.TraceIDString() == traceID && i < 7 {
			t.Fatalf("case %d: the invalid traceparent was continued", i)
		}
		if i >= 7 && i < 10 && tc.TraceIDString() != traceID {
			t.Fatalf("case %d: a bad tracestate lost the traceparent: %+v", i, tc)
		}
	}
}
