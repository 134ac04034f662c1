package fdbq

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobstage/jobstage/kv"
)

// Remove deletes a job in any state. A running job's worker gets ErrHalt
// at its next heartbeat or finish; subscribers learn ErrNotFound.
//
// A job whose record does not decode (ErrCorrupt) is removed too, with the
// index entry that points at it and its state's count, so that an operator
// can get rid of it. The entry's key is made from the record's times when
// they can still be read (format 1 stores them before its text and data);
// otherwise Remove looks for the entry through the type's pending, running
// and finished indexes first, in read-only transactions of at most
// locateBatch entries each, which takes time in proportion to the type's
// jobs. A record no entry points at is cleared alone.
func (q *Queue) Remove(ctx context.Context, tr kv.Transactor, typ, id string) error {
	if err := checkJobRef(typ, id); err != nil {
		return err
	}
	var loc *located
	for range maxRemoveRounds {
		var unfound []byte
		err := tr.Transact(ctx, func(tx kv.Tx) error {
			unfound = nil
			b, err := tx.Get(q.k.job(typ, id))
			if err != nil {
				return err
			}
			if b == nil {
				return errorf(ErrNotFound, "%s/%s", typ, id)
			}
			rec, err := decodeStored(b, typ, id)
			if err == nil {
				return q.drop(tx, typ, id, rec)
			}
			done, err := q.dropUnreadable(tx, typ, id, b, loc)
			if err == nil && !done {
				unfound = b
			}
			return err
		})
		if err != nil || unfound == nil {
			return err
		}
		if loc, err = q.locate(ctx, typ, id, unfound); err != nil {
			return err
		}
	}
	return errorf(ErrCorrupt, "%s/%s: its record changed at every attempt to remove it", typ, id)
}

// Cancel finishes a pending or running job with outcome canceled. A running
// job's lock is gone at once: its worker gets ErrHalt at its next heartbeat
// or finish. Canceling a finished job fails with ErrWrongState.
func (q *Queue) Cancel(ctx context.Context, tr kv.Transactor, typ, id string) error {
	return q.withJob(ctx, tr, "cancel", typ, id, func(tx kv.Tx, rec *record) error {
		if rec.State == Finished {
			return errorf(ErrWrongState, "%s/%s is already finished (%s)", typ, id, rec.Outcome)
		}
		next := *rec
		if rec.State == Running {
			next.LastLock = rec.Lock + ":cancel"
		}
		next.finish(Canceled, q.nowMs())
		return q.put(tx, typ, id, rec, &next)
	})
}

// Requeue makes a job that finished failed or canceled pending again, now,
// with its attempts reset (EctoJob's requeue). Other states fail with
// ErrWrongState.
func (q *Queue) Requeue(ctx context.Context, tr kv.Transactor, typ, id string) error {
	return q.withJob(ctx, tr, "requeue", typ, id, func(tx kv.Tx, rec *record) error {
		if rec.State != Finished || rec.Outcome == Succeeded {
			return errorf(ErrWrongState, "only failed or canceled jobs can be requeued; %s/%s is %s", typ, id, describe(rec))
		}
		next := *rec
		next.toPending(q.nowMs())
		next.Attempts = 0
		return q.put(tx, typ, id, rec, &next)
	})
}

func describe(r *record) string {
	if r.State == Finished {
		return string(r.State) + " (" + string(r.Outcome) + ")"
	}
	return string(r.State)
}

// finish moves the record to finished with outcome o.
func (r *record) finish(o Outcome, now int64) {
	r.State, r.Outcome, r.FinishedAt = Finished, o, now
	r.Lock, r.ExpiresAt, r.Resubmit, r.ResubmitAt = "", 0, false, 0
}

// toPending moves the record to pending at sched.
func (r *record) toPending(sched int64) {
	r.State, r.Outcome, r.ScheduledAt, r.FinishedAt = Pending, "", sched, 0
	r.Lock, r.ExpiresAt, r.Resubmit, r.ResubmitAt = "", 0, false, 0
}

// checkJobRef validates a type name and job id given by a caller to name
// a job that may exist (see ValidateTypeName and ValidateLookupID). A
// lookup of a name that breaks the rules is refused as its creation would
// be, before the store is read; a job an earlier version stored under an
// id ValidateID now refuses is named all the same.
func checkJobRef(typ, id string) error {
	if err := checkName("type name", typ); err != nil {
		return err
	}
	return ValidateLookupID(id)
}

// loadExisting is load for a job that must exist: ErrNotFound otherwise.
func (q *Queue) loadExisting(tx kv.ReadTx, typ, id string) (*record, error) {
	rec, err := q.load(tx, typ, id)
	if err == nil && rec == nil {
		err = errorf(ErrNotFound, "%s/%s", typ, id)
	}
	return rec, err
}

// withJob runs fn in a transaction on tr with the job's record, after
// checking the type name and id; a missing job is ErrNotFound, one whose
// record does not decode ErrCorrupt, saying that op cannot be done and
// that the job can be removed.
func (q *Queue) withJob(ctx context.Context, tr kv.Transactor, op, typ, id string, fn func(tx kv.Tx, rec *record) error) error {
	if err := checkJobRef(typ, id); err != nil {
		return err
	}
	return tr.Transact(ctx, func(tx kv.Tx) error {
		rec, err := q.loadExisting(tx, typ, id)
		var fe *Error
		if errors.As(err, &fe) && fe.Err == ErrCorrupt {
			return &Error{Err: ErrCorrupt, Detail: fmt.Sprintf("%s (cannot %s it; removing the job is all that can be done with it)", fe.Detail, op), Cause: fe.Cause}
		}
		if err != nil {
			return err
		}
		return fn(tx, rec)
	})
}
