package fdbq

import (
	"context"
	"errors"
	"fmt"

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
// the watch is missed; it never polls.
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
		if err := s.watch.Wait(ctx); err != nil {
			s.watch.Cancel()
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, ctxErr
			}
			if !errors.Is(err, kv.ErrTransactionCancelled) {
				return nil, err
			}
		}
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
