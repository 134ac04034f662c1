package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// Logging logs each attempt's start and outcome.
func Logging[T, R any](log *slog.Logger) Middleware[T, R] {
	return func(next Handler[T, R]) Handler[T, R] {
		return func(ctx context.Context, job *Job[T]) (R, error) {
			start := time.Now()
			log.DebugContext(ctx, "job started", "type", job.Type, "id", job.ID, "attempt", job.Attempt)
			r, err := next(ctx, job)
			attrs := []any{"type", job.Type, "id", job.ID, "attempt", job.Attempt, "duration", time.Since(start)}
			switch AttemptOutcome(ctx, err) {
			case OutcomeSucceeded:
				log.DebugContext(ctx, "job succeeded", attrs...)
			case OutcomeSnoozed:
				log.DebugContext(ctx, "job snoozed", append(attrs, "snoozes", job.Snoozes, "err", err)...)
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
			return r, err
		}
	}
}

// Timeout bounds each attempt; the handler's context ends after d and the
// attempt fails.
func Timeout[T, R any](d time.Duration) Middleware[T, R] {
	return func(next Handler[T, R]) Handler[T, R] {
		return func(ctx context.Context, job *Job[T]) (R, error) {
			ctx, cancel := context.WithTimeoutCause(ctx, d, fmt.Errorf("consumer: job timed out after %v", d))
			defer cancel()
			r, err := next(ctx, job)
			if err == nil && ctx.Err() != nil {
				// A handler that ignored its context and returned late still
				// exceeded its time.
				var zero R
				return zero, context.Cause(ctx)
			}
			return r, err
		}
	}
}

// Recover turns a panic in the handler into an error carrying the stack.
// Consumers recover panics anyway; this middleware makes the panic an
// ordinary error for middlewares outside it (logging, metrics).
func Recover[T, R any]() Middleware[T, R] {
	return func(next Handler[T, R]) Handler[T, R] {
		return func(ctx context.Context, job *Job[T]) (r R, err error) {
			defer func() {
				if p := recover(); p != nil {
					var zero R
					r, err = zero, &PanicError{Value: p, Stack: debug.Stack()}
				}
			}()
			return next(ctx, job)
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
func Metrics[T, R any](observe func(jobType, outcome string, d time.Duration)) Middleware[T, R] {
	return func(next Handler[T, R]) Handler[T, R] {
		return func(ctx context.Context, job *Job[T]) (R, error) {
			start := time.Now()
			r, err := next(ctx, job)
			observe(job.Type, AttemptOutcome(ctx, err), time.Since(start))
			return r, err
		}
	}
}
