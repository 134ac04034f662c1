package fdbq

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// WaitResult is where one waited-for job ended up.
type WaitResult struct {
	Job *Job  // nil when Err is set
	Err error // ErrNotFound: the job does not exist (or was removed)
}

// Wait blocks until every job in ids (of one type) has reached state, or
// has finished (a job that finished will not reach an earlier state), or
// does not exist, or ctx ends. It reads the jobs and, if some are not there
// yet, watches in the same transaction what changes when they change: the
// record of each job not there yet, which every change to the job
// rewrites or clears. So it wakes for those jobs alone, and no change
// between the read and the watch is missed; it never polls.
//
// The waits of one Queue share their watches: waits on one job hold one
// store watch between them, made by the first and cancelled when the last
// returns (a wait joins a watch only if it read the value the watch
// started from; see watchShare). The queue's waits hold at most
// Options.WaitWatches watches on job records (default
// DefaultWaitWatches, a tenth of FoundationDB's 10,000 a client). A wait
// whose watches would not fit, one with more than 32 jobs not there yet,
// and one whose job watch the store refused (too_many_watches) watch
// instead the type's change key, bumped by every change to a job of the
// type while some process holds an interest in it (the wait does, until
// it returns; see interests): one watch a type, shared too, which wakes
// them on changes to other jobs of the type as well. After a refusal the queue holds no more
// job watches than the store had accepted, for half a minute.
//
// A watch that fails with a retryable error has the wait read again after
// a backoff; a change-key watch the store refuses has it read again once
// the queue lets go of a watch or after a backoff, whichever comes first;
// a watch that fails otherwise (the store closed) ends it with that error.
//
// The results are in the order of ids.
func (q *Queue) Wait(ctx context.Context, typ string, ids []string, state State) ([]WaitResult, error) {
	switch state {
	case Pending, Running, Finished:
	default:
		return nil, errorf(ErrInvalidJob, "wait: unknown state %q", state)
	}
	for _, id := range ids {
		if err := checkJobRef(typ, id); err != nil {
			return nil, err
		}
	}
	var (
		rewatch watchRetry
		// held is the claim of the last read, kept until the next read
		// has its own: watches on jobs still not there carry over.
		held *watchClaim
		// watchType: the next read watches the change key, because the
		// store refused a job watch of this wait.
		watchType bool
	)
	// interest: the wait's hold on the type's change key, taken the
	// first time it has to watch that key (see interests).
	var interest *interestHold
	defer func() {
		held.release()
		interest.release()
	}()
	for {
		coarse := watchType
		watchType = false
		if interest != nil {
			if err := interest.renew(ctx); err != nil {
				return nil, err
			}
		}
		var (
			claim           *watchClaim
			stale, needHold bool
		)
		results, err := kv.Transact(ctx, q.db, func(tx kv.Tx) ([]WaitResult, error) {
			// A retry lets go of what the failed attempt claimed.
			claim.drop()
			claim, stale, needHold = nil, false, false
			results, targets, err := q.waitRead(tx, typ, ids, state)
			if err != nil || len(targets) == 0 {
				return results, err
			}
			if claim, stale, needHold, err = q.waitClaim(tx, typ, targets, coarse, interest != nil); err != nil {
				return nil, err
			}
			return results, nil
		})
		held.release()
		held = nil
		if err != nil {
			claim.drop()
			return nil, err
		}
		if needHold {
			// The wait has to watch the change key, which a change bumps
			// only while some process holds it: hold it, then read
			// again (a read after the hold sees what it would miss).
			if interest, err = q.holdInterest(ctx, typ); err != nil {
				return nil, err
			}
			watchType = coarse
			continue
		}
		if stale {
			// A job changed since this read: read again.
			continue
		}
		if claim == nil {
			return results, nil
		}
		claim.settle()
		held = claim
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if interest != nil {
			// Woken to renew its hold, the wait reads again.
			wctx, cancel = context.WithTimeout(ctx, interest.renewIn())
		}
		e, err := claim.wait(wctx)
		cancel()
		if err != nil && ctx.Err() == nil && wctx.Err() != nil {
			continue
		}
		if err != nil {
			return nil, err
		}
		if e.w == nil {
			// The wait whose transaction was to make the watch failed:
			// read again (and make it).
			continue
		}
		if watchType, err = q.waitWoken(ctx, e, &rewatch); err != nil {
			return nil, err
		}
	}
}

// waitRead is the read of one attempt of Wait, at the transaction's
// snapshot: where each job of ids is, and the records to watch of those
// not yet at state nor finished (each once, however often ids names it),
// with the values it read there.
func (q *Queue) waitRead(tx kv.Tx, typ string, ids []string, state State) ([]WaitResult, []watchTarget, error) {
	results := make([]WaitResult, len(ids))
	var targets []watchTarget
	seen := make(map[string]bool)
	for i, id := range ids {
		key := q.k.job(typ, id)
		b, err := tx.Snapshot().Get(key)
		if err != nil {
			return nil, nil, err
		}
		if b == nil {
			results[i].Err = errorf(ErrNotFound, "%s/%s", typ, id)
			continue
		}
		rec, err := decodeRecord(b, typ, id)
		if err != nil {
			return nil, nil, err
		}
		results[i].Job = rec.job(typ, id)
		if rec.State != state && rec.State != Finished && !seen[id] {
			seen[id] = true
			targets = append(targets, watchTarget{key: key, seen: digestOf(b)})
		}
	}
	return results, targets, nil
}

// waitClaim claims, in the transaction of a Wait's read, the watches that
// wake it: those of the job records in targets, or, for a coarse wait, one
// with more targets than maxJobWatchesPerWait or whose job watches do not
// fit the budget, the type's change key. The transaction's read version
// orders this read against those of the shared watches (see watchShare).
// It reports stale, with no claim, when a target changed since the read,
// and needHold, with no claim, when the wait has to watch the change key
// but holds no interest in it yet (interested).
func (q *Queue) waitClaim(tx kv.Tx, typ string, targets []watchTarget, coarse, interested bool) (claim *watchClaim, stale, needHold bool, err error) {
	ver, err := tx.ReadVersion()
	if err != nil {
		return nil, false, false, err
	}
	if !coarse && len(targets) <= maxJobWatchesPerWait {
		if claim, stale = q.watches.claim(tx, targets, ver, true); stale {
			return nil, true, false, nil
		}
	}
	if claim != nil {
		return claim, false, false, nil
	}
	if !interested {
		return nil, false, true, nil
	}
	changeKey := q.k.change(typ)
	cb, err := tx.Snapshot().Get(changeKey)
	if err != nil {
		return nil, false, false, err
	}
	claim, stale = q.watches.claim(tx, []watchTarget{{key: changeKey, seen: digestOf(cb)}}, ver, false)
	return claim, stale, false, nil
}

// waitWoken is what a Wait does once the watch e it waited on is ready,
// before it reads again. Fired, the watch resets the backoff. A job watch
// the store refused (too_many_watches) is recorded against the queue's
// budget, and the wait's next read watches the change key instead (true).
// A refused change-key watch has it wait until the queue lets go of a
// watch, or the backoff; a watch that failed otherwise has it back off, or
// end with the error (see watchRetry.failed).
func (q *Queue) waitWoken(ctx context.Context, e *sharedWatch, rewatch *watchRetry) (bool, error) {
	werr := e.w.Wait(context.Background()) // ready
	switch {
	case werr == nil:
		rewatch.backoff = 0
	case errors.Is(werr, kv.ErrTooManyWatches) && e.job:
		q.watches.refused(e)
		return true, nil
	case errors.Is(werr, kv.ErrTooManyWatches):
		if err := rewatch.pause(ctx, nil, q.watches.freedChan()); err != nil {
			return false, err
		}
	default:
		if err := rewatch.failed(ctx, werr, nil); err != nil {
			return false, err
		}
	}
	return false, nil
}

// watchRetry paces the reads of a blocked call (Accept, Wait) after its
// watches failed.
type watchRetry struct{ backoff time.Duration }

// errWaitDeadline is what after answers when the call's own deadline came
// during the backoff.
var errWaitDeadline = errors.New("fdbq: wait deadline passed")

// after is what a blocked call does once its watch w is ready. Fired, the
// call reads again at once (nil). Failed, w is cancelled and failed says
// what comes next.
func (r *watchRetry) after(ctx context.Context, w kv.Watch, deadline <-chan time.Time) error {
	err := w.Wait(ctx)
	if err == nil {
		r.backoff = 0
		return nil
	}
	w.Cancel()
	return r.failed(ctx, err, deadline)
}

// failed is what a blocked call does once its watch failed with err.
// Failed with an error that means "read again" (retryable, or the watch
// cancelled under it), it reads again after a jittered backoff that
// doubles while its watches keep failing, so that a watch that fails on
// every read does not turn the wait into a loop of reads; errWaitDeadline
// when deadline (nil: none) comes first. Failed otherwise
// (too_many_watches, a closed store), the call returns the error: reading
// again would fail the same way, at once.
func (r *watchRetry) failed(ctx context.Context, err error, deadline <-chan time.Time) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, kv.ErrClosed) || !kv.IsRetryable(err) && !errors.Is(err, kv.ErrTransactionCancelled) {
		return err
	}
	return r.pause(ctx, deadline, nil)
}

// pause waits out the next backoff, or until early is closed (nil:
// never); errWaitDeadline when deadline comes first.
func (r *watchRetry) pause(ctx context.Context, deadline <-chan time.Time, early <-chan struct{}) error {
	r.backoff = min(max(2*r.backoff, kv.DefaultInitialBackoff), kv.DefaultMaxBackoff)
	t := time.NewTimer(r.backoff/2 + time.Duration(rand.Int64N(int64(r.backoff/2)+1)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-early:
		return nil
	case <-deadline:
		return errWaitDeadline
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WaitOne is Wait for one job; a missing job gives ErrNotFound.
func (q *Queue) WaitOne(ctx context.Context, typ, id string, state State) (*Job, error) {
	res, err := q.Wait(ctx, typ, []string{id}, state)
	if err != nil {
		return nil, err
	}
	return res[0].Job, res[0].Err
}
