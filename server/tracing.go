package server

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"

	"github.com/jobstage/jobstage/config"
)

// tracingStopTimeout bounds the sending of the last spans when the
// server stops: a collector that does not answer does not hold the stop.
const tracingStopTimeout = 5 * time.Second

// newTracerProvider is the tracer provider of the server's spans: with
// the config's tracing section, an SDK provider exporting in batches
// over OTLP, shut down (what it buffers sent) by the application's last
// stop hook, after the pipelines and the HTTP API whose spans it takes;
// without, given (Options.TracerProvider), else otel's global one.
func newTracerProvider(lc fx.Lifecycle, cfg *config.Config, given trace.TracerProvider) (trace.TracerProvider, error) {
	tc := cfg.Tracing
	if tc == nil {
		if given != nil {
			return given, nil
		}
		return otel.GetTracerProvider(), nil
	}
	exp, err := newExporter(tc)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(tc.SampleRatio))),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", tc.ServiceName))),
	)
	lc.Append(fx.StopHook(func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, tracingStopTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("tracing: send the last spans: %w", err)
		}
		return nil
	}))
	return tp, nil
}

// newExporter makes the OTLP exporter tc describes. Neither protocol
// connects here: the first export does.
func newExporter(tc *config.Tracing) (sdktrace.SpanExporter, error) {
	ctx := context.Background()
	if tc.Protocol == config.ProtocolHTTP {
		o := []otlptracehttp.Option{otlptracehttp.WithEndpoint(tc.Endpoint), otlptracehttp.WithHeaders(tc.Headers)}
		if tc.Insecure {
			o = append(o, otlptracehttp.WithInsecure())
		}
		return otlptracehttp.New(ctx, o...)
	}
	o := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(tc.Endpoint), otlptracegrpc.WithHeaders(tc.Headers)}
	if tc.Insecure {
		o = append(o, otlptracegrpc.WithInsecure())
	}
	return otlptracegrpc.New(ctx, o...)
}

// IDTracerProvider gives each trace an id and records nothing: the spans
// of a trace it starts are not sampled, so none is kept or sent, but a
// job's stored trace context, its handler's ctx and an exec command's
// TRACEPARENT name the same trace id through every attempt, on any
// process, for logs to be joined by. A caller's sampled trace is
// continued sampled (the spans are recorded and dropped here, and the
// flag passes on to what the handlers call). jobstage serve uses it when
// its config has no tracing section.
func IDTracerProvider() trace.TracerProvider {
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
}
