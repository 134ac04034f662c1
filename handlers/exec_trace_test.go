package handlers_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/handlers"
	"github.com/jobstage/jobstage/tracing"
)

// The command sees the trace context of the attempt's span in TRACEPARENT
// and TRACESTATE (over what the config's env says); without one it gets
// neither from the job.
func TestExecPassesTraceContext(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tc, err := fdbq.ParseTraceContext(parent, "rojo=00f067aa0ba902b7")
	if err != nil {
		t.Fatal(err)
	}
	h := mustExec(t, handlers.ExecOptions{
		Command: sh(`printf '%s|%s|%s' "$TRACEPARENT" "$TRACESTATE" "${TRACEPARENT+set}"`),
		Env:     map[string]string{"TRACEPARENT": "forged"},
	})
	ctx := trace.ContextWithSpanContext(context.Background(), tracing.SpanContext(tc))
	got, err := h(ctx, job(`null`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `"` + parent + `|rojo=00f067aa0ba902b7|set"`; string(got) != want {
		t.Fatalf("the command saw %s, want %s", got, want)
	}
	h = mustExec(t, handlers.ExecOptions{Command: sh(`printf '%s|%s' "${TRACEPARENT-unset}" "${TRACESTATE-unset}"`)})
	got, err = h(context.Background(), job(`null`))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `"unset|unset"` {
		t.Fatalf("without a trace the command saw %s", got)
	}
}
