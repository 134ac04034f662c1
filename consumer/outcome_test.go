package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
)

// AttemptOutcome names what the acknowledgement commits: for each thing
// a handler returns, with the pipeline running and stopping past its
// drain deadline, the outcome it names is what the stored job shows
// (logs and metrics tell what happened to the job).
func TestAttemptOutcomeMatchesTheCommit(t *testing.T) {
	later := time.Now().Add(time.Hour)
	returns := map[string]error{
		"nil":      nil,
		"error":    errors.New("boom"),
		"cancel":   fmt.Errorf("wrapped: %w", consumer.Cancel("gone")),
		"snooze":   consumer.Snooze(time.Hour),
		"retry at": fmt.Errorf("wrapped: %w", consumer.RetryAt(later, errors.New("busy"))),
		"panic":    &consumer.PanicError{Value: "p"},
	}
	for _, stopping := range []bool{false, true} {
		for name, err := range returns {
			t.Run(fmt.Sprintf("%s/stopping=%v", name, stopping), func(t *testing.T) {
				q := newQueue(t, nil)
				l := leases(t, q, 1)[0]
				parent, stop := context.WithCancelCause(context.Background())
				defer stop(nil)
				e := consumer.NewEnvelope(parent, q, l, consumer.EnvelopeOptions{})
				e.Start()
				if stopping {
					stop(consumer.ErrStopping)
				}
				outcome := consumer.AttemptOutcome(e.Context(), err)
				e.Ack(json.RawMessage(`1`), err)
				if e.Err() != nil {
					t.Fatal(e.Err())
				}
				j := get(t, q, l.ID)
				var stored string
				switch {
				case j.Outcome == fdbq.Succeeded:
					stored = consumer.OutcomeSucceeded
				case j.Outcome == fdbq.Canceled:
					stored = consumer.OutcomeCanceled
				case j.State == fdbq.Pending && j.Snoozes == 1:
					stored = consumer.OutcomeSnoozed
				case j.State == fdbq.Pending && j.Attempts == 0:
					stored = consumer.OutcomeStopped
				case j.Attempts == 1 && j.Error != "":
					stored = consumer.OutcomeFailed
				default:
					t.Fatalf("stored job: %+v", j)
				}
				if outcome == consumer.OutcomePanicked {
					outcome = consumer.OutcomeFailed
				}
				if outcome != stored {
					t.Errorf("AttemptOutcome says %s; the job stored was %s (%s/%s, %d attempts, %d snoozes)",
						outcome, stored, j.State, j.Outcome, j.Attempts, j.Snoozes)
				}
			})
		}
	}
}
