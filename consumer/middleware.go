package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// AttemptInfo is what a middleware knows of the attempt it wraps: the
// job's metadata, as the handler's Job has it, without the data and the
// result, whose types only the handler knows. That is what lets one
// middleware wrap handlers of every type.
type AttemptInfo struct {
	ID, Type    string
	Attempt     int // 1 on the first attempt; a snoozed attempt is not counted
	Snoozes     int // times a handler snoozed the job (Snooze)
	Priority    int
	ScheduledAt time.Time
	// Lease holds the job in a pipeline; nil for a job NewJob made.
	Lease *fdbq.Lease
}

// Attempt runs one attempt of a handler, and whatever middleware wrap it
// inside, on the job a describes. Its error is the attempt's: nil on
// success, or what the handler (or a middleware) returned.
type Attempt func(ctx context.Context, a *AttemptInfo) error

// Middleware wraps an attempt: logging, metrics, timeouts, recovery. It is
// not generic, so a middleware is written once for every job type, and its
// type is inferred wherever it is given:
//
//	func(next consumer.Attempt) consumer.Attempt {
//		return func(ctx context.Context, a *consumer.AttemptInfo) error {
//			// before the attempt
//			err := next(ctx, a)
//			// after it
//			return err
//		}
//	}
//
// The context a middleware passes to next is the handler's (Timeout
// bounds it so); the AttemptInfo it passes is for the middleware inside
// it: the handler sees its Job whatever it says. A middleware that
// returns an error fails the attempt with it, and the handler's result is
// dropped; one that returns nil after the handler failed makes the
// attempt succeed with the result the handler returned.
type Middleware func(next Attempt) Attempt

// Wrap returns h wrapped by mw, the first outermost: what New runs, and a
// way to try middleware on a handler outside a pipeline. Each middleware
// is called once per attempt, to wrap it: what is meant to be done once
// belongs in the function that returns the Middleware.
//
// A nil middleware panics here, rather than at every attempt.
func Wrap[T, R any](h Handler[T, R], mw ...Middleware) Handler[T, R] {
	if err := checkMiddleware(mw); err != nil {
		panic(err)
	}
	if len(mw) == 0 {
		return h
	}
	mw = slices.Clone(mw)
	return func(ctx context.Context, job *Job[T]) (R, error) {
		var r R
		err := wrapAttempt(ctx, job, mw, func(ctx context.Context) (err error) {
			r, err = h(ctx, job)
			return err
		})
		if err != nil {
			var zero R
			return zero, err
		}
		return r, nil
	}
}

// checkMiddleware refuses a nil middleware, which would fail every
// attempt with a panic.
func checkMiddleware(mw []Middleware) error {
	for i, m := range mw {
		if m == nil {
			return fmt.Errorf("consumer: middleware %d of %d is nil", i+1, len(mw))
		}
	}
	return nil
}

// wrapFunc is Wrap for a handler with nothing to return (NewFunc).
func wrapFunc[T any](h func(ctx context.Context, job *Job[T]) error, mw []Middleware) func(ctx context.Context, job *Job[T]) error {
	if len(mw) == 0 {
		return h
	}
	mw = slices.Clone(mw)
	return func(ctx context.Context, job *Job[T]) error {
		return wrapAttempt(ctx, job, mw, func(ctx context.Context) error { return h(ctx, job) })
	}
}

// wrapAttempt runs handle, the handler's call on job, inside mw.
//
// The chain is built for each attempt, around a step that closes over
// this attempt's job and result. (Built once, the innermost step would
// have to find the handler's call through the AttemptInfo or the context
// it is passed, which a middleware is free to replace.)
func wrapAttempt[T any](ctx context.Context, job *Job[T], mw []Middleware, handle func(ctx context.Context) error) error {
	run := Attempt(func(ctx context.Context, _ *AttemptInfo) error { return handle(ctx) })
	for i := len(mw) - 1; i >= 0; i-- {
		run = mw[i](run)
	}
	return run(ctx, job.info())
}

// info returns the job's metadata for middleware.
func (j *Job[T]) info() *AttemptInfo {
	return &AttemptInfo{ID: j.ID, Type: j.Type, Attempt: j.Attempt, Snoozes: j.Snoozes,
		Priority: j.Priority, ScheduledAt: j.ScheduledAt, Lease: j.Lease}
}

// Logging logs each attempt's start and outcome.
func Logging(log *slog.Logger) Middleware {
	return func(next Attempt) Attempt {
		return func(ctx context.Context, a *AttemptInfo) error {
			start := time.Now()
			log.DebugContext(ctx, "job started", "type", a.Type, "id", a.ID, "attempt", a.Attempt)
			err := next(ctx, a)
			attrs := []any{"type", a.Type, "id", a.ID, "attempt", a.Attempt, "duration", time.Since(start)}
			switch AttemptOutcome(ctx, err) {
			case OutcomeSucceeded:
				log.DebugContext(ctx, "job succeeded", attrs...)
			case OutcomeSnoozed:
				log.DebugContext(ctx, "job snoozed", append(attrs, "snoozes", a.Snoozes, "err", err)...)
			case OutcomeCanceled:
				log.InfoContext(ctx, "job canceled by its handler", append(attrs, "err", err)...)
			case OutcomeStopped:
				// Not a failure: the job goes back to pending, the attempt
				// not counted.
				log.InfoContext(ctx, "job interrupted by the stop; it goes back to pending", append(attrs, "err", err)...)
			case OutcomeHalted:
				log.InfoContext(ctx, "job halted: its lock is gone, and what it did is not committed", append(attrs, "err", err)...)
			default:
				if errors.Is(err, ErrStopping) {
					log.InfoContext(ctx, "job interrupted by the stop; it goes back to pending", append(attrs, "err", err)...)
					break
				}
				log.WarnContext(ctx, "job failed", append(attrs, "err", err)...)
			}
			return err
		}
	}
}

// Timeout bounds each attempt; the handler's context ends after d and the
// attempt fails.
func Timeout(d time.Duration) Middleware {
	return func(next Attempt) Attempt {
		return func(ctx context.Context, a *AttemptInfo) error {
			ctx, cancel := context.WithTimeoutCause(ctx, d, fmt.Errorf("consumer: job timed out after %v", d))
			defer cancel()
			err := next(ctx, a)
			if err == nil && ctx.Err() != nil {
				// A handler that ignored its context and returned late still
				// exceeded its time.
				return context.Cause(ctx)
			}
			return err
		}
	}
}

// Recover turns a panic in the handler into an error carrying the stack.
// Consumers recover panics anyway; this middleware makes the panic an
// ordinary error for middlewares outside it (logging, metrics).
func Recover() Middleware {
	return func(next Attempt) Attempt {
		return func(ctx context.Context, a *AttemptInfo) (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = &PanicError{Value: p, Stack: debug.Stack()}
				}
			}()
			return next(ctx, a)
		}
	}
}

// How an attempt ended, as the middleware see it: the outcome label of
// Metrics and of package metrics. One vocabulary for both.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"   // an error, or RetryAt
	OutcomeTimeout   = "timeout"  // the per-job timeout passed
	OutcomePanicked  = "panicked" // the handler panicked (PanicError)
	OutcomeHalted    = "halted"   // the job's lock was gone (ErrHalted)
	OutcomeStopped   = "stopped"  // the pipeline stopped past its drain deadline (ErrStopping)
	OutcomeCanceled  = "canceled" // Cancel
	OutcomeSnoozed   = "snoozed"  // Snooze
)

// AttemptOutcome names how an attempt that ran with ctx and returned err
// ended. The context's cause comes first: after a halt or a stop,
// whatever the handler returned is not committed as its outcome.
func AttemptOutcome(ctx context.Context, err error) string {
	var end *EndError
	var panicked *PanicError
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, ErrHalted):
		return OutcomeHalted
	case errors.As(err, &end) && end.How == fdbq.AttemptCanceled:
		return OutcomeCanceled
	case errors.As(err, &end) && end.How == fdbq.AttemptSnoozed:
		return OutcomeSnoozed
	case err != nil && errors.Is(cause, ErrStopping) && !errors.As(err, &end):
		// An ending the handler chose (RetryAt too) is committed as
		// chosen, stop or not (Envelope.Ack).
		return OutcomeStopped
	case errors.As(err, &panicked):
		return OutcomePanicked
	case err == nil:
		return OutcomeSucceeded
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return OutcomeTimeout
	default:
		return OutcomeFailed
	}
}

// Metrics reports each attempt's type, outcome (AttemptOutcome) and
// duration to observe (a Prometheus histogram's Observe, say).
func Metrics(observe func(jobType, outcome string, d time.Duration)) Middleware {
	return func(next Attempt) Attempt {
		return func(ctx context.Context, a *AttemptInfo) error {
			start := time.Now()
			err := next(ctx, a)
			observe(a.Type, AttemptOutcome(ctx, err), time.Since(start))
			return err
		}
	}
}
