package pipeline

import (
	"context"
	"encoding/json"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
)

// Stage is a producer-consumer stage between a pipeline's producers and
// its consumers. It passes demand through unchanged: a job it drops (a
// filter) is acknowledged by the stage and its demand is given back.
type Stage struct {
	run func(in <-chan *consumer.Envelope, out chan<- *consumer.Envelope, drop func())
}

// NewStage returns a stage that runs run in a goroutine of its own, from
// the stage before it (in) to the one after (out), for stages that Filter
// and Map do not express. run receives every job until in is closed, and
// returns then; out is closed after it returns. Each job it receives it
// either sends on out (a send never blocks: every channel holds all the
// demand there is) or handles itself: it acknowledges the job for every
// consumer that would have (Envelope.PendingAcks times Start then Ack) and
// calls drop once, which gives the job's demand back. A job that is
// neither sent on nor acknowledged stays accepted until the pipeline
// stops.
func NewStage(run func(in <-chan *consumer.Envelope, out chan<- *consumer.Envelope, drop func())) Stage {
	return Stage{run: run}
}

// Filter keeps the jobs for which keep returns true. A job it drops is
// finished at once (outcome succeeded, result {"filtered":true}): it was
// handled, by deciding it needs no work.
func Filter(keep func(*fdbq.Lease) bool) Stage {
	filtered := json.RawMessage(`{"filtered":true}`)
	return Stage{run: func(in <-chan *consumer.Envelope, out chan<- *consumer.Envelope, drop func()) {
		for e := range in {
			if e.Context().Err() == nil && !keep(e.Lease) {
				drop()
				acknowledgeAll(e, filtered, nil)
				continue
			}
			out <- e
		}
	}}
}

// Map transforms each job before the consumers see it: f may rewrite the
// lease's data (the consumers decode what f leaves). An error fails the
// attempt, as a handler's error would.
func Map(f func(ctx context.Context, l *fdbq.Lease) error) Stage {
	return Stage{run: func(in <-chan *consumer.Envelope, out chan<- *consumer.Envelope, drop func()) {
		for e := range in {
			if e.Context().Err() != nil {
				out <- e // released or halted: the consumer acknowledges it as such
				continue
			}
			if err := f(e.Context(), e.Lease); err != nil {
				drop()
				acknowledgeAll(e, nil, err)
				continue
			}
			out <- e
		}
	}}
}

// acknowledgeAll acknowledges a job for every consumer that would have.
func acknowledgeAll(e *consumer.Envelope, result json.RawMessage, err error) {
	for n := e.PendingAcks(); n > 0; n-- {
		e.Start()
		e.Ack(result, err)
	}
}
