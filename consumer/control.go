package consumer

import (
	"errors"
	"fmt"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// EndError is an error a handler returns (wrapped or not) to choose how
// its job's attempt ends, instead of failing it under the retry policy.
// Cancel, Snooze and RetryAt make one; the acknowledgement commits it
// (fdbq.Queue.End), even while the pipeline stops.
type EndError struct {
	// How the attempt ends: fdbq.AttemptCanceled, AttemptSnoozed or
	// AttemptFailed.
	How fdbq.AttemptEnd
	// Reason is a canceled job's error, or a failed attempt's.
	Reason string
	// After (snoozed) is how long from the acknowledgement until the job
	// runs again.
	After time.Duration
	// At (failed) is when the job runs again if it has attempts left;
	// zero: after the retry policy's backoff.
	At time.Time
	// Err is the failed attempt's error, if any (Unwrap returns it).
	Err error
}

func (e *EndError) Error() string {
	switch e.How {
	case fdbq.AttemptCanceled:
		return "canceled: " + e.Reason
	case fdbq.AttemptSnoozed:
		return fmt.Sprintf("snoozed for %v", e.After)
	}
	return e.Reason
}

func (e *EndError) Unwrap() error { return e.Err }

// ending is the fdbq.Ending the error asks for, with now the queue's
// clock at the acknowledgement.
func (e *EndError) ending(now time.Time) fdbq.Ending {
	switch e.How {
	case fdbq.AttemptCanceled:
		return fdbq.Ending{How: fdbq.AttemptCanceled, Cause: e.Reason}
	case fdbq.AttemptSnoozed:
		return fdbq.Ending{How: fdbq.AttemptSnoozed, At: now.Add(max(e.After, 0))}
	}
	return fdbq.Ending{How: fdbq.AttemptFailed, Cause: e.Reason, At: e.At}
}

// Cancel returns the error that ends the handler's job with outcome
// canceled, reason as its error, whatever attempts it has left: for work
// that cannot succeed (an order that no longer exists). Data that does
// not decode into the handler's type is canceled this way.
func Cancel(reason string) error { return &EndError{How: fdbq.AttemptCanceled, Reason: reason} }

// Snooze returns the error that gives the handler's job back to pending,
// to run again d after the acknowledgement, without counting the attempt:
// the next attempt has the same Job.Attempt, and Job.Snoozes one more.
// For work that cannot be done yet (a resource not ready, a rate limit).
func Snooze(d time.Duration) error { return &EndError{How: fdbq.AttemptSnoozed, After: d} }

// RetryAt returns the error that fails the attempt with err, as any error
// does (it counts, and the last attempt fails the job), but runs the job
// again at t instead of after the retry policy's backoff (a server's
// Retry-After, say).
func RetryAt(t time.Time, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &EndError{How: fdbq.AttemptFailed, Reason: err.Error(), At: t, Err: err}
}

// PanicError is a handler's panic, recovered: it fails the attempt, with
// the value and the stack in the job's error.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("consumer: handler panicked: %v\n%s", e.Value, e.Stack)
}
