package fdbq

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jobstage/jobstage/kv"
)

// holding loads the job of a lease and checks that the lease's lock still
// holds it. exit names the transition the caller makes; when the record
// shows that this very lease already made it (an earlier attempt whose
// commit reported an unknown result did commit), done is true and the
// caller must write nothing: that makes Finish, Fail and Resubmit
// idempotent under commit_unknown_result.
func (q *Queue) holding(tx kv.Tx, l *Lease, exit string) (rec *record, done bool, err error) {
	rec, err = q.load(tx, l.Type, l.ID)
	if err != nil {
		return nil, false, err
	}
	if rec == nil {
		return nil, false, errorf(ErrHalt, "%s/%s was removed", l.Type, l.ID)
	}
	if rec.State == Running && rec.Lock == l.Lock {
		return rec, false, nil
	}
	if exit != "" && rec.LastLock == l.Lock+":"+exit {
		return rec, true, nil
	}
	return nil, false, errorf(ErrHalt, "%s/%s is %s under another lock", l.Type, l.ID, describe(rec))
}

// HeartbeatOptions carry what a worker reports with a heartbeat.
type HeartbeatOptions struct {
	Data     json.RawMessage // replaces the job's data when set
	Progress json.RawMessage // replaces the job's progress when set
}

// Heartbeat renews the lease: the activity monitor leaves the job alone for
// another activity timeout. It fails with ErrHalt when the lock is gone
// (recycled, canceled, removed). Run it inside the worker's own
// transaction to make the worker's writes conditional on still holding the
// job.
func (q *Queue) Heartbeat(ctx context.Context, tr kv.Transactor, l *Lease, o HeartbeatOptions) error {
	data, ok := canonicalJSON(o.Data)
	if !ok {
		return errorf(ErrInvalidJob, "heartbeat data is not valid JSON")
	}
	progress, ok := canonicalJSON(o.Progress)
	if !ok {
		return errorf(ErrInvalidJob, "heartbeat progress is not valid JSON")
	}
	return tr.Transact(ctx, func(tx kv.Tx) error {
		rec, _, err := q.holding(tx, l, "")
		if err != nil {
			return err
		}
		s, err := q.settings(tx, l.Type)
		if err != nil {
			return err
		}
		now := q.nowMs()
		next := *rec
		next.HeartbeatAt = now
		next.ExpiresAt = now + s.ActivityTimeout.Milliseconds()
		next.renew = true
		if len(data) > 0 {
			next.Data = data
		}
		if len(progress) > 0 {
			next.Progress = progress
		}
		return q.put(tx, l.Type, l.ID, rec, &next)
	})
}

// AttemptEnd names how a worker ends an attempt (see End).
type AttemptEnd int

const (
	// AttemptSucceeded finishes the job with its result.
	AttemptSucceeded AttemptEnd = iota
	// AttemptFailed counts a failed attempt: the job runs again after the
	// retry policy's backoff (or at Ending.At), or finishes with outcome
	// failed when it has used its attempts.
	AttemptFailed
	// AttemptCanceled finishes the job with outcome canceled, whatever
	// attempts it has left: its work cannot succeed (its data does not
	// decode, it asks for something that does not exist).
	AttemptCanceled
	// AttemptSnoozed gives the job back to pending, to run at Ending.At
	// (zero: now), without counting the attempt; Job.Snoozes counts it
	// instead. A worker snoozes a job it cannot do yet.
	AttemptSnoozed
)

func (a AttemptEnd) String() string {
	switch a {
	case AttemptSucceeded:
		return "succeeded"
	case AttemptFailed:
		return "failed"
	case AttemptCanceled:
		return "canceled"
	case AttemptSnoozed:
		return "snoozed"
	}
	return fmt.Sprintf("AttemptEnd(%d)", int(a))
}

// exit is the name End records with the lock that ended an attempt this
// way (record.LastLock), so that a call sent again is known as done.
func (a AttemptEnd) exit() string {
	switch a {
	case AttemptSucceeded:
		return "finish"
	case AttemptCanceled:
		return "cancel"
	case AttemptSnoozed:
		return "resubmit"
	}
	return "fail"
}

// Ending is how an attempt ends, as a worker tells End.
type Ending struct {
	How AttemptEnd
	// Result is a succeeded job's result (JSON, may be empty).
	Result json.RawMessage
	// Cause is a failed or canceled attempt's error, stored as the job's
	// error, its end kept in the room the job's data, result and progress
	// leave under MaxDataSize, so that a job can always be failed.
	Cause string
	// At is when a snoozed job runs again (zero: now), or a failed one
	// with attempts left (zero: after the retry policy's backoff).
	At time.Time
}

// Ended is what End did to the job, read in End's transaction: what the
// job's state says, so callers (metrics, the HTTP API) need not derive it
// again. It holds only if the transaction commits.
type Ended struct {
	// State is the job's state after the call: pending (it runs again, at
	// At) or finished (with Outcome).
	State   State
	Outcome Outcome
	At      time.Time
	// Attempts is the job's count of attempts after the call.
	Attempts int
	// Retried: the attempt failed and the job runs again.
	Retried bool
	// Replayed: this lease had ended the attempt this way already (the
	// call was sent again after a commit whose result was unknown, or by
	// a worker that did not hear the answer), so nothing was written; the
	// fields say what the job is now.
	Replayed bool
}

func ended(rec *record, how AttemptEnd, replayed bool) Ended {
	e := Ended{State: rec.State, Outcome: rec.Outcome, Attempts: rec.Attempts, Replayed: replayed}
	if rec.State != Finished {
		e.At = fromMs(rec.ScheduledAt)
		e.Retried = how == AttemptFailed
	}
	return e
}

// End ends the attempt of lease l as e says and returns what that did to
// the job. If the job was added again while it ran, it goes back to
// pending as the add asked, whatever e says. End fails with ErrHalt when
// the lock is gone; then nothing of the caller's transaction may commit,
// and returning the error from the transactional function ensures it does
// not. A result that does not fit beside the job's data and progress
// (MaxDataSize) fails with ErrDataTooLarge and leaves the job running:
// the result is the caller's, and cutting it would store something else.
// Fail the job instead, saying why.
func (q *Queue) End(ctx context.Context, tr kv.Transactor, l *Lease, e Ending) (Ended, error) {
	if e.How < AttemptSucceeded || e.How > AttemptSnoozed {
		return Ended{}, errorf(ErrInvalidJob, "unknown way to end an attempt: %v", e.How)
	}
	result, ok := canonicalJSON(e.Result)
	if !ok {
		return Ended{}, errorf(ErrInvalidJob, "result of %s/%s is not valid JSON", l.Type, l.ID)
	}
	var out Ended
	err := tr.Transact(ctx, func(tx kv.Tx) error {
		rec, done, err := q.holding(tx, l, e.How.exit())
		if err != nil {
			return err
		}
		if done {
			out = ended(rec, e.How, true)
			return nil
		}
		now := q.nowMs()
		next := *rec
		next.LastLock = l.Lock + ":" + e.How.exit()
		switch e.How {
		case AttemptSucceeded:
			next.Result = result
			if !next.resubmitted() {
				next.finish(Succeeded, now)
			}
		case AttemptFailed:
			s, err := q.settings(tx, l.Type)
			if err != nil {
				return err
			}
			next.failAttempt(e.Cause, now)
			q.retryOrFail(&next, s)
			if at := toMs(e.At); at != 0 && next.State == Pending && !rec.Resubmit {
				next.ScheduledAt = at
			}
			next.attemptEnd, next.attemptEndAt = histRetried, now
		case AttemptCanceled:
			next.failAttempt(e.Cause, now)
			if !next.resubmitted() {
				next.finish(Canceled, now)
			}
		case AttemptSnoozed:
			sched := toMs(e.At)
			if sched == 0 {
				sched = now
			}
			next.toPending(sched)
			next.Attempts = max(rec.Attempts-1, 0)
			// A job snoozed for ever stops counting rather than write
			// a count its record cannot read back.
			next.Snoozes = min(rec.Snoozes+1, maxCount)
		}
		if err := q.put(tx, l.Type, l.ID, rec, &next); err != nil {
			return err
		}
		out = ended(&next, e.How, false)
		return nil
	})
	if err != nil {
		return Ended{}, err
	}
	return out, nil
}

// Finish ends the job successfully with result (JSON, may be empty): End
// with AttemptSucceeded.
func (q *Queue) Finish(ctx context.Context, tr kv.Transactor, l *Lease, result json.RawMessage) error {
	_, err := q.End(ctx, tr, l, Ending{How: AttemptSucceeded, Result: result})
	return err
}

// Fail records a failed attempt with cause as the job's error: End with
// AttemptFailed. The job runs again after the retry policy's backoff, or
// finishes with outcome failed when it has used its attempts; End says
// which.
func (q *Queue) Fail(ctx context.Context, tr kv.Transactor, l *Lease, cause string) error {
	_, err := q.End(ctx, tr, l, Ending{How: AttemptFailed, Cause: cause})
	return err
}

// resubmitted moves a running record that was added again while it ran
// to pending, as the add asked (its attempts start again), and reports
// whether it did.
func (r *record) resubmitted() bool {
	if !r.Resubmit {
		return false
	}
	r.toPending(r.ResubmitAt)
	r.Attempts = 0
	return true
}

// retryOrFail moves a running record whose attempt failed to pending after
// its backoff, or to finished/failed after its last attempt.
func (q *Queue) retryOrFail(r *record, s TypeSettings) {
	now := q.nowMs()
	policy := s.Retry
	if r.Retry != nil {
		policy = *r.Retry
	}
	maxAttempts := policy.MaxAttempts
	if r.MaxAttempts > 0 {
		maxAttempts = r.MaxAttempts
	}
	switch {
	case r.resubmitted():
	case r.Attempts < maxAttempts:
		r.toPending(now + policy.Delay(r.Attempts).Milliseconds())
	default:
		r.finish(Failed, now)
	}
}

// Resubmit gives the job back to pending, to run at `at` (zero: now),
// without counting this attempt; the lock is released: End with
// AttemptSnoozed. Use it to snooze a job the worker cannot do yet.
func (q *Queue) Resubmit(ctx context.Context, tr kv.Transactor, l *Lease, at time.Time) error {
	_, err := q.End(ctx, tr, l, Ending{How: AttemptSnoozed, At: at})
	return err
}

// Release hands accepted jobs that never started back to pending at once,
// without counting the attempt (a stopping pipeline does this with its
// buffered jobs, instead of leaving them to the activity monitor).
func (q *Queue) Release(ctx context.Context, tr kv.Transactor, leases []*Lease) error {
	return tr.Transact(ctx, func(tx kv.Tx) error {
		for _, l := range leases {
			rec, done, err := q.holding(tx, l, "resubmit")
			if err != nil {
				if isHalt(err) {
					continue // someone else has it now; nothing to give back
				}
				return err
			}
			if done {
				continue
			}
			next := *rec
			next.LastLock = l.Lock + ":resubmit"
			// Added again while held, it goes where the add asked, as it
			// would after Finish or Fail.
			if !next.resubmitted() {
				next.toPending(rec.ScheduledAt)
				next.Attempts = max(rec.Attempts-1, 0)
			}
			if err := q.put(tx, l.Type, l.ID, rec, &next); err != nil {
				return err
			}
		}
		return nil
	})
}

// maxErrorLen bounds a job's error whatever room its record has left.
const maxErrorLen = 16 << 10

// truncatedMark begins an error that was cut.
const truncatedMark = "…"

// setError stores msg as the record's error, cut to fit. The error is what
// jobstage adds to a record (a worker's cause, the monitor's timeout), not
// the caller's data, so it gets the room data, result and progress leave
// under MaxDataSize, down to none: failing the transition instead would
// leave a job at the limit running for good, its worker unable to fail it
// and the monitor unable to take it back.
func (r *record) setError(msg string) {
	room := MaxDataSize - len(r.Data) - len(r.Result) - len(r.Progress)
	r.Error = truncateError(msg, min(room, maxErrorLen))
}

// MaxErrorHistory bounds the errors of failed attempts a job keeps
// (Job.Errors); MaxHistoryErrorSize bounds each (its end is kept).
const (
	MaxErrorHistory     = 10
	MaxHistoryErrorSize = 1 << 10
)

// AttemptError is the error of one failed attempt of a job.
type AttemptError struct {
	Attempt int       // the attempt's number (1 for the first; a requeue starts again at 1)
	At      time.Time // when it ended, by the clock of the process that ended it
	Error   string
}

// attemptError is an AttemptError as a record holds it.
type attemptError struct {
	attempt int
	at      int64 // Unix ms
	err     string
}

// historyEntryOverhead is what an entry of the history takes in the
// record besides its text, at most: attempt, time and length varints.
const historyEntryOverhead = 3 * binary.MaxVarintLen64

// failAttempt stores msg as the error of the attempt that ended at at (ms)
// and adds it to the history, dropping the oldest entry past
// MaxErrorHistory.
func (r *record) failAttempt(msg string, at int64) {
	r.setError(msg)
	if len(r.Errors) >= MaxErrorHistory {
		r.Errors = slices.Clone(r.Errors[len(r.Errors)-MaxErrorHistory+1:])
	} else {
		r.Errors = slices.Clone(r.Errors)
	}
	r.Errors = append(r.Errors, attemptError{attempt: r.Attempts, at: at, err: truncateError(msg, MaxHistoryErrorSize)})
}

// errorsThatFit is how many of the newest history entries the record can
// store: they take the room data, result, progress and the last error
// leave under MaxDataSize, and give way to them.
func (r *record) errorsThatFit() []attemptError {
	room := MaxDataSize - len(r.Data) - len(r.Result) - len(r.Progress) - len(r.Error)
	n := 0
	for i := len(r.Errors) - 1; i >= 0 && n < MaxErrorHistory; i-- {
		room -= len(r.Errors[i].err) + historyEntryOverhead
		if room < 0 {
			break
		}
		n++
	}
	return r.Errors[len(r.Errors)-n:]
}

// truncateError returns s as valid UTF-8 (a cause may carry any bytes) in
// at most limit bytes: a longer one keeps its end (a stack's tail says
// most) after truncatedMark, cut on a character boundary; with no room
// for more than the mark, nothing.
func truncateError(s string, limit int) string {
	cut := false
	if len(s) > limit {
		// Only the end can be kept, so only the end is made valid, not
		// all of a cause that may run to megabytes.
		i := len(s) - max(limit, 0)
		for n := 0; n < utf8.UTFMax-1 && i < len(s) && !utf8.RuneStart(s[i]); n++ {
			i++
		}
		s, cut = s[i:], true
	}
	s = strings.ToValidUTF8(s, "\uFFFD") // may lengthen s
	if !cut && len(s) <= limit {
		return s
	}
	keep := limit - len(truncatedMark)
	if keep <= 0 {
		return ""
	}
	if len(s) > keep {
		i := len(s) - keep
		for i < len(s) && !utf8.RuneStart(s[i]) {
			i++
		}
		s = s[i:]
	}
	return truncatedMark + s
}
