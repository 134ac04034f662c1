package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/httpapi"
)

// get answers a GET of url with the bearer token (none if empty): the
// status and the body.
func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// metrics.path: "" turns the endpoint off: neither the default path nor
// any other serves the metrics.
func TestMetricsOff(t *testing.T) {
	cfg := parse(t, fmt.Sprintf("store: {path: %s}\nhttp: {listen: 127.0.0.1:0}\nmetrics: {path: \"\"}\n", filepath.Join(t.TempDir(), "data")), nil)
	s := start(t, cfg)
	base := "http://" + s.Addr()
	if code, body := get(t, base+"/metrics", ""); code != http.StatusNotFound || strings.Contains(body, "jobstage_") {
		t.Fatalf("GET /metrics with the endpoint off: %d %.200s", code, body)
	}
	if code, _ := get(t, base+"/healthz", ""); code != http.StatusOK {
		t.Fatalf("healthz: %d", code)
	}
}

const metricsTokenConfig = `
store: {path: %s}
types:
  echo: {}
http:
  listen: 127.0.0.1:0
  tokens:
    - {name: ops, role: admin, value_env: OPS_TOKEN}
    - {name: app, role: producer, value_env: APP_TOKEN}
    - {name: prometheus, role: metrics, value_env: SCRAPE_TOKEN}
metrics: {path: /internal/metrics}
`

// With tokens the metrics need an admin or a metrics token; a metrics
// token may do nothing else.
func TestMetricsToken(t *testing.T) {
	cfg := parse(t, fmt.Sprintf(metricsTokenConfig, filepath.Join(t.TempDir(), "data")),
		map[string]string{"OPS_TOKEN": "ops-secret", "APP_TOKEN": "app-secret", "SCRAPE_TOKEN": "scrape-secret"})
	s := start(t, cfg)
	base := "http://" + s.Addr()
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/internal/metrics", "", http.StatusUnauthorized},
		{"/internal/metrics", "guess", http.StatusUnauthorized},
		{"/internal/metrics", "app-secret", http.StatusForbidden},
		{"/internal/metrics", "scrape-secret", http.StatusOK},
		{"/internal/metrics", "ops-secret", http.StatusOK},
		{"/metrics", "scrape-secret", http.StatusNotFound},
		{"/v1/types", "scrape-secret", http.StatusForbidden},
		{"/v1/types/echo/jobs", "scrape-secret", http.StatusForbidden},
	} {
		code, body := get(t, base+c.path, c.token)
		if code != c.want {
			t.Errorf("GET %s with %q: %d, want %d: %.200s", c.path, c.token, code, c.want, body)
		}
		if code == http.StatusOK && !strings.Contains(body, `jobstage_jobs_pending{type="echo"} 0`) {
			t.Errorf("GET %s with %q: no metrics: %.200s", c.path, c.token, body)
		}
	}
}

// An external worker's finish and fail sent again with the same lock count
// once in the metrics.
func TestMetricsCountReplayedOutcomesOnce(t *testing.T) {
	cfg := parse(t, fmt.Sprintf("store: {path: %s}\ntypes:\n  report: {retry: {max_attempts: 1}}\nhttp: {listen: 127.0.0.1:0}\n", filepath.Join(t.TempDir(), "data")), nil)
	s := start(t, cfg)
	base := "http://" + s.Addr()
	ctx := context.Background()
	c := httpapi.NewClient(base, "", nil)
	for _, id := range []string{"a", "b"} {
		if _, err := c.Enqueue(ctx, "report", httpapi.NewJob{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := c.Accept(ctx, "report", httpapi.AcceptRequest{Max: 2})
	if err != nil || len(ls) != 2 {
		t.Fatalf("accept: %v %v", ls, err)
	}
	for range 3 {
		if err := c.Finish(ctx, ls[0], nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Fail(ctx, ls[1], "no"); err != nil {
			t.Fatal(err)
		}
	}
	_, body := get(t, base+"/metrics", "")
	for _, want := range []string{
		`jobstage_jobs_finished_total{outcome="succeeded",type="report"} 1`,
		`jobstage_jobs_finished_total{outcome="failed",type="report"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
