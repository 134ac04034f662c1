package metrics

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
)

// ScrapeTimeout bounds the store read of one scrape.
const ScrapeTimeout = 5 * time.Second

// Outcomes of jobstage_jobs_recycled_total.
const (
	RecycledRetried = "retried"
	RecycledFailed  = "failed"
)

// Metrics holds jobstage's metrics. A nil *Metrics is valid and counts
// nothing.
type Metrics struct {
	reg prometheus.Registerer
	q   *fdbq.Queue

	enqueued   *prometheus.CounterVec
	accepted   *prometheus.CounterVec
	queueWait  *prometheus.HistogramVec
	finished   *prometheus.CounterVec
	runtime    *prometheus.HistogramVec
	running    *prometheus.GaugeVec
	retried    *prometheus.CounterVec
	recycled   *prometheus.CounterVec
	expired    *prometheus.CounterVec
	skipped    *prometheus.CounterVec
	httpReqs   *prometheus.CounterVec
	httpTime   *prometheus.HistogramVec
	scrapeErrs prometheus.Counter
	ticks      *prometheus.CounterVec
	tickLag    *prometheus.HistogramVec

	store     *storeCollector
	pipelines *pipelineCollector
}

// New makes jobstage's metrics and registers them with reg, together with
// the Go runtime's and the process's collectors (left alone when reg has
// them already, as prometheus.DefaultRegisterer does). q, if not nil, is
// read at scrape time for the pending and running counts and the oldest
// pending job's age of every registered type.
func New(reg prometheus.Registerer, q *fdbq.Queue) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: no registerer")
	}
	m := &Metrics{
		reg: reg,
		q:   q,
		enqueued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobstage_jobs_enqueued_total", Help: "Jobs added, by type.",
		}, []string{"type"}),
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobstage_jobs_accepted_total", Help: "Jobs accepted by a worker, by type.",
		}, []string{"type"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "jobstage_job_queue_wait_seconds",
			Help:    "Time from a job's scheduled time to its acceptance, by type.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 13), // 1 ms to 4.7 h
		}, []string{"type"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobstage_jobs_finished_total", Help: "Handler attempts ended, by type and outcome.",
		}, []string{"type", "outcome"}),
		runtime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "jobstage_job_run_duration_seconds",
			Help:    "Time a handler attempt ran, by type and outcome.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12), // 1 ms to 70 min
		}, []string{"type", "outcome"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jobstage_handlers_running", Help: "Handlers running in this process, by type.",
		}, []string{"type"}),
		retried: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobstage_jobs_retried_total", Help: "Failed attempts whose job will run again, by type.",
		}, []string{"type"}),
		recycled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobstage_jobs_recycled_total", Help: "Running jobs the activity monitor took back after their worker stopped heartbeating, by type and outcome (retried, failed).",
		}, []string{"type", "outcome"}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobstage_jobs_expired_total", Help: "Finished jobs removed after their type's retention, by type.",
		}, []string{"type"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobstage_jobs_sweep_skipped_total",
			Help: "Due jobs an activity monitor's sweep could not change (a record or index entry that cannot be read, a record that cannot be stored) and left as they are, by type; counted at every sweep while they last.",
		}, []string{"type"}),
		httpReqs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobstage_http_requests_total", Help: "HTTP API requests, by route pattern and status code.",
		}, []string{"route", "status"}),
		httpTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "jobstage_http_request_duration_seconds",
			Help:    "HTTP API request duration, by route pattern.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
		scrapeErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jobstage_queue_scrape_errors_total", Help: "Scrapes whose read of the job store failed or timed out.",
		}),
		ticks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobstage_schedule_ticks_total",
			Help: "Ticks of periodic schedules this process handled, by schedule and outcome (enqueued: the tick added its job; skipped: a missed tick its policy gave no job).",
		}, []string{"schedule", "outcome"}),
		tickLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "jobstage_schedule_lag_seconds",
			Help:    "Time from a schedule's tick to the commit that added its job, by schedule (the newest tick of each tick transaction).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12), // 1 ms to 70 min
		}, []string{"schedule"}),
		store:     newStoreCollector(),
		pipelines: newPipelineCollector(),
	}
	if err := m.registerCollectors(); err != nil {
		return nil, err
	}
	return m, nil
}

// registerCollectors registers m's collectors with m.reg, the queue's
// only when m reads a queue, and then the Go runtime's and the process's,
// unless m.reg has them already.
func (m *Metrics) registerCollectors() error {
	cs := []prometheus.Collector{
		m.enqueued, m.accepted, m.queueWait, m.finished, m.runtime, m.running, m.retried,
		m.recycled, m.expired, m.skipped, m.httpReqs, m.httpTime, m.pipelines, m.ticks, m.tickLag,
	}
	if m.q != nil {
		// The queue collector reports its own scrape errors, after the
		// read they count, so that a scrape shows the failure it had. It
		// runs after the store's counters are read, so that a scrape's
		// own read of the store is counted by the next scrape, never
		// sometimes by itself.
		cs = append(cs, inOrder{m.store, &queueCollector{m: m}})
	} else {
		cs = append(cs, m.store)
	}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := m.reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// inOrder collects its collectors one after the other (a registry runs
// collectors at once).
type inOrder []prometheus.Collector

func (o inOrder) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range o {
		c.Describe(ch)
	}
}

func (o inOrder) Collect(ch chan<- prometheus.Metric) {
	for _, c := range o {
		c.Collect(ch)
	}
}

// Handler serves the metrics g gathers (the registry New registered with,
// usually) in Prometheus' exposition format. A collector that fails is
// left out of the answer, not the whole scrape.
func (m *Metrics) Handler(g prometheus.Gatherer) http.Handler {
	if g == nil {
		if rg, ok := m.registerer().(prometheus.Gatherer); ok {
			g = rg
		} else {
			g = prometheus.DefaultGatherer
		}
	}
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

func (m *Metrics) registerer() prometheus.Registerer {
	if m == nil {
		return nil
	}
	return m.reg
}

// Enqueued counts n jobs of a type added.
func (m *Metrics) Enqueued(typ string, n int) {
	if m == nil || n <= 0 {
		return
	}
	counter(m.enqueued, typ).Add(float64(n))
}

// Accepted counts jobs accepted by a worker outside a pipeline (the HTTP
// API's external workers), and observes their queue wait. Pipelines count
// theirs with Stage.
func (m *Metrics) Accepted(leases []*fdbq.Lease) {
	if m == nil {
		return
	}
	now := time.Now()
	for _, l := range leases {
		m.accept(l, now)
	}
}

func (m *Metrics) accept(l *fdbq.Lease, now time.Time) {
	counter(m.accepted, l.Type).Inc()
	at := l.StartedAt
	if at.IsZero() {
		at = now
	}
	observer(m.queueWait, l.Type).Observe(max(at.Sub(l.ScheduledAt).Seconds(), 0))
}

// ExternalOutcome counts what an external worker's finish or fail did
// (httpapi.Options.OnOutcome): "succeeded", "failed" (the job finished
// failed) or "retried" (a failed attempt whose job will run again, counted
// as a failed attempt and a retry). The HTTP API reports each attempt's
// end once: a finish or fail an external worker sends again is not counted.
func (m *Metrics) ExternalOutcome(typ, outcome string) {
	if m == nil {
		return
	}
	if outcome == RecycledRetried {
		counter(m.finished, typ, consumer.OutcomeFailed).Inc()
		counter(m.retried, typ).Inc()
		return
	}
	counter(m.finished, typ, outcome).Inc()
}

// OnSweep counts what an activity monitor's sweep did; pass it as
// fdbq.MonitorOptions.OnSweep.
func (m *Metrics) OnSweep(s fdbq.SweepStats) {
	if m == nil {
		return
	}
	// Every type swept gets its series, zero or not, so that rates and
	// dashboards show a flat line rather than no data.
	for typ, t := range s.ByType {
		counter(m.recycled, typ, RecycledRetried).Add(float64(max(t.Recycled-t.Failed, 0)))
		counter(m.recycled, typ, RecycledFailed).Add(float64(max(t.Failed, 0)))
		counter(m.expired, typ).Add(float64(max(t.Expired, 0)))
		counter(m.skipped, typ).Add(float64(max(t.Skipped, 0)))
	}
}

// Outcomes of jobstage_schedule_ticks_total.
const (
	TickEnqueued = "enqueued"
	TickSkipped  = "skipped"
)

// OnTick counts what a scheduler's tick transaction did; pass it as
// fdbq.SchedulerOptions.OnTick.
func (m *Metrics) OnTick(t *fdbq.Tick, lag time.Duration) {
	if m == nil || t == nil {
		return
	}
	counter(m.ticks, t.Schedule, TickEnqueued).Add(float64(len(t.Jobs)))
	counter(m.ticks, t.Schedule, TickSkipped).Add(float64(max(t.Skipped, 0)))
	if len(t.Jobs) > 0 {
		observer(m.tickLag, t.Schedule).Observe(max(lag, 0).Seconds())
	}
}

// HTTPObserve counts an HTTP API request. route is the route's pattern
// ("POST /v1/types/{type}/jobs"), never the request's path, which would
// make a series per job.
func (m *Metrics) HTTPObserve(route string, status int, d time.Duration) {
	if m == nil {
		return
	}
	counter(m.httpReqs, route, strconv.Itoa(status)).Inc()
	observer(m.httpTime, route).Observe(d.Seconds())
}
