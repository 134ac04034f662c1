package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/tracing"
)

// Job is what a handler gets: the job's typed data and its metadata.
type Job[T any] struct {
	ID          string
	Type        string
	Data        T
	Attempt     int // 1 on the first attempt; a snoozed attempt is not counted
	Snoozes     int // times a handler snoozed the job (Snooze)
	Priority    int
	Key         string // the job's fairness key ("": none)
	ScheduledAt time.Time
	Lease       *fdbq.Lease

	env      *Envelope
	progress func(ctx context.Context, progress json.RawMessage) error
	// undecodable is why the job's data did not decode into T: the
	// attempt then runs the middleware, not the handler, and cancels.
	undecodable error
}

// JobOptions make a Job outside a pipeline (NewJob): to run a handler in
// a test, or from code of one's own.
type JobOptions struct {
	ID, Type string
	Attempt  int // 0: 1
	Snoozes  int
	Priority int
	// Progress receives what the handler reports with Job.Progress; nil:
	// it is dropped.
	Progress func(ctx context.Context, progress json.RawMessage) error
}

// NewJob returns a job with data, not held by any lease (Lease is nil),
// whose progress goes to o.Progress. A pipeline makes its jobs itself.
func NewJob[T any](data T, o JobOptions) *Job[T] {
	if o.Attempt < 1 {
		o.Attempt = 1
	}
	p := o.Progress
	if p == nil {
		p = func(context.Context, json.RawMessage) error { return nil }
	}
	return &Job[T]{ID: o.ID, Type: o.Type, Data: data, Attempt: o.Attempt, Snoozes: o.Snoozes, Priority: o.Priority, progress: p}
}

// Progress records progress (any JSON value) with a heartbeat. It fails
// with fdbq.ErrHalt when the job's lock is gone.
func (j *Job[T]) Progress(ctx context.Context, progress any) error {
	b, err := json.Marshal(progress)
	if err != nil {
		return fmt.Errorf("consumer: encode progress: %w", err)
	}
	switch {
	case j.progress != nil:
		return j.progress(ctx, b)
	case j.env == nil:
		return errors.New("consumer: Progress of a job that no pipeline holds and NewJob did not make")
	}
	q := j.env.q
	return q.Heartbeat(ctx, q.DB(), j.Lease, fdbq.HeartbeatOptions{Progress: b})
}

// Handler works one job. Its result is stored as the job's result (JSON);
// an error fails the attempt (retried per the type's policy), unless it is
// (or wraps) one of Cancel, Snooze or RetryAt, which end it as they say.
// Its context
// is cancelled when the job's lock is gone, its per-job timeout passes, or
// the pipeline stops past its drain deadline.
type Handler[T, R any] func(ctx context.Context, job *Job[T]) (R, error)

// Defaults of Options.
const DefaultConcurrency = 10

// Options configure a consumer stage.
type Options struct {
	// Name labels the consumer in logs; default the handler's job type.
	Name string
	// Concurrency bounds handlers running at once (GenStage's
	// ConsumerSupervisor max_demand); default DefaultConcurrency.
	Concurrency int
	// MaxDemand is how many jobs the consumer asks for up front; default
	// 2·Concurrency, so that handlers find new jobs while the outcomes of
	// the last ones commit. MinDemand is the level at which it asks again; default
	// MaxDemand/2. Jobs asked for beyond Concurrency wait in the consumer's
	// buffer, already accepted, so that a handler finds its next job at
	// once.
	MaxDemand int
	MinDemand int
	// JobTimeout bounds one attempt; 0: none.
	JobTimeout time.Duration
	// TracerProvider makes the spans of each attempt (jobstage.handle,
	// around the handler, in the trace the job was enqueued in, and
	// jobstage.finish, the commit of its outcome; see package tracing);
	// nil: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

func (o *Options) defaults() error {
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.MaxDemand <= 0 {
		o.MaxDemand = 2 * o.Concurrency
	}
	if o.MinDemand <= 0 && o.MaxDemand > 1 {
		o.MinDemand = o.MaxDemand / 2
	}
	if o.MinDemand >= o.MaxDemand {
		return fmt.Errorf("consumer: min demand %d must be below max demand %d", o.MinDemand, o.MaxDemand)
	}
	return nil
}

// Consumer is a consumer stage: it asks for jobs, runs a handler on each
// up to its concurrency, and acknowledges each outcome.
type Consumer struct {
	opts Options
	kind string // the Kind of T, if T has one
	// run runs the handler on e and returns the acknowledgement, which
	// commits the outcome and then calls then (Envelope.ack).
	run func(e *Envelope) (ack func(then func()))
}

// New returns a consumer running h, wrapped by mw (the first wraps
// outermost; see Wrap). T is the type the job's JSON data decodes into, R
// the type of the result stored. Both are inferred from h:
//
//	consumer.New(send, consumer.Options{}, consumer.Logging(log), consumer.Recover())
func New[T, R any](h Handler[T, R], o Options, mw ...Middleware) (*Consumer, error) {
	if err := checkMiddleware(mw); err != nil {
		return nil, err
	}
	h = Wrap(decoded(h), mw...)
	return newConsumer(o, func(ctx context.Context, job *Job[T]) (json.RawMessage, error) {
		r, err := h(ctx, job)
		if err != nil {
			return nil, err
		}
		return encodeResult(job.Type, job.ID, r)
	})
}

// NewFunc is New for a handler with nothing to return: its error is the
// attempt's outcome, and its job stores no result.
//
//	consumer.NewFunc(func(ctx context.Context, job *consumer.Job[Email]) error { … }, consumer.Options{})
func NewFunc[T any](h func(ctx context.Context, job *Job[T]) error, o Options, mw ...Middleware) (*Consumer, error) {
	if err := checkMiddleware(mw); err != nil {
		return nil, err
	}
	handle := h
	run := wrapFunc(func(ctx context.Context, job *Job[T]) error {
		if job.undecodable != nil {
			return Cancel(job.undecodable.Error())
		}
		return handle(ctx, job)
	}, mw)
	return newConsumer(o, func(ctx context.Context, job *Job[T]) (json.RawMessage, error) {
		return nil, run(ctx, job)
	})
}

// decoded is h for jobs whose data decoded, and a cancel for the others:
// another attempt would not decode them either. It runs inside the
// middleware, so that they see the attempt and its outcome (a log line,
// a count) as they see any other.
func decoded[T, R any](h Handler[T, R]) Handler[T, R] {
	return func(ctx context.Context, job *Job[T]) (R, error) {
		if job.undecodable != nil {
			var zero R
			return zero, Cancel(job.undecodable.Error())
		}
		return h(ctx, job)
	}
}

// dataKind returns the Kind of T's zero value, if T has a Kind method: a
// Kind that panics there (a pointer type's, reading a field) is an error
// of the consumer's construction, not a panic of the caller's.
func dataKind[T any]() (kind string, err error) {
	var zero T
	k, ok := any(zero).(interface{ Kind() string })
	if !ok {
		return "", nil
	}
	defer func() {
		if p := recover(); p != nil {
			kind, err = "", fmt.Errorf("consumer: the Kind method of %T panicked on its zero value: %v", zero, p)
		}
	}()
	return k.Kind(), nil
}

// newConsumer returns a consumer whose run works a job with data of type T
// and returns the job's JSON result.
func newConsumer[T any](o Options, run func(ctx context.Context, job *Job[T]) (json.RawMessage, error)) (*Consumer, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	timeout := o.JobTimeout
	kind, err := dataKind[T]()
	if err != nil {
		return nil, err
	}
	tracer := tracing.Tracer(o.TracerProvider)
	return &Consumer{opts: o, kind: kind, run: func(e *Envelope) func(func()) {
		e.traceWith(tracer)
		if !e.Start() {
			cause := context.Cause(e.Context())
			return func(then func()) { e.ack(nil, cause, then) }
		}
		result, err := runTyped(e, run, timeout, tracer)
		return func(then func()) { e.ack(result, err, then) }
	}}, nil
}

// Must is New that panics on bad options, for package-level pipelines.
func Must(c *Consumer, err error) *Consumer {
	if err != nil {
		panic(err)
	}
	return c
}

// Kind is the job type the consumer's data type names by its Kind method
// (a jobstage.Args), or "" when it has none: a pipeline refuses to feed
// such a consumer jobs of any other type.
func (c *Consumer) Kind() string { return c.kind }

// Options returns the consumer's options with defaults filled in.
func (c *Consumer) Options() Options { return c.opts }

// runTyped decodes the job's data and runs the handler, which returns the
// job's JSON result (panics become errors with the stack), in the
// attempt's handle span.
func runTyped[T any](e *Envelope, run func(ctx context.Context, job *Job[T]) (json.RawMessage, error), timeout time.Duration, tracer trace.Tracer) (result json.RawMessage, err error) {
	l := e.Lease
	job := &Job[T]{ID: l.ID, Type: l.Type, Attempt: l.Attempts, Snoozes: l.Snoozes, Priority: l.Priority, Key: l.Key, ScheduledAt: l.ScheduledAt, Lease: l, env: e}
	job.undecodable = decodeData(job, l.Data)
	ctx, span := startHandle(e, tracer)
	defer func() { endHandle(ctx, span, err) }()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, fmt.Errorf("consumer: job timed out after %v", timeout))
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			result, err = nil, &PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	result, err = run(ctx, job)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil && cause != err && !strings.Contains(err.Error(), cause.Error()) {
			err = fmt.Errorf("%w (%v)", err, cause)
		}
		return nil, err
	}
	return result, nil
}

// decodeData decodes a job's JSON data into job.Data; empty data leaves it
// zero.
func decodeData[T any](job *Job[T], data json.RawMessage) error {
	if len(data) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, &job.Data); err != nil {
		return fmt.Errorf("consumer: decode data of %s/%s: %w", job.Type, job.ID, err)
	}
	return nil
}

// encodeResult encodes a handler's result as the job's JSON result.
func encodeResult(typ, id string, r any) (json.RawMessage, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("consumer: encode result of %s/%s: %w", typ, id, err)
	}
	return b, nil
}

// Serve runs the consumer's GenStage loop: it asks for MaxDemand jobs up
// front with ask, runs each envelope from in (at most Concurrency at
// once), and asks again for what it is missing whenever the jobs it asked
// for and has not finished fall to MinDemand. It returns when in is
// closed and every handler it started has acknowledged.
//
// Jobs wait for a handler in turns by fairness key (Lease.Key): the keys
// with jobs waiting take one start each in turn, and within a key jobs
// start in the order they arrived. So a job of a key that has nothing
// waiting starts next, not behind the buffer of a key with a backlog;
// jobs without a key are one key among the others. A consumer of
// Concurrency 1 starts every job in the order it arrived (partition
// dispatch keeps per-key order with it).
func (c *Consumer) Serve(in <-chan *Envelope, ask func(n int)) {
	maxD, minD := c.opts.MaxDemand, c.opts.MinDemand
	// A fixed set of handler goroutines takes envelopes from one queue in
	// arrival order. (A goroutine per envelope racing for a semaphore
	// would start them in whatever order the scheduler ran those
	// goroutines, and break the per-key order that partition dispatch to
	// one-at-a-time consumers promises.) The loop keeps receiving
	// completions until every handler is done, so a handler never blocks
	// reporting one, however many jobs were delivered.
	work := make(chan *Envelope)
	// A committed outcome adds to finished and wakes the loop; the loop
	// takes all that were added since it last looked. A batch of outcomes
	// committed together wakes it once, and no goroutine waits on a
	// commit.
	var finished atomic.Int64
	wake := make(chan struct{}, 1)
	var wg, commits sync.WaitGroup
	committed := func() {
		finished.Add(1)
		select {
		case wake <- struct{}{}:
		default:
		}
		commits.Done()
	}
	for range c.opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range work {
				// The handler's slot is free as soon as it returns; the
				// outcome commits meanwhile. Its demand is given back only
				// once the commit is done, so jobs held — buffered,
				// running or committing — still never exceed MaxDemand,
				// while concurrency counts only jobs being worked on. (A
				// slot held until the commit made throughput Concurrency
				// divided by the commit latency, and left a BatchFinisher
				// batches no larger than the handlers waiting on it.)
				ack := c.run(e)
				commits.Add(1)
				ack(committed)
			}
		}()
	}
	queue := newTurns(c.opts.Concurrency > 1) // received, not yet taken by a handler
	outstanding := maxD                       // asked for and not finished
	ask(maxD)
	for in != nil || queue.len() > 0 {
		var next chan<- *Envelope
		var head *Envelope
		if queue.len() > 0 {
			next, head = work, queue.head()
		}
		select {
		case e, ok := <-in:
			if !ok {
				in = nil
				continue
			}
			queue.push(e)
		case next <- head:
			queue.pop()
		case <-wake:
			outstanding -= int(finished.Swap(0))
			if outstanding <= minD {
				ask(maxD - outstanding)
				outstanding = maxD
			}
		}
	}
	close(work)
	wg.Wait()
	commits.Wait()
}

// turns holds the envelopes a consumer received and has not started, in
// turns by fairness key: head is the first envelope of the key whose turn
// it is, and pop moves the turn on to the next key with envelopes, so
// every key waiting gets a start before any gets a second. Without byKey
// it is one queue in arrival order.
type turns struct {
	byKey bool
	n     int
	// ring[at:] lists the keys with envelopes waiting, the key whose turn
	// it is first; waiting holds each key's envelopes in arrival order.
	ring    []string
	at      int
	waiting map[string][]*Envelope
}

func newTurns(byKey bool) *turns {
	return &turns{byKey: byKey, waiting: map[string][]*Envelope{}}
}

func (t *turns) len() int { return t.n }

func (t *turns) push(e *Envelope) {
	var k string
	if t.byKey {
		k = e.Lease.Key
	}
	q := t.waiting[k]
	if len(q) == 0 {
		t.ring = append(t.ring, k)
	}
	t.waiting[k] = append(q, e)
	t.n++
}

// head is the envelope to start next. REQUIRES: t.len() > 0.
func (t *turns) head() *Envelope { return t.waiting[t.ring[t.at]][0] }

// pop removes head and gives the turn to the next key.
func (t *turns) pop() {
	k := t.ring[t.at]
	t.at++
	q := t.waiting[k]
	q[0] = nil
	q = q[1:]
	t.n--
	if len(q) == 0 {
		delete(t.waiting, k)
	} else {
		t.waiting[k] = q
		t.ring = append(t.ring, k)
	}
	if t.at >= 64 && t.at*2 >= len(t.ring) {
		t.ring = t.ring[:copy(t.ring, t.ring[t.at:])]
		t.at = 0
	}
}
