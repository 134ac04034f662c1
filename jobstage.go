// Package jobstage is the short way in: job kinds bound to Go types, one
// call that opens the store, the queue and crash recovery, typed enqueue
// and typed handlers worked by pipelines.
//
// A job's argument type names its kind:
//
//	type Thumbnail struct {
//		Image string `json:"image"`
//	}
//
//	func (Thumbnail) Kind() string { return "thumbnail" }
//
// Open a client (the embedded store in a directory, or FoundationDB from a
// cluster file), register handlers with Work, Start, and Enqueue:
//
//	c, err := jobstage.Open(ctx, jobstage.Config{Dir: "./jobstage-data"})
//	...
//	defer c.Close()
//	jobstage.Work(c, func(ctx context.Context, j *jobstage.Job[Thumbnail]) error {
//		return render(j.Data.Image)
//	}, nil)
//	if err := c.Start(ctx); err != nil { ... }
//	jobstage.Enqueue(ctx, c, Thumbnail{Image: "cat.jpg"}, nil)
//
// Start registers each kind worked (its settings from the kind's
// Defaults, if its type has any; an operator's pause is kept), starts the
// activity monitor, which takes back the jobs of a worker that died and
// removes finished jobs past their retention, and starts one pipeline per
// kind. Close drains the pipelines and closes the store.
//
// Everything below this package stays reachable: Client.Queue is the
// jobs layer (package fdbq), Client.DB the transactional store (package
// kv), and the pipelines are package pipeline's. A job enqueued inside the
// caller's own transaction (EnqueueTx) commits with it or not at all.
//
// A handler's error fails the attempt, retried under the kind's retry
// policy; Cancel, Snooze and RetryAt end it otherwise (package consumer
// has the details). Get and Wait read a job back with its arguments
// decoded, WaitResult with its handler's result too.
//
// Example_transaction enqueues a job in the transaction that saves an
// order and reads its result; ExampleSnooze puts a job off. Package
// jobstagetest tests handlers and enqueues without a pipeline.
package jobstage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/tracing"
)

// Args are a job's arguments, stored as its JSON data. Kind names the
// job type; it must be a constant of the Go type (it is called on the
// zero value), and a valid type name (fdbq.ValidateTypeName).
type Args interface {
	Kind() string
}

// ArgsWithDefaults are Args whose kind carries its defaults.
type ArgsWithDefaults interface {
	Args
	Defaults() Defaults
}

// Defaults are what the jobs of a kind get unless told otherwise. Zero
// fields keep fdbq's defaults.
type Defaults struct {
	// Priority of an enqueued job (EnqueueOptions.Priority overrides it);
	// higher runs first among due jobs.
	Priority int
	// Retry is the kind's retry policy (attempts and backoff); nil:
	// fdbq.DefaultRetryPolicy.
	Retry *fdbq.RetryPolicy
	// ActivityTimeout: a running job whose worker has not heartbeated for
	// this long is taken back and retried (fdbq.TypeSettings).
	ActivityTimeout time.Duration
	// Retention is how long finished jobs are kept; 0: fdbq's default
	// (a day); negative: for ever.
	Retention time.Duration
	// Timeout bounds each attempt of a handler (WorkOptions.Timeout
	// overrides it); 0: none; negative is refused.
	Timeout time.Duration
	// Zones, MaxRunning, Keys and KeyDefault are the kind's fairness
	// settings (fdbq.TypeSettings); zero: fdbq's defaults.
	Zones      int
	MaxRunning int
	Keys       map[string]fdbq.KeyPolicy
	KeyDefault fdbq.KeyPolicy
	// Unique makes every job of the kind unique (fdbq.Unique: by its args
	// or chosen fields of them, in which states, for how long after it
	// finished, and what an enqueue of a duplicate does), unless
	// EnqueueOptions.Unique says otherwise; nil: jobs are not unique.
	Unique *fdbq.Unique
}

// Config configures Open. With neither Dir nor ClusterFile, the store is
// in memory (tests).
type Config struct {
	// Dir is the embedded store's directory (created if missing).
	Dir string
	// ClusterFile is a FoundationDB cluster file: the store is that
	// cluster (a jobstage built with -tags fdb).
	ClusterFile string
	// Logger gets the pipelines' and the monitor's logs; default
	// slog.Default().
	Logger *slog.Logger
	// NoRecovery leaves out the activity monitor: then jobs of a worker
	// that died stay running until a monitor runs somewhere else (another
	// process, `jobstage serve`).
	NoRecovery bool
	// Monitor configures the activity monitor.
	Monitor fdbq.MonitorOptions
	// NoScheduler leaves out the scheduler of periodic jobs: the
	// schedules registered with Periodic are declared at Start, and tick
	// only where a scheduler runs (another client, `jobstage serve`).
	NoScheduler bool
	// Scheduler configures the scheduler of periodic jobs.
	Scheduler fdbq.SchedulerOptions
	// DrainTimeout bounds how long Stop waits for running handlers before
	// it interrupts them (their jobs go back to pending); default 30s.
	DrainTimeout time.Duration
	// Now is the queue's clock; default time.Now.
	Now func() time.Time
	// TracerProvider makes the spans of enqueues, accepts and attempts,
	// and each job carries the trace context it was enqueued in to its
	// handler (package tracing); nil: otel.GetTracerProvider(), which
	// does nothing until the program sets one.
	TracerProvider trace.TracerProvider
}

// Client is an open store, its queue, the kinds registered with Work and
// their pipelines, and the activity monitor (one for the client: its
// pipelines do not run their own, see pipeline.Options.NoRecovery).
type Client struct {
	cfg     Config
	tracer  trace.Tracer
	db      *kv.DB
	q       *fdbq.Queue
	monitor *fdbq.Monitor
	// scheduler runs the ticks of periodic jobs (nil: Config.NoScheduler).
	scheduler *fdbq.Scheduler
	// schedules are those registered with Periodic.
	schedules []clientSchedule
	// unadopt ends the monitor's adoption by the pipelines of the queue
	// (pipeline.AdoptMonitor): one a program builds on Client.Queue joins it.
	unadopt func()

	mu      sync.Mutex
	state   int // 0: not started, 1: started, 2: stopped
	workers []*worker
	known   map[string]bool // kinds this client registered
}

// Open opens the store Config names and the queue over it, and checks
// that the store is in the data layout this version reads
// (fdbq.Queue.CheckLayout).
func Open(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Dir != "" && cfg.ClusterFile != "" {
		return nil, errors.New("jobstage: Config names both Dir and ClusterFile: choose one store")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 30 * time.Second
	}
	var backend kv.Backend
	var err error
	switch {
	case cfg.ClusterFile != "":
		backend, err = openFDB(cfg.ClusterFile)
	case cfg.Dir != "":
		backend, err = embedded.Open(cfg.Dir, embedded.Options{})
	default:
		backend, err = embedded.Open("", embedded.Options{InMemory: true})
	}
	if err != nil {
		return nil, fmt.Errorf("jobstage: open store: %w", err)
	}
	db := kv.NewDB(backend, kv.Options{})
	if cfg.Monitor.Logger == nil {
		cfg.Monitor.Logger = cfg.Logger
	}
	q := fdbq.New(db, fdbq.Options{Logger: cfg.Logger, Now: cfg.Now})
	if err := q.CheckLayout(ctx, db); err != nil {
		return nil, errors.Join(fmt.Errorf("jobstage: open store: %w", err), db.Close())
	}
	return &Client{cfg: cfg, tracer: tracing.Tracer(cfg.TracerProvider), db: db, q: q, known: map[string]bool{}}, nil
}

// Queue is the jobs layer under the client.
func (c *Client) Queue() *fdbq.Queue { return c.q }

// DB is the transactional store under the client: run EnqueueTx in its
// transactions, with writes of your own.
func (c *Client) DB() *kv.DB { return c.db }

// Start registers the kinds worked, starts the activity monitor (unless
// Config.NoRecovery) and the pipelines. It fails if the client was
// started before, or stopped. A Start that fails (the store is down, ctx
// ended) leaves nothing running, and Start may be called again.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case 1:
		return errors.New("jobstage: Client started twice")
	case 2:
		return errors.New("jobstage: Client started after Stop")
	}
	for _, w := range c.workers {
		if err := c.q.DeclareType(ctx, c.db, w.kind, w.settings); err != nil {
			return fmt.Errorf("jobstage: register kind %s: %w", w.kind, err)
		}
		c.known[w.kind] = true
	}
	for _, s := range c.schedules {
		if !c.known[s.kind] {
			// A kind only scheduled here is registered with its defaults,
			// as its first Enqueue would; one that exists keeps its settings.
			if err := c.declareUnknown(ctx, c.db, s.kind, s.defaults); err != nil {
				return fmt.Errorf("jobstage: register kind %s: %w", s.kind, err)
			}
		}
		if err := c.q.DeclareSchedule(ctx, c.db, s.s); err != nil {
			return fmt.Errorf("jobstage: declare schedule %s: %w", s.s.Name, err)
		}
	}
	// Pipelines and monitors run once: each Start makes its own, so one
	// that failed can be tried again.
	for _, w := range c.workers {
		p, err := w.build()
		if err != nil {
			return fmt.Errorf("jobstage: kind %s: %w", w.kind, err)
		}
		w.p = p
	}
	c.monitor = nil
	if !c.cfg.NoRecovery {
		m := fdbq.NewMonitor(c.q, c.cfg.Monitor)
		if err := m.Start(ctx); err != nil {
			return fmt.Errorf("jobstage: start the activity monitor: %w", err)
		}
		c.monitor, c.unadopt = m, pipeline.AdoptMonitor(c.q, m)
	}
	c.scheduler = nil
	if !c.cfg.NoScheduler {
		o := c.cfg.Scheduler
		if o.Logger == nil {
			o.Logger = c.cfg.Logger
		}
		c.scheduler = fdbq.NewScheduler(c.q, o)
		if err := c.scheduler.Start(ctx); err != nil {
			if c.monitor != nil {
				c.unadopt()
				_ = c.monitor.Stop(context.WithoutCancel(ctx))
			}
			return fmt.Errorf("jobstage: start the scheduler: %w", err)
		}
	}
	started := []*pipeline.Pipeline{}
	for _, w := range c.workers {
		if err := w.p.Start(ctx); err != nil {
			// What started is stopped as Stop would, even when ctx has
			// ended (a deadline that cut the start short, often the very
			// reason it failed): a stop given an ended context returns at
			// once and goes on in the background, and a failed Start must
			// leave nothing running.
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.DrainTimeout+5*time.Second)
			defer cancel()
			for _, p := range started {
				_ = p.Stop(stopCtx)
			}
			if c.monitor != nil {
				c.unadopt()
				_ = c.monitor.Stop(stopCtx)
			}
			if c.scheduler != nil {
				_ = c.scheduler.Stop(stopCtx)
			}
			return fmt.Errorf("jobstage: start the pipeline of %s: %w", w.kind, err)
		}
		started = append(started, w.p)
	}
	c.state = 1
	return nil
}

// Stop drains the pipelines (jobs accepted and not started go back to
// pending at once; running handlers get Config.DrainTimeout) and stops
// the monitor. ctx bounds it all. Stop before Start, or again, does
// nothing.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != 1 {
		c.state = 2
		return nil
	}
	c.state = 2
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, w := range c.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.p.Stop(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("jobstage: stop the pipeline of %s: %w", w.kind, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if c.scheduler != nil {
		if err := c.scheduler.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if c.monitor != nil {
		c.unadopt()
		if err := c.monitor.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close stops the client (bounded by the drain timeout and a few seconds
// more) and closes the store.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.DrainTimeout+5*time.Second)
	defer cancel()
	err := c.Stop(ctx)
	return errors.Join(err, c.db.Close())
}

// kindOf returns the kind of T and its defaults, or why T cannot be a
// kind: a Kind that is not a valid type name, that panics on the zero
// value (a pointer type whose Kind reads its fields), or that does not
// say the same twice; a Defaults that panics.
func kindOf[T Args]() (kind string, d Defaults, err error) {
	var zero T
	defer func() {
		if p := recover(); p != nil {
			kind, d, err = "", Defaults{}, fmt.Errorf("jobstage: the Kind or Defaults of %T panicked on the zero value: %v", zero, p)
		}
	}()
	kind = zero.Kind()
	if err := fdbq.ValidateTypeName(kind); err != nil {
		return "", Defaults{}, fmt.Errorf("jobstage: the Kind of %T: %w", zero, err)
	}
	if again := zero.Kind(); again != kind {
		return "", Defaults{}, fmt.Errorf("jobstage: the Kind of %T said %q, then %q: it must be a constant of the type", zero, kind, again)
	}
	if w, ok := any(zero).(ArgsWithDefaults); ok {
		d = w.Defaults()
	}
	return kind, d, nil
}

// KindOf returns the kind T names, or why T cannot be a kind: its Kind
// panics on the zero value, is not a valid type name, or is not constant.
func KindOf[T Args]() (string, error) {
	kind, _, err := kindOf[T]()
	return kind, err
}

// settings are the type settings a kind's defaults give.
func (d Defaults) settings() (fdbq.TypeSettings, error) {
	s := fdbq.DefaultTypeSettings()
	if d.Timeout < 0 {
		// Not "none", which is 0: a sign that went wrong.
		return s, fmt.Errorf("%w: negative timeout %v", fdbq.ErrInvalidJob, d.Timeout)
	}
	if d.Retry != nil {
		s.Retry = *d.Retry
	}
	if d.ActivityTimeout != 0 {
		s.ActivityTimeout = d.ActivityTimeout
	}
	switch {
	case d.Retention < 0:
		s.Retention = 0
	case d.Retention > 0:
		s.Retention = d.Retention
	}
	s.Zones, s.MaxRunning, s.Keys, s.KeyDefault = d.Zones, d.MaxRunning, d.Keys, d.KeyDefault
	return s, s.Validate()
}
