package dashboards_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/dashboards"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/handlers"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/metrics"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
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

// runJobstage runs jobstage's parts in this process — the embedded store,
// two pipelines (a Go handler and the exec handler) with jobs that succeed,
// fail and are retried, the activity monitor, and the metrics endpoint on a
// real port — and returns the endpoint's address once every job finished.
func runJobstage(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	st, err := embedded.Open(t.TempDir(), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	t.Cleanup(func() { db.Close() })
	q := fdbq.New(db, fdbq.Options{})
	for _, typ := range []string{"email", "resize"} {
		s := fdbq.DefaultTypeSettings()
		s.Retry = fdbq.RetryPolicy{MaxAttempts: 2, Backoff: fdbq.Constant, Base: time.Millisecond}
		if err := q.SetType(ctx, db, typ, s); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, q)
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveStore(db)

	mon := fdbq.NewMonitor(q, fdbq.MonitorOptions{OnSweep: m.OnSweep})
	stats, err := mon.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m.OnSweep(stats)

	type email struct {
		Fail bool `json:"fail"`
	}
	send := func(_ context.Context, j *consumer.Job[email]) (string, error) {
		if j.Data.Fail {
			return "", errors.New("mailbox full")
		}
		return "sent", nil
	}
	ce, err := consumer.New(send, consumer.Options{Concurrency: 2}, metrics.Middleware[email, string](m))
	if err != nil {
		t.Fatal(err)
	}
	resize, err := handlers.Exec(handlers.ExecOptions{Command: []string{"/bin/sh", "-c", `d=$(cat); case "$d" in *fail*) echo "cannot resize" >&2; exit 1;; esac; echo "$d"`}})
	if err != nil {
		t.Fatal(err)
	}
	cr, err := consumer.New(resize, consumer.Options{Concurrency: 2}, metrics.Middleware[json.RawMessage, json.RawMessage](m))
	if err != nil {
		t.Fatal(err)
	}
	for _, pl := range []struct {
		name, typ string
		c         *consumer.Consumer
	}{{"mailer", "email", ce}, {"resizer", "resize", cr}} {
		p, err := pipeline.From(producer.New(q, pl.typ, producer.Options{})).Via(m.Stage()).To(pl.c).Build()
		if err != nil {
			t.Fatal(err)
		}
		m.ObservePipeline(pl.name, pl.typ, p)
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Stop(ctx) })
	}

	var jobs []fdbq.NewJob
	for i := range 6 {
		data := `{}`
		if i%3 == 0 {
			data = `{"fail":true}`
		}
		jobs = append(jobs, fdbq.NewJob{Type: "email", ID: "e" + strconv.Itoa(i), Data: json.RawMessage(data)})
		jobs = append(jobs, fdbq.NewJob{Type: "resize", ID: "r" + strconv.Itoa(i), Data: json.RawMessage(data)})
	}
	start := time.Now()
	if _, err := q.AddBatch(ctx, db, jobs); err != nil {
		t.Fatal(err)
	}
	m.Enqueued("email", 6)
	m.Enqueued("resize", 6)
	m.HTTPObserve("POST /v1/types/{type}/jobs", http.StatusCreated, time.Since(start))
	wctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	for _, typ := range []string{"email", "resize"} {
		ids := []string{}
		for _, j := range jobs {
			if j.Type == typ {
				ids = append(ids, j.ID)
			}
		}
		res, err := q.Wait(wctx, typ, ids, fdbq.Finished)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(reg)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			m.HTTPObserve("unknown", http.StatusNotFound, time.Since(began))
			return
		}
		h.ServeHTTP(w, r)
		m.HTTPObserve("GET /metrics", http.StatusOK, time.Since(began))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
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
