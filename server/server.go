// Package server assembles a jobstage server from a config: the store,
// the jobs layer with the configured types, the activity monitor, one
// pipeline per configured pipeline with its handler (built-in, or a Go
// handler the embedding application registered), the HTTP API and the
// metrics — as fx modules, those of package fxjobstage that an
// application that embeds jobstage composes. `jobstage serve` is this
// package run from a file.
//
// A Server starts and stops like every long-running part of jobstage: it
// runs once, Stop is safe before Start (and keeps it from starting),
// twice and from several goroutines, and a second Start fails.
package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/dig"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/jobstage/jobstage/config"
	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/fxjobstage"
	"github.com/jobstage/jobstage/handlers"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/internal/lifecycle"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/metrics"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
	"github.com/jobstage/jobstage/webui"
)

// Server is a configured jobstage server.
type Server struct {
	app   *fx.App
	life  lifecycle.Lifecycle
	addr  atomic.Value // string: the HTTP listener's address once started
	ready atomic.Bool
	q     *fdbq.Queue
	db    *kv.DB
	log   *slog.Logger
	// pipelines are the configured pipelines, as fx built them in New.
	pipelines []*pipeline.Pipeline
	// startFailed: a Start failed, and fx undid what it had started,
	// closing the store; the server cannot start again.
	startFailed bool
}

// Options configure a Server beyond its config.
type Options struct {
	// Logger is the server's logger; nil: one made by NewLogger from the
	// config's logging section, writing to standard error.
	Logger *slog.Logger
	// Handlers are the Go handlers the config's pipelines may name
	// (`handler: {go: NAME}`). Adapt a typed handler with consumer.Raw:
	//
	//	Handlers: map[string]consumer.Handler[json.RawMessage, json.RawMessage]{
	//		"resize": consumer.Raw(resize),
	//	}
	Handlers map[string]consumer.Handler[json.RawMessage, json.RawMessage]
	// TracerProvider makes the spans of enqueues, accepts and attempts
	// (package tracing) when the config has no tracing section; nil:
	// otel.GetTracerProvider(). With a tracing section the server makes
	// its own, exporting over OTLP.
	TracerProvider trace.TracerProvider
}

// New assembles a server from cfg, which must have passed config.Load (or
// config.Parse). Nothing runs until Start.
func New(cfg *config.Config, o Options) (*Server, error) {
	log := o.Logger
	if log == nil {
		log = NewLogger(cfg.Logging, os.Stderr)
	}
	if err := httpapi.CheckListen(cfg.HTTP.Listen, len(cfg.HTTP.Tokens)); err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Pipelines)) {
		if g := cfg.Pipelines[name].Handler.Go; g != "" && o.Handlers[g] == nil {
			return nil, fmt.Errorf("pipeline %s: no Go handler registered as %q (server.Options.Handlers)", name, g)
		}
	}
	s := &Server{log: log, life: lifecycle.Lifecycle{Name: "server.Server"}}
	s.addr.Store("")
	opts := []fx.Option{
		fx.WithLogger(func() fxevent.Logger { return &fxLogger{log: log} }),
		fx.Supply(cfg, log),
		fx.Provide(func(lc fx.Lifecycle) (trace.TracerProvider, error) {
			return newTracerProvider(lc, cfg, o.TracerProvider)
		}),
		storeModule(cfg.Store),
		fx.Supply(fdbq.Options{Prefix: cfg.Store.KeyPrefix(), EventRetention: cfg.Store.EventRetention,
			HistoryRetention: cfg.Store.HistoryRetention}),
		fxjobstage.QueueModule,
		fx.Provide(newMetrics),
		fx.Provide(func(m *metrics.Metrics) fdbq.MonitorOptions {
			return fdbq.MonitorOptions{Logger: log, OnSweep: m.OnSweep}
		}),
		fxjobstage.MonitorModule,
		fx.Provide(func(m *metrics.Metrics) fdbq.SchedulerOptions {
			return fdbq.SchedulerOptions{Logger: log, OnTick: m.OnTick}
		}),
		fxjobstage.SchedulerModule,
		fxjobstage.PipelinesModule,
		fx.Invoke(warnBadTypeNames),
		fx.Invoke(s.serveHTTP),
		fx.Populate(&s.q, &s.db),
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Types)) {
		opts = append(opts, fxjobstage.DeclareType(name, cfg.Types[name].Settings()))
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Schedules)) {
		sc, err := cfg.Schedules[name].Schedule(name)
		if err != nil {
			return nil, fmt.Errorf("schedule %s: %w", name, err)
		}
		opts = append(opts, fxjobstage.DeclareSchedule(sc))
	}
	opts = append(opts, fx.Invoke(func(lc fx.Lifecycle, q *fdbq.Queue, db *kv.DB) {
		lc.Append(fx.StartHook(func(ctx context.Context) { warnStraySchedules(ctx, q, db, cfg, log) }))
	}))
	for _, name := range slices.Sorted(maps.Keys(cfg.Pipelines)) {
		build := pipelineConstructor(name, cfg.Pipelines[name], cfg.Shutdown.DrainTimeout, secretEnv(cfg), o.Handlers, log)
		opts = append(opts, fxjobstage.ProvidePipeline(func(q *fdbq.Queue, m *metrics.Metrics, tp trace.TracerProvider) (*pipeline.Pipeline, error) {
			p, err := build(q, m, tp)
			if err == nil {
				s.pipelines = append(s.pipelines, p)
			}
			return p, err
		}))
	}
	s.app = fx.New(opts...)
	if err := s.app.Err(); err != nil {
		return nil, rootCause(err)
	}
	return s, nil
}

// warnStraySchedules logs the schedules the store holds that the config
// does not declare: they keep running (another server's config may
// declare them) until deleted.
func warnStraySchedules(ctx context.Context, q *fdbq.Queue, db *kv.DB, cfg *config.Config, log *slog.Logger) {
	list, err := q.Schedules(ctx, db)
	if err != nil {
		log.Warn("reading the stored schedules failed", "err", err)
		return
	}
	for _, s := range list {
		if _, ok := cfg.Schedules[s.Name]; ok {
			continue
		}
		if s.Err != nil {
			log.Warn("a stored schedule cannot be read; it does not tick (declare it again, or delete it)", "schedule", s.Name, "err", s.Err,
				"delete", "jobstage schedules delete "+s.Name)
			continue
		}
		log.Info("a schedule in the store is not in the config; it keeps ticking until deleted", "schedule", s.Name,
			"delete", "jobstage schedules delete "+s.Name)
	}
}

// NewLogger returns the logger a config's logging section describes,
// writing to w.
func NewLogger(lc config.Logging, w io.Writer) *slog.Logger {
	var level slog.Level
	switch lc.Level {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	o := &slog.HandlerOptions{Level: level}
	if lc.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// Start registers the types, starts the monitor and the pipelines, and
// then the HTTP listener (New opened the store). A server runs once:
// Start fails if it was started or stopped before, or if a Start failed
// (which undid what it had started).
func (s *Server) Start(ctx context.Context) error {
	return s.life.Start(ctx, func(ctx context.Context) error {
		if s.startFailed {
			return errors.New("server.Server: a failed start is final; make a new server")
		}
		if err := s.app.Start(ctx); err != nil {
			s.startFailed = true
			return rootCause(err)
		}
		s.ready.Store(true)
		return nil
	})
}

// Stop stops the HTTP listener, drains the pipelines (jobs accepted but
// not started go back to pending at once; running handlers get their
// drain timeout), stops the monitor and closes the store. It returns when
// all that is done or when ctx ends; the pipelines' drain is then cut
// short. It is safe before Start (it closes the store New opened, and
// Start then fails), twice, and from several goroutines.
func (s *Server) Stop(ctx context.Context) error {
	return s.life.Stop(ctx, func(hurry context.Context, started bool) error {
		if !started {
			return s.db.Close()
		}
		s.ready.Store(false)
		// fx skips the stop hooks left once its ctx ends, which would
		// leave the store open: it gets a ctx that does not end, and a
		// Stop that gives up hurries the pipelines' drain itself.
		stopHurry := context.AfterFunc(hurry, s.hurryPipelines)
		defer stopHurry()
		return s.app.Stop(context.WithoutCancel(hurry))
	})
}

// hurryPipelines cuts the pipelines' drain short: their handlers'
// contexts are cancelled, and their jobs go back to pending as they
// return.
func (s *Server) hurryPipelines() {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, p := range s.pipelines {
		_ = p.Stop(ended) // ctx's error: the drain goes on, hurried
	}
}

// Addr is the HTTP listener's address once started.
func (s *Server) Addr() string { return s.addr.Load().(string) }

// Queue is the server's jobs layer once started.
func (s *Server) Queue() *fdbq.Queue { return s.q }

type metricsOut struct {
	fx.Out
	Metrics  *metrics.Metrics
	Gatherer prometheus.Gatherer
}

func newMetrics(q *fdbq.Queue, db *kv.DB) (metricsOut, error) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, q)
	if err != nil {
		return metricsOut{}, err
	}
	m.ObserveStore(db)
	return metricsOut{Metrics: m, Gatherer: reg}, nil
}

// pipelineConstructor returns the fx constructor of a configured
// pipeline: a producer for its type, the metrics stage, and a consumer
// running its built-in handler.
func pipelineConstructor(name string, pc config.Pipeline, drain time.Duration, withhold []string, goHandlers map[string]consumer.Handler[json.RawMessage, json.RawMessage], log *slog.Logger) func(*fdbq.Queue, *metrics.Metrics, trace.TracerProvider) (*pipeline.Pipeline, error) {
	return func(q *fdbq.Queue, m *metrics.Metrics, tp trace.TracerProvider) (*pipeline.Pipeline, error) {
		h, err := handler(pc.Handler, withhold, goHandlers)
		if err != nil {
			return nil, fmt.Errorf("pipeline %s: %w", name, err)
		}
		c, err := consumer.New(h, consumer.Options{
			Name: name, Concurrency: pc.Concurrency, MaxDemand: pc.MaxDemand, MinDemand: pc.MinDemand, JobTimeout: pc.Timeout,
			TracerProvider: tp,
		},
			metrics.Middleware(m),
			consumer.Logging(log.With("pipeline", name)),
			consumer.Recover(),
		)
		if err != nil {
			return nil, fmt.Errorf("pipeline %s: %w", name, err)
		}
		p, err := pipeline.From(producer.New(q, pc.Type, producer.Options{BatchLimit: pc.BatchLimit, Acceptors: pc.Acceptors, Logger: log, TracerProvider: tp})).
			Via(m.Stage()).
			To(c).
			// The server runs the monitor (fxjobstage.MonitorModule).
			WithOptions(pipeline.Options{BatchFinish: true, Logger: log.With("pipeline", name), DrainTimeout: drain, OnEnded: m.Ended, NoRecovery: true, Express: express(pc.Express)}).
			Build()
		if err != nil {
			return nil, fmt.Errorf("pipeline %s: %w", name, err)
		}
		m.ObservePipeline(name, pc.Type, p)
		return p, nil
	}
}

// secretEnv names the environment variables that hold the config's
// secrets: no command is given them.
func secretEnv(cfg *config.Config) []string {
	var names []string
	for _, t := range cfg.HTTP.Tokens {
		if t.ValueEnv != "" {
			names = append(names, t.ValueEnv)
		}
	}
	return names
}

func handler(h config.Handler, withhold []string, goHandlers map[string]consumer.Handler[json.RawMessage, json.RawMessage]) (consumer.Handler[json.RawMessage, json.RawMessage], error) {
	switch {
	case h.Go != "":
		return goHandlers[h.Go], nil
	case h.Exec != nil:
		return handlers.Exec(handlers.ExecOptions{Command: h.Exec.Command, Dir: h.Exec.Dir, Env: h.Exec.Env, PassEnv: h.Exec.PassEnv, Withhold: withhold, MaxOutput: h.Exec.MaxOutput})
	case h.HTTP != nil:
		return handlers.HTTP(handlers.HTTPOptions{URL: h.HTTP.URL, Headers: h.HTTP.Headers, Timeout: h.HTTP.Timeout})
	}
	return nil, errors.New("no handler configured")
}

type httpParams struct {
	fx.In
	LC       fx.Lifecycle
	Config   *config.Config
	Queue    *fdbq.Queue
	Metrics  *metrics.Metrics
	Gatherer prometheus.Gatherer
	Log      *slog.Logger
	Tracer   trace.TracerProvider
}

// serveHTTP starts the HTTP API last and stops it first.
func (s *Server) serveHTTP(p httpParams) error {
	hc := p.Config.HTTP
	api, err := s.newAPI(p)
	if err != nil {
		return err
	}
	// Long polls (accept, wait) hold requests for up to a minute; stop
	// cancels them through the base context once the quick requests have
	// had their grace period.
	baseCtx, cancelBase := context.WithCancel(context.Background())
	// The read timeouts bound what a client takes to send a request; the
	// API bounds each request's handling and answer (request_timeout, the
	// long polls' wait more) with the connection's deadlines, so the
	// server has no write timeout of its own, which would cut long polls.
	srv := &http.Server{
		Handler:           api,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		ReadHeaderTimeout: hc.ReadHeaderTimeout,
		ReadTimeout:       hc.ReadTimeout,
		IdleTimeout:       hc.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(p.Log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	p.LC.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			ln, err := listenHTTP(hc)
			if err != nil {
				return err
			}
			s.addr.Store(ln.Addr().String())
			scheme := "http"
			if hc.TLS.CertFile != "" {
				scheme = "https"
			}
			p.Log.Info("listening", "url", scheme+"://"+ln.Addr().String())
			go func() {
				defer close(done)
				if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					p.Log.Error("http server", "err", err)
				}
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			api.Stopping()
			defer cancelBase()
			stopHTTP(ctx, srv, cancelBase, p.Log)
			<-done
			return nil
		},
	})
	return nil
}

// newAPI makes the HTTP API's handler from the configuration: its tokens,
// the metrics endpoint unless metrics.path is "", and readiness from
// s.ready, so that the API answers not_ready before the server started
// and once it is stopping.
func (s *Server) newAPI(p httpParams) (*httpapi.Server, error) {
	hc := p.Config.HTTP
	tokens := make([]httpapi.Token, 0, len(hc.Tokens))
	for _, t := range hc.Tokens {
		tokens = append(tokens, httpapi.Token{Name: t.Name, Role: t.Role, Secret: t.Value})
	}
	var metricsHandler http.Handler // none: the endpoint is off (metrics.path: "")
	if p.Config.Metrics.Path != "" {
		metricsHandler = p.Metrics.Handler(p.Gatherer)
	}
	var hosts []string // without tokens, besides the loopback names
	if h, _, err := net.SplitHostPort(hc.Listen); err == nil && h != "" {
		hosts = []string{h}
	}
	return httpapi.New(p.Queue, httpapi.Options{
		Tokens:         tokens,
		Hosts:          hosts,
		MaxBodyBytes:   hc.MaxBodyBytes,
		RequestTimeout: hc.RequestTimeout,
		Logger:         p.Log,
		Ready: func() error {
			if !s.ready.Load() {
				return errors.New("not started, or stopping")
			}
			return nil
		},
		Metrics:     metricsHandler,
		MetricsPath: p.Config.Metrics.Path,
		MaxStreams:  hc.MaxEventStreams,
		SessionTTL:  hc.SessionTTL,
		Observe:     p.Metrics.HTTPObserve,
		OnEnqueue:   p.Metrics.Enqueued,
		OnAccept:    p.Metrics.Accepted,
		OnOutcome:   p.Metrics.ExternalOutcome,
		UI:          webui.Handler(),

		TracerProvider: p.Tracer,
	})
}

// listenHTTP listens on hc.Listen for the HTTP API, with at most
// hc.MaxConnections connections open at once and TLS when a certificate
// is configured. A certificate that cannot be loaded closes the listener
// and fails the start.
func listenHTTP(hc config.HTTP) (net.Listener, error) {
	ln, err := net.Listen("tcp", hc.Listen)
	if err != nil {
		return nil, err
	}
	ln = httpapi.LimitListener(ln, hc.MaxConnections)
	if hc.TLS.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(hc.TLS.CertFile, hc.TLS.KeyFile)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("http tls: %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	return ln, nil
}

// Grace periods of a stopping HTTP server.
const (
	// shutdownGrace is how long requests get to finish before the ones
	// still running (long polls) are cancelled.
	shutdownGrace = 2 * time.Second
	// cancelGrace is how long cancelled requests get to answer (503
	// not_ready) before the connections still open are closed.
	cancelGrace = time.Second
)

// stopHTTP stops srv in steps that no client can hold open: idle
// connections close at once and requests in flight get shutdownGrace;
// then the long polls are cancelled (cancel) and get cancelGrace to
// answer; then every connection still open is closed, those of clients
// that send a request slowly or read no answer among them. ctx ending cuts
// the steps short.
func stopHTTP(ctx context.Context, srv *http.Server, cancel context.CancelFunc, log *slog.Logger) {
	grace, cancelGraceCtx := context.WithTimeout(ctx, shutdownGrace)
	err := srv.Shutdown(grace)
	cancelGraceCtx()
	if err == nil {
		return
	}
	cancel()
	grace, cancelGraceCtx = context.WithTimeout(ctx, cancelGrace)
	err = srv.Shutdown(grace)
	cancelGraceCtx()
	if err == nil {
		return
	}
	log.Warn("http: closing the connections still open after the shutdown grace period", "grace", shutdownGrace+cancelGrace)
	_ = srv.Close()
}

// fxLogger keeps fx's events at debug level: the failures among them come
// back as errors from New, Start and Stop, which say them once.
type fxLogger struct{ log *slog.Logger }

func (l *fxLogger) LogEvent(e fxevent.Event) {
	switch e := e.(type) {
	case *fxevent.OnStartExecuted:
		l.log.Debug("fx: start hook", "hook", e.FunctionName, "took", e.Runtime, "err", e.Err)
	case *fxevent.OnStopExecuted:
		l.log.Debug("fx: stop hook", "hook", e.FunctionName, "took", e.Runtime, "err", e.Err)
	}
}

// rootCause strips fx's and dig's account of the dependency graph from an
// error of New or Start, leaving what went wrong.
func rootCause(err error) error {
	if err == nil {
		return nil
	}
	return dig.RootCause(err)
}

// express is pipeline.Options.Express for a pipeline's express setting,
// where 0 turns it off.
func express(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
