package jobstage

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// Job is what a handler gets: the job's typed arguments (Data) and
// its metadata, with Progress to report progress.
type Job[T any] = consumer.Job[T]

// Cancel, returned by a handler (wrapped or not), finishes its job with
// outcome canceled and reason as its error, whatever attempts it has left
// (consumer.Cancel).
func Cancel(reason string) error { return consumer.Cancel(reason) }

// Snooze, returned by a handler, runs its job again after d without
// counting the attempt; Job.Snoozes counts the snoozes (consumer.Snooze).
func Snooze(d time.Duration) error { return consumer.Snooze(d) }

// RetryAt, returned by a handler, fails the attempt with err and runs the
// job again at t if it has attempts left (consumer.RetryAt).
func RetryAt(t time.Time, err error) error { return consumer.RetryAt(t, err) }

// WorkOptions configure the pipeline Work runs; zero fields keep the
// defaults.
type WorkOptions struct {
	// Concurrency is how many jobs run at once (default
	// consumer.DefaultConcurrency).
	Concurrency int
	// Timeout bounds each attempt; default the kind's Defaults.Timeout.
	Timeout time.Duration
}

// worker is one kind's pipeline: Work declares it, each Start builds
// and runs it.
type worker struct {
	kind     string
	settings fdbq.TypeSettings
	build    func() (*pipeline.Pipeline, error)
	p        *pipeline.Pipeline // the last one built
}

// Work registers h as the handler of T's kind: Start runs a pipeline that
// accepts the kind's jobs on demand and runs h on each, up to the
// concurrency. An error fails the attempt, retried per the kind's retry
// policy; Cancel, Snooze and RetryAt end it as they say; a panic fails it
// with the stack; data that does not decode into T cancels the job. The
// job stores no result (WorkResult is for a handler that has one). o may
// be nil.
func Work[T Args](c *Client, h func(ctx context.Context, job *Job[T]) error, o *WorkOptions) error {
	return work[T](c, o, func(co consumer.Options, mw ...consumer.Middleware) (*consumer.Consumer, error) {
		return consumer.NewFunc(h, co, mw...)
	})
}

// WorkResult is Work for a handler with a result, stored as the job's
// JSON result (see Info.DecodeResult).
func WorkResult[T Args, R any](c *Client, h consumer.Handler[T, R], o *WorkOptions) error {
	return work[T](c, o, func(co consumer.Options, mw ...consumer.Middleware) (*consumer.Consumer, error) {
		return consumer.New(h, co, mw...)
	})
}

// work registers the consumer newConsumer makes as the handler of T's
// kind.
func work[T Args](c *Client, o *WorkOptions, newConsumer func(consumer.Options, ...consumer.Middleware) (*consumer.Consumer, error)) error {
	kind, d, err := kindOf[T]()
	if err != nil {
		return err
	}
	s, err := d.settings()
	if err != nil {
		return fmt.Errorf("jobstage: the Defaults of kind %s: %w", kind, err)
	}
	if o == nil {
		o = &WorkOptions{}
	}
	if o.Timeout < 0 {
		return fmt.Errorf("jobstage: kind %s: negative WorkOptions.Timeout %v", kind, o.Timeout)
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = d.Timeout
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != 0 {
		return fmt.Errorf("jobstage: Work for kind %s after Start", kind)
	}
	for _, w := range c.workers {
		if w.kind == kind {
			return fmt.Errorf("jobstage: kind %s has a handler already", kind)
		}
	}
	co := consumer.Options{Name: kind, Concurrency: o.Concurrency, JobTimeout: timeout, TracerProvider: c.cfg.TracerProvider}
	log := c.cfg.Logger.With("kind", kind)
	build := func() (*pipeline.Pipeline, error) {
		cons, err := newConsumer(co, consumer.Logging(log), consumer.Recover())
		if err != nil {
			return nil, err
		}
		return pipeline.From(producer.New(c.q, kind, producer.Options{Logger: c.cfg.Logger, TracerProvider: c.cfg.TracerProvider})).
			To(cons).
			// The client runs the monitor (unless Config.NoRecovery says none).
			WithOptions(pipeline.Options{BatchFinish: true, Logger: log, DrainTimeout: c.cfg.DrainTimeout, NoRecovery: true}).
			Build()
	}
	// Built once now, so that what is wrong with the handler or its
	// options is Work's error, not Start's.
	if _, err := build(); err != nil {
		return fmt.Errorf("jobstage: kind %s: %w", kind, err)
	}
	c.workers = append(c.workers, &worker{kind: kind, settings: s, build: build})
	return nil
}

// Info is a job as Get and Wait return it: fdbq's view, with the
// arguments decoded in Data (the stored JSON is Job.Data).
type Info[T Args] struct {
	*fdbq.Job
	Data T
}

// DecodeResult decodes the job's JSON result into v (ResultOf is its
// typed form).
func (i *Info[T]) DecodeResult(v any) error {
	if err := hasResult(i.Job); err != nil {
		return err
	}
	return json.Unmarshal(i.Result, v)
}

// OutcomeError is the error of ResultOf and WaitResult for a job that
// finished without succeeding: Job.Outcome and Job.Error say how.
type OutcomeError struct{ Job *fdbq.Job }

func (e *OutcomeError) Error() string {
	if e.Job.Error == "" {
		// Canceled by an operator (Queue.Cancel) before any attempt
		// failed: there is no error to quote.
		return fmt.Sprintf("jobstage: job %s/%s finished %s", e.Job.Type, e.Job.ID, e.Job.Outcome)
	}
	msg, _, cut := strings.Cut(e.Job.Error, "\n")
	if cut {
		msg += " …"
	}
	return fmt.Sprintf("jobstage: job %s/%s finished %s: %s", e.Job.Type, e.Job.ID, e.Job.Outcome, msg)
}

// hasResult is nil if j is a succeeded job with a stored result, and
// otherwise says why it has none.
func hasResult(j *fdbq.Job) error {
	switch {
	case j.State != fdbq.Finished:
		return fmt.Errorf("jobstage: job %s/%s is %s: no result yet", j.Type, j.ID, j.State)
	case j.Outcome != fdbq.Succeeded:
		return &OutcomeError{Job: j}
	case len(j.Result) == 0:
		return fmt.Errorf("jobstage: job %s/%s succeeded with no result (its handler returns none)", j.Type, j.ID)
	}
	return nil
}

// ResultOf decodes the result of j, a job a WorkResult handler finished,
// into R. A job with none is an error that says why: not finished yet,
// finished without succeeding (*OutcomeError), or worked by a handler
// that returns no result.
func ResultOf[R any](j *fdbq.Job) (R, error) {
	var r R
	if err := hasResult(j); err != nil {
		return r, err
	}
	if err := json.Unmarshal(j.Result, &r); err != nil {
		return r, fmt.Errorf("jobstage: result of %s/%s does not decode into %T: %w", j.Type, j.ID, r, err)
	}
	return r, nil
}

// InfoOf is j with its data decoded into T, as Get and Wait return it:
// for jobs read through the queue (Client.Queue().List, say). Empty or
// null data is T's zero value.
func InfoOf[T Args](j *fdbq.Job) (*Info[T], error) {
	out := &Info[T]{Job: j}
	if len(j.Data) > 0 && string(j.Data) != "null" {
		if err := json.Unmarshal(j.Data, &out.Data); err != nil {
			return out, fmt.Errorf("jobstage: data of %s/%s does not decode into %T: %w", j.Type, j.ID, out.Data, err)
		}
	}
	return out, nil
}

// Get reads the job of T's kind with id.
func Get[T Args](ctx context.Context, c *Client, id string) (*Info[T], error) {
	kind, _, err := kindOf[T]()
	if err != nil {
		return nil, err
	}
	j, err := c.q.Get(ctx, c.db, kind, id)
	if err != nil {
		return nil, err
	}
	return InfoOf[T](j)
}

// Wait waits until the job of T's kind with id is finished (succeeded,
// failed or canceled: see Info.Outcome) or ctx ends. It watches the
// store; it does not poll.
func Wait[T Args](ctx context.Context, c *Client, id string) (*Info[T], error) {
	kind, _, err := kindOf[T]()
	if err != nil {
		return nil, err
	}
	j, err := c.q.WaitOne(ctx, kind, id, fdbq.Finished)
	if err != nil {
		return nil, err
	}
	return InfoOf[T](j)
}

// WaitResult waits as Wait does, then decodes the job's result into R
// (ResultOf): the call that enqueues a job and wants its answer. A job
// that finished without succeeding is an *OutcomeError, with the job
// still returned.
func WaitResult[T Args, R any](ctx context.Context, c *Client, id string) (*Info[T], R, error) {
	var r R
	info, err := Wait[T](ctx, c, id)
	if err != nil {
		return info, r, err
	}
	r, err = ResultOf[R](info.Job)
	return info, r, err
}
