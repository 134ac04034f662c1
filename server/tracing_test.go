package server_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/server"
)

// collector is an OTLP/HTTP trace receiver: it keeps the bodies of the
// exports it is sent.
type collector struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if r.URL.Path == "/v1/traces" {
		c.keep(b)
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
}

// holds reports whether an export held b.
func (c *collector) holds(b []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, body := range c.bodies {
		if bytes.Contains(body, b) {
			return true
		}
	}
	return false
}

// keep records an export.
func (c *collector) keep(b []byte) {
	c.mu.Lock()
	c.bodies = append(c.bodies, b)
	c.mu.Unlock()
}

// grpcCollector is an OTLP/gRPC trace receiver keeping what it is sent
// in its collector.
type grpcCollector struct {
	coltrace.UnimplementedTraceServiceServer
	c *collector
}

func (g *grpcCollector) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	g.c.keep(b)
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// A server configured with tracing continues a request's traceparent in
// the job's attempt (an exec command sees it in TRACEPARENT), and its
// stop sends the spans still buffered to the collector, over either
// protocol: they are there once Stop returns.
func TestTracingExportsOnStop(t *testing.T) {
	t.Run("http", func(t *testing.T) {
		col := &collector{}
		hs := httptest.NewServer(col)
		defer hs.Close()
		exportOnStop(t, col, "http", strings.TrimPrefix(hs.URL, "http://"))
	})
	t.Run("grpc", func(t *testing.T) {
		col := &collector{}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer()
		coltrace.RegisterTraceServiceServer(gs, &grpcCollector{c: col})
		served := make(chan error, 1)
		go func() { served <- gs.Serve(ln) }()
		defer func() {
			gs.Stop()
			<-served
		}()
		exportOnStop(t, col, "grpc", ln.Addr().String())
	})
}

func exportOnStop(t *testing.T, col *collector, protocol, endpoint string) {
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	yaml := fmt.Sprintf(`store: {path: %s}
types: {echo: {}}
pipelines:
  echo: {type: echo, handler: {exec: {command: [sh, -c, 'printf %%s "$TRACEPARENT"']}}}
http: {listen: 127.0.0.1:0}
tracing: {endpoint: %q, protocol: %s, insecure: true, service_name: test-jobstage}
`, filepath.Join(t.TempDir(), "data"), endpoint, protocol)
	s, err := server.New(parse(t, yaml, nil), server.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			s.Stop(ctx)
		}
	}()
	req, err := http.NewRequest("POST", "http://"+s.Addr()+"/v1/types/echo/jobs", strings.NewReader(`{"id":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var added httpapi.Job
	json.NewDecoder(resp.Body).Decode(&added)
	resp.Body.Close()
	if added.TraceID != traceID {
		t.Fatalf("enqueued job's trace_id %q", added.TraceID)
	}
	j, err := httpapi.NewClient("http://"+s.Addr(), "", nil).Wait(ctx, "echo", "x", fdbq.Finished, waitLimit)
	if err != nil || j.Outcome != fdbq.Succeeded {
		t.Fatalf("wait: %v %+v", err, j)
	}
	var seen string
	if err := json.Unmarshal(j.Result, &seen); err != nil || !strings.HasPrefix(seen, "00-"+traceID+"-") || strings.Contains(seen, "00f067aa0ba902b7") {
		t.Fatalf("the command saw TRACEPARENT %s (%v), want the trace %s with the attempt's span", j.Result, err, traceID)
	}
	stopped = true
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	id, _ := hex.DecodeString(traceID)
	span, _ := hex.DecodeString(seen[36:52])
	if !col.holds(id) || !col.holds(span) || !col.holds([]byte("test-jobstage")) {
		t.Fatal("the collector did not get the trace, the handle span and the service name")
	}
}
