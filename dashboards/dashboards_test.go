package dashboards_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/config"
	"github.com/jobstage/jobstage/dashboards"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/server"
)

// waitLimit bounds the waits for jobs; promLimit the wait for Prometheus to
// start and scrape.
const (
	waitLimit = 20 * time.Second
	promLimit = 60 * time.Second
)

type target struct {
	Expr string `json:"expr"`
}

type panel struct {
	ID         int               `json:"id"`
	Type       string            `json:"type"`
	Title      string            `json:"title"`
	Datasource map[string]string `json:"datasource"`
	Targets    []target          `json:"targets"`
}

type variable struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Query json.RawMessage `json:"query"`
}

type dashboard struct {
	UID    string `json:"uid"`
	Inputs []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

func load(t *testing.T) dashboard {
	t.Helper()
	b, err := dashboards.Files.ReadFile("jobstage.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("jobstage.json: %v", err)
	}
	return d
}

// labelValues matches Grafana's label_values(metric, label) variable query.
var labelValues = regexp.MustCompile(`^label_values\((\w+), *(\w+)\)$`)

func (v variable) labelValuesQuery(t *testing.T) (metric, label string) {
	t.Helper()
	var q struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(v.Query, &q); err != nil {
		t.Fatalf("variable %s: query: %v", v.Name, err)
	}
	m := labelValues.FindStringSubmatch(q.Query)
	if m == nil {
		t.Fatalf("variable %s: query %q is not label_values(metric, label)", v.Name, q.Query)
	}
	return m[1], m[2]
}

func TestDashboardShape(t *testing.T) {
	d := load(t)
	if d.UID != "jobstage-overview" {
		t.Errorf("uid %q: dashboards are linked to by their uid; it must not change", d.UID)
	}
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].PluginID != "prometheus" {
		t.Errorf("__inputs %+v, want the one Prometheus input DS_PROMETHEUS", d.Inputs)
	}
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v, ok := vars["type"]; !ok {
		t.Error("no type variable")
	} else if m, l := v.labelValuesQuery(t); m != "jobstage_jobs_pending" || l != "type" {
		t.Errorf("type variable reads label_values(%s, %s)", m, l)
	}
	if v := vars["DS_PROMETHEUS"]; v.Type != "datasource" {
		t.Errorf("no data source variable DS_PROMETHEUS, for provisioned dashboards")
	}
	ids := map[int]bool{}
	titles := map[string]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		titles[p.Title] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource["uid"] != "${DS_PROMETHEUS}" {
			t.Errorf("panel %q: data source %v, want ${DS_PROMETHEUS}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
		}
	}
	for _, want := range []string{
		"Throughput by outcome", "Run duration percentiles", "Queue wait percentiles", "Pending jobs",
		"Oldest pending age", "Running vs demand", "Retries and recycled jobs", "Store transactions",
		"Store retries by error code", "HTTP requests", "HTTP latency",
	} {
		if !titles[want] {
			t.Errorf("no panel %q", want)
		}
	}
}

func TestProvisioningFiles(t *testing.T) {
	for _, name := range []string{"provisioning/dashboards.yaml", "provisioning/datasources.yaml"} {
		b, err := dashboards.Files.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "apiVersion: 1") {
			t.Errorf("%s is not a Grafana provisioning file", name)
		}
	}
}

// TestPanelsQueryARealPrometheus runs jobstage's metrics with real jobs on
// the embedded store, has a real Prometheus scrape them, and evaluates every
// panel's query through Prometheus' HTTP API: each must parse and return
// data.
func TestPanelsQueryARealPrometheus(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("JOBSTAGE_REQUIRE_PROMETHEUS") == "1" {
			t.Fatalf("JOBSTAGE_REQUIRE_PROMETHEUS=1 but no prometheus binary: %v", err)
		}
		t.Skip("no prometheus binary (apt-get install prometheus); JOBSTAGE_REQUIRE_PROMETHEUS=1 makes this a failure")
	}
	d := load(t)
	metricsAddr := runJobstage(t)
	prom := startPrometheus(t, bin, metricsAddr)

	ctx, cancel := context.WithTimeout(context.Background(), promLimit)
	defer cancel()
	waitScraped(ctx, t, prom)

	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		metric, label := v.labelValuesQuery(t)
		var values []string
		promGet(ctx, t, prom, "/api/v1/label/"+label+"/values", url.Values{"match[]": {metric}}, &values)
		if len(values) == 0 {
			t.Errorf("variable %s: no values of %s on %s", v.Name, label, metric)
		}
	}

	vars := strings.NewReplacer("$__rate_interval", "1m", "$__interval", "15s", "$type", ".*", "$job", ".*")
	n := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			n++
			expr := vars.Replace(tg.Expr)
			var res struct {
				ResultType string            `json:"resultType"`
				Result     []json.RawMessage `json:"result"`
			}
			promGet(ctx, t, prom, "/api/v1/query", url.Values{"query": {expr}}, &res)
			if len(res.Result) == 0 {
				t.Errorf("panel %q: %s returned no data", p.Title, expr)
			}
		}
	}
	if n == 0 {
		t.Fatal("no queries in the dashboard")
	}
}

// serverConfig is the jobstage of the test: two exec pipelines whose jobs
// succeed, or fail and are retried once, on the embedded store.
const serverConfig = `
store:
  path: %s
types:
  email:
    retry: {max_attempts: 2, backoff: constant, base: 1ms}
  resize:
    retry: {max_attempts: 2, backoff: constant, base: 1ms}
pipelines:
  mailer:
    type: email
    concurrency: 2
    handler:
      exec:
        command: ["/bin/sh", "-c", 'd=$(cat); case "$d" in *fail*) echo "mailbox full" >&2; exit 1;; esac; echo sent']
  resizer:
    type: resize
    concurrency: 2
    handler:
      exec:
        command: ["/bin/sh", "-c", 'd=$(cat); case "$d" in *fail*) echo "cannot resize" >&2; exit 1;; esac; echo "$d"']
http:
  listen: 127.0.0.1:0
`

// runJobstage runs a jobstage server as ` + "`jobstage serve`" + ` assembles it —
// the embedded store, the activity monitor, two pipelines of the exec
// handler, the HTTP API and its metrics route on a real port — enqueues
// jobs that succeed, fail and are retried through the API, an external
// worker takes one through the API, and returns the server's address once
// every job finished.
func runJobstage(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	cfg, problems := config.Parse("dashboards-test.yaml", fmt.Appendf(nil, serverConfig, filepath.Join(t.TempDir(), "data")), nil)
	if len(problems) > 0 {
		t.Fatalf("config: %v", problems)
	}
	srv, err := server.New(cfg, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(ctx, waitLimit)
		defer cancel()
		if err := srv.Stop(stopCtx); err != nil {
			t.Error(err)
		}
	})
	cl := httpapi.NewClient("http://"+srv.Addr(), "", nil)

	byType := map[string][]string{}
	for _, typ := range []string{"email", "resize"} {
		var jobs []httpapi.NewJob
		for i := range 6 {
			data := `{}`
			if i%3 == 0 {
				data = `{"fail":true}`
			}
			id := typ + strconv.Itoa(i)
			jobs = append(jobs, httpapi.NewJob{ID: id, Data: json.RawMessage(data)})
			byType[typ] = append(byType[typ], id)
		}
		if _, err := cl.EnqueueBatch(ctx, typ, jobs); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	for typ, ids := range byType {
		res, err := srv.Queue().Wait(wctx, typ, ids, fdbq.Finished)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	// A type worked by an external worker through the API alone.
	if _, err := cl.SetType(ctx, "report", httpapi.TypeSettings{
		ActivityTimeout: httpapi.Duration(30 * time.Second),
		Retry:           httpapi.RetryPolicy{MaxAttempts: 1, Backoff: fdbq.Constant, Base: httpapi.Duration(time.Second)},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Enqueue(ctx, "report", httpapi.NewJob{ID: "r1"}); err != nil {
		t.Fatal(err)
	}
	ls, err := cl.Accept(ctx, "report", httpapi.AcceptRequest{Max: 1, Wait: httpapi.Duration(waitLimit)})
	if err != nil || len(ls) != 1 {
		t.Fatalf("external accept: %v, %d jobs", err, len(ls))
	}
	if err := cl.Finish(ctx, ls[0], json.RawMessage(`"done"`)); err != nil {
		t.Fatal(err)
	}
	return srv.Addr()
}

// startPrometheus runs Prometheus on a free loopback port, scraping addr
// every second, and returns its base URL.
func startPrometheus(t *testing.T, bin, addr string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: jobstage
    static_configs:
      - targets: [%q]
`, addr), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen,
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("prometheus log:\n%s", b)
			}
		}
	})
	return "http://" + listen
}

// waitScraped waits until Prometheus is up, reports the jobstage target
// up, and holds at least three scrapes of it, so that rate() over a minute
// has points to work with. It polls Prometheus' API: a readiness wait,
// bounded by ctx.
func waitScraped(ctx context.Context, t *testing.T, prom string) {
	t.Helper()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if scraped(ctx, prom) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Prometheus did not scrape jobstage three times within %v", promLimit)
		case <-tick.C:
		}
	}
}

func scraped(ctx context.Context, prom string) bool {
	var targets struct {
		ActiveTargets []struct {
			Health string `json:"health"`
		} `json:"activeTargets"`
	}
	if apiGet(ctx, prom, "/api/v1/targets", nil, &targets) != nil ||
		len(targets.ActiveTargets) != 1 || targets.ActiveTargets[0].Health != "up" {
		return false
	}
	var res struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	q := `count_over_time(jobstage_queue_scrape_errors_total{job="jobstage"}[1m])`
	if apiGet(ctx, prom, "/api/v1/query", url.Values{"query": {q}}, &res) != nil || len(res.Result) != 1 {
		return false
	}
	s, _ := res.Result[0].Value[1].(string)
	n, _ := strconv.ParseFloat(s, 64)
	return n >= 3
}

// promGet calls Prometheus' API and decodes its data into out, failing the
// test on any error, a query that does not parse included.
func promGet(ctx context.Context, t *testing.T, prom, path string, params url.Values, out any) {
	t.Helper()
	if err := apiGet(ctx, prom, path, params, out); err != nil {
		t.Errorf("%s %v: %v", path, params, err)
	}
}

func apiGet(ctx context.Context, prom, path string, params url.Values, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, prom+path+"?"+params.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status    string          `json:"status"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("status %s: %s", resp.Status, b)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s", env.ErrorType, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}
