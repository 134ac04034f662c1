package main

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// An operator sees the trace a job was enqueued in: `jobstage get` prints
// the trace id of the request's traceparent, and without one the id of a
// trace of the job's own (the server has no tracing section: nothing is
// sent, but the id is there to find the job's attempts by).
func TestGetShowsTraceID(t *testing.T) {
	cfg, data := copyQuickstart(t)
	s := startServer(t, cfg, "JOBSTAGE_STORE__PATH="+data)
	defer s.stop()
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, err := http.NewRequest("POST", s.url+"/v1/types/echo/jobs", strings.NewReader(`{"id":"traced","data":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("enqueue: %s", resp.Status)
	}
	out, errOut, code := jobstage(t, "", "get", "echo", "traced", "--server", s.url)
	if code != 0 || !regexp.MustCompile(`(?m)^trace:\s+`+traceID+`$`).MatchString(out) {
		t.Fatalf("get: exit %d: %s%s", code, out, errOut)
	}
	if _, errOut, code := jobstage(t, "", "enqueue", "echo", "{}", "--id", "plain", "--server", s.url); code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, errOut)
	}
	out, errOut, code = jobstage(t, "", "get", "echo", "plain", "--server", s.url)
	m := regexp.MustCompile(`(?m)^trace:\s+([0-9a-f]{32})$`).FindStringSubmatch(out)
	if code != 0 || m == nil || m[1] == traceID || m[1] == strings.Repeat("0", 32) {
		t.Fatalf("get of a job enqueued with no traceparent: exit %d: %s%s", code, out, errOut)
	}
}
