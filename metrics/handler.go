package metrics

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/pipeline"
)

// typeLookupTimeout bounds the store read that learns a type's retry
// policy before the first scrape.
const typeLookupTimeout = time.Second

// Stage returns a pipeline stage that counts the jobs the pipeline accepts
// (jobstage_jobs_accepted_total) and observes how long each waited after it
// was due (jobstage_job_queue_wait_seconds). Put it first in Via.
func (m *Metrics) Stage() pipeline.Stage {
	return pipeline.Map(func(_ context.Context, l *fdbq.Lease) error {
		if m != nil {
			m.accept(l, time.Now())
		}
		return nil
	})
}

// Middleware returns a consumer middleware that observes each attempt:
// its duration and outcome (jobstage_job_run_duration_seconds,
// jobstage_jobs_finished_total), the handlers running
// (jobstage_handlers_running) and the failed attempts that will be retried
// (jobstage_jobs_retried_total). A panic in the handler becomes the
// attempt's error, with its stack, as consumer.Recover makes it. Give it
// first, so that it wraps the others.
func Middleware[T, R any](m *Metrics) consumer.Middleware[T, R] {
	return func(next consumer.Handler[T, R]) consumer.Handler[T, R] {
		if m == nil {
			return next
		}
		return func(ctx context.Context, job *consumer.Job[T]) (r R, err error) {
			running := gauge(m.running, job.Type)
			running.Inc()
			start := time.Now()
			panicked := false
			defer func() {
				if p := recover(); p != nil {
					var zero R
					r, err, panicked = zero, fmt.Errorf("consumer: handler panicked: %v\n%s", p, debug.Stack()), true
				}
				running.Dec()
				outcome := attemptOutcome(ctx, err, panicked)
				observer(m.runtime, job.Type, outcome).Observe(time.Since(start).Seconds())
				counter(m.finished, job.Type, outcome).Inc()
				switch outcome {
				case OutcomeFailed, OutcomeTimeout, OutcomePanicked:
					if m.willRetry(job.Type, job.Attempt, job.Lease) {
						counter(m.retried, job.Type).Inc()
					}
				}
			}()
			return next(ctx, job)
		}
	}
}

// attemptOutcome names how an attempt ended. The context's cause comes
// first: after a halt or a stop, whatever the handler returned is not
// committed as its outcome.
func attemptOutcome(ctx context.Context, err error, panicked bool) string {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, consumer.ErrHalted):
		return OutcomeHalted
	case errors.Is(cause, consumer.ErrStopping):
		return OutcomeStopped
	case panicked:
		return OutcomePanicked
	case err == nil:
		return OutcomeSucceeded
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return OutcomeTimeout
	default:
		return OutcomeFailed
	}
}

// willRetry reports whether a failed attempt leaves the job attempts to
// run again: the job's own max attempts, or else its type's retry
// policy's. When the policy cannot be learned it reports false.
func (m *Metrics) willRetry(typ string, attempt int, l *fdbq.Lease) bool {
	limit := 0
	if l != nil {
		limit = l.MaxAttempts
	}
	if limit == 0 {
		limit = m.typeMaxAttempts(typ)
	}
	return limit > 0 && attempt < limit
}

func (m *Metrics) typeMaxAttempts(typ string) int {
	if v, ok := m.maxAttempts.Load(typ); ok {
		return v.(int)
	}
	if m.q == nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), typeLookupTimeout)
	defer cancel()
	info, err := m.q.GetType(ctx, m.q.DB(), typ)
	if err != nil {
		return 0
	}
	m.maxAttempts.Store(typ, info.Settings.Retry.MaxAttempts)
	return info.Settings.Retry.MaxAttempts
}
