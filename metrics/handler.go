package metrics

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/pipeline"
)

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
// its duration and outcome (consumer.AttemptOutcome;
// jobstage_job_run_duration_seconds, jobstage_jobs_finished_total) and the
// handlers running (jobstage_handlers_running). A panic in the handler
// becomes the attempt's error (a consumer.PanicError), as consumer.Recover
// makes it. Give it first, so that it wraps the others. Whether a failed
// attempt's job runs again is known once the outcome commits: Ended
// counts that.
func Middleware(m *Metrics) consumer.Middleware {
	return func(next consumer.Attempt) consumer.Attempt {
		if m == nil {
			return next
		}
		return func(ctx context.Context, a *consumer.AttemptInfo) (err error) {
			running := gauge(m.running, a.Type)
			running.Inc()
			start := time.Now()
			defer func() {
				if p := recover(); p != nil {
					err = &consumer.PanicError{Value: p, Stack: debug.Stack()}
				}
				running.Dec()
				outcome := consumer.AttemptOutcome(ctx, err)
				observer(m.runtime, a.Type, outcome).Observe(time.Since(start).Seconds())
				counter(m.finished, a.Type, outcome).Inc()
			}()
			return next(ctx, a)
		}
	}
}

// Ended counts what committing a job's outcome did, as fdbq.Queue.End
// said it (pipeline.Options.OnEnded): a failed attempt whose job runs
// again is counted in jobstage_jobs_retried_total, whichever retry policy
// (the type's, the job's) or RetryAt decided it.
func (m *Metrics) Ended(e *consumer.Envelope) {
	if m == nil || e.Err() != nil {
		return
	}
	if d := e.Ended(); d.Retried && !d.Replayed {
		counter(m.retried, e.Lease.Type).Inc()
	}
}
