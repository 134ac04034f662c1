// Package producer is jobstage's FDB producer stage: it accepts a job
// type's due jobs from the store on demand. A pipeline asks it for n jobs
// when its consumers hold demand for n; the producer accepts
// min(n, BatchLimit) in one transaction, or, with nothing due, waits on
// the type's watch key and a timer for the next scheduled job. Without
// demand nobody asks, so an idle pipeline makes no store transactions.
//
// A Producer runs nothing of its own, so it has no Start or Stop: Pull
// accepts under the caller's context, and the pipeline (or
// pipeline/gostreams Source) that pulls is the long-running part. Store
// errors are retried after a jittered backoff and never lose jobs (an
// accept either returned its jobs or took none); an unknown type is not
// retried (fdbq.ErrUnknownType). Release hands accepted jobs that were not
// started back to pending, the attempt not counted.
//
// The Example accepts the due jobs of a type; ExampleProducer_Pull waits
// for a job added later; ExampleProducer_Release gives jobs back.
package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/tracing"
)

// Defaults of Options.
const (
	DefaultBatchLimit = 100
	// MaxBatchLimit is the largest BatchLimit: an accept looks at no more
	// than this many due jobs.
	MaxBatchLimit = fdbq.MaxWindow
	// MaxAcceptors is the most Acceptors: each is a goroutine with an
	// accept in flight, sharing the demand with the others.
	MaxAcceptors       = 64
	DefaultAcceptors   = 4
	DefaultMinBackoff  = 10 * time.Millisecond
	DefaultMaxBackoff  = 5 * time.Second
	DefaultWindowRatio = 4
)

// Options configure a Producer.
type Options struct {
	// BatchLimit bounds the jobs accepted in one transaction; default
	// DefaultBatchLimit, at most MaxBatchLimit.
	BatchLimit int
	// Acceptors is how many accepts a pipeline keeps in flight for this
	// producer at once, each for its own share of the demand; default
	// DefaultAcceptors, at most MaxAcceptors. Under partition dispatch it
	// is 1, so that jobs are accepted in order.
	Acceptors int
	// Window is passed to fdbq.AcceptOptions.Window; 0 lets fdbq choose.
	// 1 accepts in strict order (fdbq widens the window to the batch and
	// picks no job at random); a pipeline that keeps per-key order sets
	// it.
	Window int
	// MinBackoff and MaxBackoff bound the jittered, doubling wait after a
	// store error before the producer tries again.
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
	// OnError, if set, sees every store error the producer backs off from.
	OnError func(error)
	// TracerProvider makes a span of each accept that returns jobs
	// (jobstage.accept, linked to each job's trace context; see package
	// tracing); nil: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Holder names the producer in the jobs it accepts while they run
	// (fdbq.AcceptOptions.Holder, shown by jobstage get and the web UI);
	// default DefaultHolder(). One that fdbq.ValidateHolder refuses is
	// logged and replaced by the default.
	Holder string
}

// DefaultHolder names this process: its host name and pid, "host/pid"
// (the host "unknown-host" when its name is no holder or too long).
func DefaultHolder() string {
	host, err := os.Hostname()
	if err != nil || fdbq.ValidateHolder(host) != nil || len(host) > fdbq.MaxHolderSize-21 {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// Producer accepts jobs of one type. It runs nothing of its own: it
// accepts when Pull is called, under the caller's context. So it has no
// Start or Stop; the pipeline (or go-streams Source) that pulls from it is
// the long-running part, and stopping that ends its Pulls.
type Producer struct {
	q    *fdbq.Queue
	typ  string
	opts Options
	// waiter is held by the one Pull that waits on the store for jobs to
	// become due; concurrent Pulls that find nothing wait for it here, so
	// that an idle producer keeps one watch, not one per accept loop, and
	// an added job wakes one accept, not all of them.
	waiter chan struct{}
	// group keeps the accept loops from picking the same jobs.
	group  *fdbq.AcceptGroup
	tracer trace.Tracer
	// backlog is whether the last Pull that returned jobs returned as
	// many as it was asked for, at once.
	backlog struct {
		sync.Mutex
		full    bool
		changed chan struct{} // closed when full changes; nil: none made
	}
}

// New returns a producer of jobs of type typ.
func New(q *fdbq.Queue, typ string, o Options) *Producer {
	if o.BatchLimit <= 0 {
		o.BatchLimit = DefaultBatchLimit
	}
	o.BatchLimit = min(o.BatchLimit, MaxBatchLimit)
	if o.Acceptors <= 0 {
		o.Acceptors = DefaultAcceptors
	}
	o.Acceptors = min(o.Acceptors, MaxAcceptors)
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := fdbq.ValidateHolder(o.Holder); err != nil {
		o.Logger.Warn("producer: the holder it names itself by is refused; it uses the default", "type", typ, "err", err)
		o.Holder = ""
	}
	if o.Holder == "" {
		o.Holder = DefaultHolder()
	}
	return &Producer{q: q, typ: typ, opts: o, waiter: make(chan struct{}, 1), group: &fdbq.AcceptGroup{}, tracer: tracing.Tracer(o.TracerProvider)}
}

// Type is the job type the producer accepts.
func (p *Producer) Type() string { return p.typ }

// Queue is the queue the producer accepts from.
func (p *Producer) Queue() *fdbq.Queue { return p.q }

// Acceptors is how many accepts a pipeline runs at once for this producer.
func (p *Producer) Acceptors() int { return p.opts.Acceptors }

// BatchLimit is the most jobs Pull returns.
func (p *Producer) BatchLimit() int { return p.opts.BatchLimit }

// Options returns the producer's options with defaults filled in.
func (p *Producer) Options() Options { return p.opts }

// Pull accepts between 1 and min(n, BatchLimit) due jobs, waiting — on the
// type's watch key and a timer for the next scheduled job, never by
// polling — until some are due, or until ctx ends (ctx's error). A paused
// type gives nothing until resumed. Store errors are retried after a
// jittered backoff and never lose jobs: an accept either returned its jobs
// or took none (fdbq makes accept idempotent under commit_unknown_result).
// An unknown type is not retried: Pull returns fdbq.ErrUnknownType.
func (p *Producer) Pull(ctx context.Context, n int) ([]*fdbq.Lease, error) {
	n = max(1, min(n, p.opts.BatchLimit))
	backoff := p.opts.MinBackoff
	waits := p.group.Waits()
	for {
		start := time.Now()
		leases, err := p.accept(ctx, n)
		if err == nil && len(leases) > 0 {
			p.noteFull(len(leases) == n && p.group.Waits() == waits)
			p.traceAccept(ctx, start, leases)
			return leases, nil
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		if err == nil {
			continue
		}
		if errors.Is(err, fdbq.ErrUnknownType) || errors.Is(err, kv.ErrClosed) {
			return nil, err
		}
		if p.opts.OnError != nil {
			p.opts.OnError(err)
		}
		p.opts.Logger.Warn("producer: accept failed; backing off", "type", p.typ, "err", err, "backoff", backoff)
		t := time.NewTimer(backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, p.opts.MaxBackoff)
	}
}

// accept takes jobs without waiting if some are due; otherwise it becomes
// (or waits to become) the one Pull that waits on the store.
func (p *Producer) accept(ctx context.Context, n int) ([]*fdbq.Lease, error) {
	o := fdbq.AcceptOptions{Max: n, Window: p.opts.Window, Group: p.group, Holder: p.opts.Holder}
	select {
	case p.waiter <- struct{}{}:
	default:
		leases, err := p.q.Accept(ctx, p.typ, o)
		if err != nil || len(leases) > 0 {
			return leases, err
		}
		select {
		case p.waiter <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	defer func() { <-p.waiter }()
	o.Timeout = -1
	return p.q.Accept(ctx, p.typ, o)
}

// Release hands jobs back to pending at once, without counting the
// attempt: a stopping pipeline releases what it accepted but did not
// start.
func (p *Producer) Release(ctx context.Context, leases []*fdbq.Lease) error {
	return p.q.Release(ctx, p.q.DB(), leases)
}

// Parked reports whether one of the producer's Pulls waits for jobs to
// become ready, and a channel closed when that changes: while one does,
// it takes a job that becomes ready at once.
func (p *Producer) Parked() (bool, <-chan struct{}) { return p.group.Parked() }

// Backlogged reports whether the last Pull that returned jobs returned
// as many as it was asked for without waiting for any to become ready
// (more were likely ready than the demand took), and a channel closed
// when that changes.
func (p *Producer) Backlogged() (bool, <-chan struct{}) {
	p.backlog.Lock()
	defer p.backlog.Unlock()
	if p.backlog.changed == nil {
		p.backlog.changed = make(chan struct{})
	}
	return p.backlog.full, p.backlog.changed
}

func (p *Producer) noteFull(full bool) {
	p.backlog.Lock()
	defer p.backlog.Unlock()
	if full != p.backlog.full {
		p.backlog.full = full
		if p.backlog.changed != nil {
			close(p.backlog.changed)
			p.backlog.changed = nil
		}
	}
}

// AcceptKeys accepts, without waiting, up to n of the first due jobs of
// the fairness keys given (in strict order within each key), sharing the
// producer's accept group so that it never takes a job one of its Pulls
// picked: a pipeline's express accepts of keys newly ready.
func (p *Producer) AcceptKeys(ctx context.Context, keys []string, n int) ([]*fdbq.Lease, error) {
	n = max(1, min(n, p.opts.BatchLimit))
	start := time.Now()
	leases, err := p.q.Accept(ctx, p.typ, fdbq.AcceptOptions{Max: n, Window: n, Group: p.group, Keys: keys, Holder: p.opts.Holder})
	if err == nil && len(leases) > 0 {
		p.traceAccept(ctx, start, leases)
	}
	return leases, err
}

// traceAccept records an accept that started at start and returned
// leases: a root span (the accept is no job's), linked to the trace
// context of each job that has one.
func (p *Producer) traceAccept(ctx context.Context, start time.Time, leases []*fdbq.Lease) {
	_, span := p.tracer.Start(ctx, tracing.SpanAccept,
		trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(start))
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrJobType.String(p.typ), tracing.AttrJobCount.Int(len(leases)))
		for _, l := range leases {
			if sc := tracing.SpanContext(l.Trace); sc.IsValid() {
				span.AddLink(trace.Link{SpanContext: sc})
			}
		}
	}
	span.End()
}
