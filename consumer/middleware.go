package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// Logging logs each attempt's start and outcome.
func Logging[T, R any](log *slog.Logger) Middleware[T, R] {
	return func(next Handler[T, R]) Handler[T, R] {
		return func(ctx context.Context, job *Job[T]) (R, error) {
			start := time.Now()
			log.DebugContext(ctx, "job started", "type", job.Type, "id", job.ID, "attempt", job.Attempt)
			r, err := next(ctx, job)
			if err != nil && (errors.Is(err, ErrStopping) || errors.Is(context.Cause(ctx), ErrStopping)) {
				// Not a failure: the job goes back to pending, the attempt
				// not counted.
				log.InfoContext(ctx, "job interrupted by the stop; it goes back to pending", "type", job.Type, "id", job.ID, "attempt", job.Attempt, "duration", time.Since(start), "err", err)
			} else if err != nil {
				log.WarnContext(ctx, "job failed", "type", job.Type, "id", job.ID, "attempt", job.Attempt, "duration", time.Since(start), "err", err)
			} else {
				log.DebugContext(ctx, "job succeeded", "type", job.Type, "id", job.ID, "attempt", job.Attempt, "duration", time.Since(start))
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
					r, err = zero, fmt.Errorf("consumer: handler panicked: %v\n%s", p, debug.Stack())
				}
			}()
			return next(ctx, job)
		}
	}
}

// Outcome labels of the Metrics middleware.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	OutcomeHalted    = "halted"
	OutcomeTimeout   = "timeout"
)

// Metrics reports each attempt's type, outcome and duration to observe
// (a Prometheus histogram's Observe, say).
func Metrics[T, R any](observe func(jobType, outcome string, d time.Duration)) Middleware[T, R] {
	return func(next Handler[T, R]) Handler[T, R] {
		return func(ctx context.Context, job *Job[T]) (R, error) {
			start := time.Now()
			r, err := next(ctx, job)
			outcome := OutcomeSucceeded
			switch {
			case errors.Is(context.Cause(ctx), ErrHalted):
				// Checked first: whatever the handler returned after a
				// halt is not committed, so it did not succeed.
				outcome = OutcomeHalted
			case err == nil:
			case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
				outcome = OutcomeTimeout
			default:
				outcome = OutcomeFailed
			}
			observe(job.Type, outcome, time.Since(start))
			return r, err
		}
	}
}
