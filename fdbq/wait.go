package fdbq

import (
	"context"
	"errors"
	"fmt"
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
// yet, watches the type's change key — bumped by every change to a job of
// the type — in the same transaction, so no change between the read and
// the watch is missed; it never polls. A watch that fails with a
// retryable error has it read again after a backoff; one that fails
// otherwise (too_many_watches) ends it with that error.
//
// The results are in the order of ids.
func (q *Queue) Wait(ctx context.Context, typ string, ids []string, state State) ([]WaitResult, error) {
	switch state {
	case Pending, Running, Finished:
	default:
		return nil, fmt.Errorf("%w: wait: unknown state %q", ErrInvalidJob, state)
	}
	for _, id := range ids {
		if err := checkJobRef(typ, id); err != nil {
			return nil, err
		}
	}
	var rewatch watchRetry
	for {
		type snapshot struct {
			results []WaitResult
			watch   kv.Watch
		}
		s, err := kv.Transact(ctx, q.db, func(tx kv.Tx) (*snapshot, error) {
			out := &snapshot{results: make([]WaitResult, len(ids))}
			reached := true
			for i, id := range ids {
				rec, err := q.load(tx.Snapshot(), typ, id)
				if err != nil {
					return nil, err
				}
				switch {
				case rec == nil:
					out.results[i].Err = fmt.Errorf("%w: %s/%s", ErrNotFound, typ, id)
				case rec.State == state || rec.State == Finished:
					out.results[i].Job = rec.job(typ, id)
				default:
					out.results[i].Job = rec.job(typ, id)
					reached = false
				}
			}
			if !reached {
				out.watch = tx.Watch(q.k.change(typ))
			}
			return out, nil
		})
		if err != nil {
			return nil, err
		}
		if s.watch == nil {
			return s.results, nil
		}
		select {
		case <-s.watch.Ready():
		case <-ctx.Done():
			s.watch.Cancel()
			return nil, ctx.Err()
		}
		if err := rewatch.after(ctx, s.watch, nil); err != nil {
			return nil, err
		}
	}
}

// watchRetry paces the reads of a blocked call (Accept, Wait) after its
// watches failed.
type watchRetry struct{ backoff time.Duration }

// errWaitDeadline is what after answers when the call's own deadline came
// during the backoff.
var errWaitDeadline = errors.New("fdbq: wait deadline passed")

// after is what a blocked call does once its watch w is ready. Fired, the
// call reads again at once (nil). Failed with an error that means "read
// again" (retryable, or the watch cancelled under it), it reads again
// after a jittered backoff that doubles while its watches keep failing,
// so that a watch that fails on every read does not turn the wait into a
// loop of reads; errWaitDeadline when deadline (nil: none) comes first.
// Failed otherwise (too_many_watches, a closed store), the call returns
// the error: reading again would fail the same way, at once.
func (r *watchRetry) after(ctx context.Context, w kv.Watch, deadline <-chan time.Time) error {
	err := w.Wait(ctx)
	if err == nil {
		r.backoff = 0
		return nil
	}
	w.Cancel()
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, kv.ErrClosed) || !kv.IsRetryable(err) && !errors.Is(err, kv.ErrTransactionCancelled) {
		return err
	}
	r.backoff = min(max(2*r.backoff, kv.DefaultInitialBackoff), kv.DefaultMaxBackoff)
	t := time.NewTimer(r.backoff/2 + time.Duration(rand.Int64N(int64(r.backoff/2)+1)))
	defer t.Stop()
	select {
	case <-t.C:
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
