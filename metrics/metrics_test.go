package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/metrics"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// waitLimit bounds every wait of these tests: a wait that takes longer
// fails the test instead of hanging it.
const waitLimit = 20 * time.Second

func openDB(t *testing.T) *kv.DB { return jobtest.OpenDB(t) }

func setType(t *testing.T, q *fdbq.Queue, name string, maxAttempts int, paused bool) {
	t.Helper()
	s := fdbq.DefaultTypeSettings()
	s.Retry = fdbq.RetryPolicy{MaxAttempts: maxAttempts, Backoff: fdbq.Constant, Base: time.Millisecond}
	s.Paused = paused
	if err := q.SetType(context.Background(), q.DB(), name, s); err != nil {
		t.Fatal(err)
	}
}

type task struct {
	Fail  bool `json:"fail"`
	Panic bool `json:"panic"`
}

func work(_ context.Context, j *consumer.Job[task]) (string, error) {
	switch {
	case j.Data.Panic:
		panic("bad input")
	case j.Data.Fail:
		return "", errors.New("refused")
	}
	return "ok", nil
}

// TestPipelineMovesCounters runs jobs that succeed, fail and panic through
// a real pipeline on the embedded store, and reads the metrics back.
func TestPipelineMovesCounters(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	q := fdbq.New(db, fdbq.Options{})
	setType(t, q, "email", 2, false)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, q)
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveStore(db)

	c, err := consumer.New(work, consumer.Options{Concurrency: 4}, metrics.Middleware(m))
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.From(producer.New(q, "email", producer.Options{})).Via(m.Stage()).To(c).
		WithOptions(pipeline.Options{OnEnded: m.Ended}).Build()
	if err != nil {
		t.Fatal(err)
	}
	m.ObservePipeline("mailer", "email", p)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(ctx)

	jobs := []fdbq.NewJob{
		{Type: "email", ID: "job-ok-1", Data: json.RawMessage(`{}`)},
		{Type: "email", ID: "job-ok-2", Data: json.RawMessage(`{}`)},
		{Type: "email", ID: "job-ok-3", Data: json.RawMessage(`{}`)},
		{Type: "email", ID: "job-fail", Data: json.RawMessage(`{"fail":true}`)},                   // two attempts, one retry
		{Type: "email", ID: "job-panic", Data: json.RawMessage(`{"panic":true}`), MaxAttempts: 1}, // no retry
	}
	if _, err := q.AddBatch(ctx, db, jobs); err != nil {
		t.Fatal(err)
	}
	m.Enqueued("email", len(jobs))
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	wctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	res, err := q.Wait(wctx, "email", ids, fdbq.Finished)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.Job.State != fdbq.Finished {
			t.Fatalf("job %s: %+v", ids[i], r)
		}
	}
	// The middleware counted each attempt before the consumer committed
	// it; Ended counted the retry after, and Stop returns once every job
	// it held has been counted.
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"enqueued", value(t, reg, "jobstage_jobs_enqueued_total", "email"), 5},
		{"accepted", value(t, reg, "jobstage_jobs_accepted_total", "email"), 6},
		{"succeeded", value(t, reg, "jobstage_jobs_finished_total", "email", "succeeded"), 3},
		{"failed", value(t, reg, "jobstage_jobs_finished_total", "email", "failed"), 2},
		{"panicked", value(t, reg, "jobstage_jobs_finished_total", "email", "panicked"), 1},
		{"retried", value(t, reg, "jobstage_jobs_retried_total", "email"), 1},
		{"running handlers", value(t, reg, "jobstage_handlers_running", "email"), 0},
		{"pending", value(t, reg, "jobstage_jobs_pending", "email"), 0},
		{"running", value(t, reg, "jobstage_jobs_running", "email"), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if n := histogramCount(t, reg, "jobstage_job_run_duration_seconds"); n != 6 {
		t.Errorf("run duration observations: %d, want 6", n)
	}
	if n := histogramCount(t, reg, "jobstage_job_queue_wait_seconds"); n != 6 {
		t.Errorf("queue wait observations: %d, want 6", n)
	}
	if v := value(t, reg, "jobstage_store_commits_total"); v < 6 {
		t.Errorf("store commits: %v, want at least one per attempt", v)
	}
	// The consumer asks again as its jobs commit, so an idle pipeline's
	// demand is anywhere from its min to its max demand, and its jobs in
	// flight drop to 0 as the last ones finish.
	maxDemand := float64(c.Options().MaxDemand)
	if v := value(t, reg, "jobstage_producer_demand", "mailer", "email"); v < 0 || v > maxDemand {
		t.Errorf("demand: %v, want between 0 and the consumer's max demand %v", v, maxDemand)
	}
	if v := value(t, reg, "jobstage_pipeline_buffered_jobs", "mailer", "email"); v < 0 || v > maxDemand {
		t.Errorf("buffered jobs: %v, want between 0 and %v", v, maxDemand)
	}

	checkLabels(t, reg, ids)
}

// gathered returns the families reg gathers, by name.
func gathered(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func mfs(t *testing.T, reg prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	out, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// value returns the value of the counter or gauge series of a gathered
// family with the given label values, in any order.
func value(t *testing.T, reg prometheus.Gatherer, name string, values ...string) float64 {
	t.Helper()
	mf, ok := gathered(t, reg)[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	want := slices.Sorted(slices.Values(values))
	for _, m := range mf.GetMetric() {
		var got []string
		for _, l := range m.GetLabel() {
			got = append(got, l.GetValue())
		}
		slices.Sort(got)
		if slices.Equal(got, want) {
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s%v", name, values)
	return 0
}

func histogramCount(t *testing.T, reg prometheus.Gatherer, name string) uint64 {
	t.Helper()
	mf, ok := gathered(t, reg)[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	var n uint64
	for _, m := range mf.GetMetric() {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

// checkLabels checks that jobstage's series use only the documented labels
// and that no label value is a job id.
func checkLabels(t *testing.T, reg prometheus.Gatherer, ids []string) {
	t.Helper()
	allowed := []string{"type", "outcome", "route", "status", "code", "pipeline"}
	for name, mf := range gathered(t, reg) {
		if !strings.HasPrefix(name, "jobstage_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(allowed, l.GetName()) {
					t.Errorf("%s has label %s", name, l.GetName())
				}
				if slices.Contains(ids, l.GetValue()) {
					t.Errorf("%s{%s=%q}: a job id as a label value", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
}

func TestRegistryHasEveryMetric(t *testing.T) {
	db := openDB(t)
	q := fdbq.New(db, fdbq.Options{})
	setType(t, q, "email", 3, false)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, q)
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveStore(db)
	p, err := pipeline.From(producer.New(q, "email", producer.Options{})).
		To(consumer.Must(consumer.New(work, consumer.Options{}))).Build()
	if err != nil {
		t.Fatal(err)
	}
	m.ObservePipeline("mailer", "email", p)
	// The vectors make a series once they have counted something.
	m.Enqueued("email", 1)
	m.Accepted([]*fdbq.Lease{{Job: fdbq.Job{Type: "email", ID: "x", ScheduledAt: time.Now()}}})
	m.ExternalOutcome("email", consumer.OutcomeSucceeded)
	m.ExternalOutcome("email", "retried")
	m.OnSweep(fdbq.SweepStats{Recycled: 1, ByType: map[string]fdbq.TypeSweepStats{"email": {Recycled: 1}}})
	m.HTTPObserve("GET /healthz", 200, time.Millisecond)
	h := consumer.Wrap(func(context.Context, *consumer.Job[task]) (string, error) { return "", errors.New("no") }, metrics.Middleware(m))
	if _, err := h(context.Background(), &consumer.Job[task]{Type: "email", Attempt: 1}); err == nil {
		t.Fatal("the middleware swallowed the error")
	}

	got := gathered(t, reg)
	for _, name := range []string{
		"jobstage_jobs_enqueued_total", "jobstage_jobs_accepted_total", "jobstage_job_queue_wait_seconds",
		"jobstage_jobs_finished_total", "jobstage_job_run_duration_seconds", "jobstage_handlers_running",
		"jobstage_jobs_retried_total", "jobstage_jobs_recycled_total", "jobstage_jobs_expired_total",
		"jobstage_jobs_sweep_skipped_total", "jobstage_types_unreadable",
		"jobstage_http_requests_total", "jobstage_http_request_duration_seconds",
		"jobstage_queue_scrape_errors_total",
		"jobstage_jobs_pending", "jobstage_jobs_running", "jobstage_oldest_pending_age_seconds",
		"jobstage_producer_demand", "jobstage_pipeline_buffered_jobs",
		"jobstage_store_transactions_total", "jobstage_store_commits_total",
		"jobstage_store_conflicts_total", "jobstage_store_retries_total",
		"go_goroutines", "go_memstats_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes",
	} {
		if _, ok := got[name]; !ok {
			t.Errorf("registry lacks %s", name)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(mfs(t, reg)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "jobstage_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}

// TestOldestPendingAge reads the age of the longest-due job across priority
// bands, leaving out jobs scheduled in the future.
func TestOldestPendingAge(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	q := fdbq.New(db, fdbq.Options{})
	setType(t, q, "report", 1, true) // paused: nothing takes the jobs
	setType(t, q, "later", 1, true)
	setType(t, q, "idle", 1, false)
	now := time.Now()
	if _, err := q.AddBatch(ctx, db, []fdbq.NewJob{
		{Type: "report", Priority: 9, ScheduledAt: now.Add(-10 * time.Minute)},
		{Type: "report", Priority: 5, ScheduledAt: now.Add(-time.Hour)}, // a lower band holds the oldest
		{Type: "report", Priority: 1, ScheduledAt: now.Add(time.Hour)},  // not due
		{Type: "later", ScheduledAt: now.Add(time.Hour)},
	}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, q); err != nil {
		t.Fatal(err)
	}
	age := value(t, reg, "jobstage_oldest_pending_age_seconds", "report")
	if age < 3600 || age > 3600+waitLimit.Seconds() {
		t.Errorf("oldest pending age of report: %vs, want about an hour", age)
	}
	if v := value(t, reg, "jobstage_jobs_pending", "report"); v != 3 {
		t.Errorf("pending report jobs: %v, want 3", v)
	}
	for _, typ := range []string{"later", "idle"} {
		if v := value(t, reg, "jobstage_oldest_pending_age_seconds", typ); v != 0 {
			t.Errorf("oldest pending age of %s: %v, want 0 (nothing due)", typ, v)
		}
	}
}

func TestRecycledBySweep(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	var clock struct{ now time.Time }
	clock.now = time.Now()
	q := fdbq.New(db, fdbq.Options{Now: func() time.Time { return clock.now }})
	setType(t, q, "email", 2, false)
	if _, err := q.AddBatch(ctx, db, []fdbq.NewJob{{Type: "email"}, {Type: "email", MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	if ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 2}); err != nil || len(ls) != 2 {
		t.Fatalf("accepted %d: %v", len(ls), err)
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, q)
	if err != nil {
		t.Fatal(err)
	}
	mon := fdbq.NewMonitor(q, fdbq.MonitorOptions{Clock: func() time.Time { return clock.now }})
	if _, err := mon.Sweep(ctx); err != nil { // notes the accepts
		t.Fatal(err)
	}
	clock.now = clock.now.Add(time.Hour) // past the activity timeout; nobody heartbeated
	s, err := mon.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m.OnSweep(s)
	if v := value(t, reg, "jobstage_jobs_recycled_total", "email", "retried"); v != 1 {
		t.Errorf("recycled and retried: %v, want 1 (sweep: %+v)", v, s)
	}
	if v := value(t, reg, "jobstage_jobs_recycled_total", "email", "failed"); v != 1 {
		t.Errorf("recycled and failed: %v, want 1 (sweep: %+v)", v, s)
	}
	if v := value(t, reg, "jobstage_jobs_expired_total", "email"); v != 0 {
		t.Errorf("expired: %v, want 0", v)
	}
}

func TestStoreRetriesByCode(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveStore(db)
	key := []byte("counter")
	attempts := 0
	err = db.Transact(ctx, func(tx kv.Tx) error {
		attempts++
		if _, err := tx.Get(key); err != nil {
			return err
		}
		if attempts == 1 {
			// Another writer commits the key this transaction read.
			if err := db.Transact(ctx, func(other kv.Tx) error { other.Set(key, []byte("x")); return nil }); err != nil {
				return err
			}
		}
		tx.Set(key, []byte("y"))
		return nil
	})
	if err != nil || attempts != 2 {
		t.Fatalf("attempts %d: %v", attempts, err)
	}
	if v := value(t, reg, "jobstage_store_retries_total", "1020"); v != 1 {
		t.Errorf("retries after not_committed: %v, want 1", v)
	}
	if v := value(t, reg, "jobstage_store_conflicts_total"); v != 1 {
		t.Errorf("conflicts: %v, want 1", v)
	}
}

func TestScrapeOfAClosedStoreCountsAnError(t *testing.T) {
	db := openDB(t)
	q := fdbq.New(db, fdbq.Options{})
	setType(t, q, "email", 1, false)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, q)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(reg))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "jobstage_queue_scrape_errors_total 1") {
		t.Errorf("status %d, body without the scrape error:\n%s", resp.StatusCode, body)
	}
	if strings.Contains(string(body), "jobstage_jobs_pending{") {
		t.Errorf("a failed scrape reported pending jobs")
	}
}

func TestHandlerServesHTTPMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.HTTPObserve("POST /v1/types/{type}/jobs", 201, 3*time.Millisecond)
	srv := httptest.NewServer(m.Handler(nil)) // nil: the registry New was given
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	want := `jobstage_http_requests_total{route="POST /v1/types/{type}/jobs",status="201"} 1`
	if !strings.Contains(string(body), want) {
		t.Errorf("body lacks %s:\n%s", want, body)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := metrics.New(nil, nil); err == nil {
		t.Error("New(nil) made metrics")
	}
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, nil); err != nil {
		t.Fatal(err)
	}
	_, err := metrics.New(reg, nil)
	if !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		t.Errorf("second New on one registry: %v, want AlreadyRegisteredError", err)
	}
}

func TestNilMetricsCountNothing(t *testing.T) {
	var m *metrics.Metrics
	m.Enqueued("email", 1)
	m.Accepted([]*fdbq.Lease{{}})
	m.ExternalOutcome("email", consumer.OutcomeFailed)
	m.OnSweep(fdbq.SweepStats{Recycled: 1, ByType: map[string]fdbq.TypeSweepStats{"email": {Recycled: 1}}})
	m.HTTPObserve("GET /healthz", 200, time.Millisecond)
	m.ObserveStore(nil)
	m.ObservePipeline("p", "email", nil)
	_ = m.Stage()
	h := consumer.Wrap(work, metrics.Middleware(m))
	if r, err := h(context.Background(), &consumer.Job[task]{Type: "email"}); err != nil || r != "ok" {
		t.Fatalf("%q, %v", r, err)
	}
}

func TestMiddlewareOutcomes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	run := func(ctx context.Context, h consumer.Handler[task, string]) {
		_, _ = consumer.Wrap(h, metrics.Middleware(m))(ctx, &consumer.Job[task]{Type: "t", Attempt: 1, Lease: &fdbq.Lease{Job: fdbq.Job{MaxAttempts: 3}}})
	}
	halted, cancelHalt := context.WithCancelCause(context.Background())
	cancelHalt(consumer.ErrHalted)
	stopping, cancelStop := context.WithCancelCause(context.Background())
	cancelStop(consumer.ErrStopping)
	expired, cancelExp := context.WithDeadline(context.Background(), time.Now())
	defer cancelExp()
	run(halted, func(ctx context.Context, _ *consumer.Job[task]) (string, error) { return "done anyway", nil })
	run(stopping, func(ctx context.Context, _ *consumer.Job[task]) (string, error) { return "", ctx.Err() })
	run(expired, func(ctx context.Context, _ *consumer.Job[task]) (string, error) { return "", ctx.Err() })
	run(context.Background(), func(ctx context.Context, _ *consumer.Job[task]) (string, error) { panic("boom") })
	for outcome, want := range map[string]float64{"halted": 1, "stopped": 1, "timeout": 1, "panicked": 1} {
		if v := value(t, reg, "jobstage_jobs_finished_total", "t", outcome); v != want {
			t.Errorf("%s: %v, want %v", outcome, v, want)
		}
	}
	run(context.Background(), func(ctx context.Context, _ *consumer.Job[task]) (string, error) { return "", consumer.Cancel("no") })
	run(context.Background(), func(ctx context.Context, _ *consumer.Job[task]) (string, error) {
		return "", consumer.Snooze(time.Second)
	})
	run(stopping, func(ctx context.Context, _ *consumer.Job[task]) (string, error) {
		return "", consumer.Snooze(time.Second)
	})
	for outcome, want := range map[string]float64{"canceled": 1, "snoozed": 2} {
		if v := value(t, reg, "jobstage_jobs_finished_total", "t", outcome); v != want {
			t.Errorf("%s: %v, want %v", outcome, v, want)
		}
	}
	// Whether the job runs again is not the middleware's to say: it is
	// known once the outcome commits (Ended).
	if _, ok := gathered(t, reg)["jobstage_jobs_retried_total"]; ok {
		t.Error("the middleware counted retries before any outcome committed")
	}
}

func TestExternalOutcome(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.ExternalOutcome("report", consumer.OutcomeSucceeded)
	m.ExternalOutcome("report", "retried")
	m.ExternalOutcome("report", consumer.OutcomeFailed)
	if v := value(t, reg, "jobstage_jobs_finished_total", "report", "succeeded"); v != 1 {
		t.Errorf("succeeded: %v", v)
	}
	if v := value(t, reg, "jobstage_jobs_finished_total", "report", "failed"); v != 2 {
		t.Errorf("failed attempts: %v, want 2 (one retried, one final)", v)
	}
	if v := value(t, reg, "jobstage_jobs_retried_total", "report"); v != 1 {
		t.Errorf("retried: %v, want 1", v)
	}
}

// A retry is counted from what the commit of the failed attempt did, so
// a job's own retry policy, RetryAt and a canceled job count as they
// ran: the job with 3 attempts of its own on a 1-attempt type is retried
// twice; the canceled one, with attempts left, not at all. (The count
// was derived from the type's policy: 0 retries.)
func TestRetriedFollowsWhatCommitted(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	q := fdbq.New(db, fdbq.Options{})
	setType(t, q, "email", 1, false)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, q)
	if err != nil {
		t.Fatal(err)
	}
	h := func(_ context.Context, j *consumer.Job[task]) (string, error) {
		switch {
		case j.ID == "cancel":
			return "", consumer.Cancel("never")
		case j.Attempt == 1:
			return "", consumer.RetryAt(time.Now(), errors.New("later"))
		case j.Attempt == 2:
			return "", errors.New("again")
		}
		return "ok", nil
	}
	c, err := consumer.New(h, consumer.Options{Concurrency: 2}, metrics.Middleware(m))
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.From(producer.New(q, "email", producer.Options{})).To(c).
		WithOptions(pipeline.Options{OnEnded: m.Ended}).Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	own := &fdbq.RetryPolicy{MaxAttempts: 3, Backoff: fdbq.Constant, Base: time.Millisecond}
	if _, err := q.AddBatch(ctx, db, []fdbq.NewJob{
		{Type: "email", ID: "own", Retry: own},
		{Type: "email", ID: "cancel", Retry: own},
	}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	res, err := q.Wait(wctx, "email", []string{"own", "cancel"}, fdbq.Finished)
	if err != nil {
		t.Fatal(err)
	}
	if j := res[0].Job; j.Outcome != fdbq.Succeeded || j.Attempts != 3 {
		t.Fatalf("job with its own policy: %s after %d attempts", j.Outcome, j.Attempts)
	}
	if j := res[1].Job; j.Outcome != fdbq.Canceled || j.Attempts != 1 {
		t.Fatalf("canceled job: %s after %d attempts", j.Outcome, j.Attempts)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if v := value(t, reg, "jobstage_jobs_retried_total", "email"); v != 2 {
		t.Errorf("retried: %v, want 2", v)
	}
	if v := value(t, reg, "jobstage_jobs_finished_total", "email", "canceled"); v != 1 {
		t.Errorf("canceled attempts: %v, want 1", v)
	}
}
