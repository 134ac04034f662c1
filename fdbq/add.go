package fdbq

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// NewJob describes a job to add.
type NewJob struct {
	Type string
	// ID is the caller's id for the job; empty: a random one is made.
	// Adding an id that exists resubmits that job (see Add).
	ID string
	// Data is the job's JSON data; empty means null.
	Data json.RawMessage
	// ScheduledAt: not before this time; zero means now.
	ScheduledAt time.Time
	// Priority: higher runs first among due jobs.
	Priority int
	// MaxAttempts overrides the type's retry policy's; 0 keeps it.
	MaxAttempts int
	// Retry overrides the type's retry policy.
	Retry *RetryPolicy
	// Key is the job's fairness key: a tenant, a customer, a group
	// ("": none). Jobs of different keys share the type by their keys'
	// weights, and a key's policy can bound its running jobs and its
	// starts (TypeSettings.Keys; see Fairness in the package doc).
	Key string
	// Unique, if set, makes the job unique among its type's jobs by its
	// data or chosen fields of it, and says what Add does when a
	// duplicate exists (see Unique jobs in the package doc).
	Unique *Unique
	// Trace is the trace context the job is added in (package tracing
	// fills it from the caller's span): the handler's span continues
	// it. One whose ids are not valid is not stored, and a tracestate
	// that is not valid or too long is cleaned (ParseTraceContext's
	// rules): a trace never costs the job.
	Trace TraceContext

	// digest is what makes the job unique (prepare).
	digest []byte
	// workflow: the job is a workflow's (its record's Workflow).
	workflow bool
}

func prepareJob(j *NewJob) error {
	if err := checkName("type name", j.Type); err != nil {
		return err
	}
	if j.ID == "" {
		// Made here, outside the transaction, so a retried transaction
		// adds the same job.
		j.ID = newToken()
	}
	if err := checkName("job id", j.ID); err != nil {
		return err
	}
	if j.Key != "" {
		if err := ValidateKey(j.Key); err != nil {
			return err
		}
	}
	if len(j.Data) > MaxDataSize {
		return errorf(ErrDataTooLarge, "data of %d bytes is larger than %d", len(j.Data), MaxDataSize)
	}
	// The record stores data as encoding/json writes it (compacted,
	// HTML-escaped), as it did when records were JSON. Taking that form
	// here makes a resubmit of the same data compare equal (and write
	// nothing), makes Add return what Get will, and makes the size check
	// count the bytes really stored.
	canon, ok := canonicalJSON(j.Data)
	if !ok {
		return errorf(ErrInvalidJob, "data of job %q is not valid JSON", j.ID)
	}
	if len(canon) > MaxDataSize {
		return errorf(ErrDataTooLarge, "data of %d bytes (%d as stored) is larger than %d", len(j.Data), len(canon), MaxDataSize)
	}
	j.Data = canon
	if j.MaxAttempts < 0 || j.MaxAttempts > maxCount {
		return errorf(ErrInvalidJob, "max attempts %d is out of range (0 to %d)", j.MaxAttempts, maxCount)
	}
	if j.Priority == math.MinInt {
		// The pending index stores -priority, which overflows here and
		// would put the lowest priority first.
		return errorf(ErrInvalidJob, "priority %d is out of range", j.Priority)
	}
	if j.Retry != nil {
		if err := j.Retry.Validate(); err != nil {
			return err
		}
	}
	j.Trace = cleanTrace(j.Trace)
	j.digest = nil
	if j.Unique != nil {
		if err := j.Unique.validate(); err != nil {
			return err
		}
		d, err := uniqueDigest(j.Data, j.Unique.Fields)
		if err != nil {
			return err
		}
		j.digest = d
	}
	return nil
}

// Add adds a job, or resubmits the job with that id if it exists (the
// semantics of couch_jobs):
//   - pending: rescheduled to ScheduledAt (with no ScheduledAt it keeps its
//     time and its place in the queue) and its data replaced; nothing is
//     written when nothing changes;
//   - running: flagged; when its worker finishes, it goes back to pending
//     at the new time instead of finishing (its data is not changed);
//   - finished: added again as a new pending job with the new data.
func (q *Queue) Add(ctx context.Context, tr kv.Transactor, j NewJob) (*Job, error) {
	jobs, err := q.AddBatch(ctx, tr, []NewJob{j})
	if err != nil {
		return nil, err
	}
	return jobs[0], nil
}

// AddBatch adds many jobs in one transaction: all or none. The batch must
// fit FoundationDB's limits (10 MB per transaction); a batch too large
// fails with kv.ErrTransactionTooLarge and adds nothing.
func (q *Queue) AddBatch(ctx context.Context, tr kv.Transactor, jobs []NewJob) ([]*Job, error) {
	prepared := make([]NewJob, len(jobs))
	for i, j := range jobs {
		if err := prepareJob(&j); err != nil {
			return nil, err
		}
		prepared[i] = j
	}
	// Made outside the transaction and stored in every record the call
	// writes: a retry after a commit_unknown_result whose commit applied
	// finds it and writes nothing. Without it the retry would act on what
	// happened since (a worker accepted or finished the job) and resubmit
	// or re-add the job, which would then run twice.
	token := newToken()
	return kv.Transact(ctx, tr, func(tx kv.Tx) ([]*Job, error) {
		now := q.nowMs()
		settings := map[string]*TypeSettings{}
		// Jobs this attempt already wrote: a repeated id in the batch finds
		// the token from its first occurrence, which is not a retry.
		written := map[[2]string]bool{}
		marked := map[string]*zoneMarks{}
		out := make([]*Job, len(prepared))
		for i, j := range prepared {
			ts := settings[j.Type]
			if ts == nil {
				s, err := q.settings(tx, j.Type)
				if err != nil {
					return nil, err
				}
				ts = &s
				settings[j.Type] = ts
			}
			k := [2]string{j.Type, j.ID}
			if marked[j.Type] == nil {
				marked[j.Type] = &zoneMarks{}
			}
			if j.Unique != nil {
				job, err := q.addUnique(tx, j, ts, marked[j.Type], now, token, written)
				if err != nil {
					return nil, err
				}
				out[i] = job
				continue
			}
			job, err := q.add(tx, j, ts, marked[j.Type], now, token, written[k])
			if err != nil {
				return nil, err
			}
			written[k] = true
			out[i] = job
		}
		return out, nil
	})
}

// add adds or resubmits one job for the AddBatch call token; again says
// that this attempt already wrote the job earlier in the batch.
func (q *Queue) add(tx kv.Tx, j NewJob, s *TypeSettings, marked *zoneMarks, now int64, token string, again bool) (*Job, error) {
	sched := toMs(j.ScheduledAt)
	if sched == 0 {
		sched = now
	}
	old, err := q.load(tx, j.Type, j.ID)
	if err != nil {
		return nil, err
	}
	if old != nil && !again && old.LastAdd == token {
		// An earlier attempt of this call committed (its result was
		// unknown): the add is done, whatever happened to the job since.
		return old.job(j.Type, j.ID), nil
	}
	unique := j.digest
	if unique == nil && old != nil {
		unique = old.Unique
	}
	if old != nil && len(old.Unique) > 0 && !bytes.Equal(old.Unique, unique) {
		if err := q.releaseUnique(tx, j.Type, j.ID, old.Unique); err != nil {
			return nil, err
		}
	}
	if old == nil || old.State == Finished {
		rec := &record{
			State:       Pending,
			Data:        j.Data,
			Priority:    j.Priority,
			MaxAttempts: j.MaxAttempts,
			Retry:       j.Retry,
			LastAdd:     token,
			AddedAt:     now,
			ScheduledAt: sched,
			Key:         j.Key,
			Shard:       shardOf(j.ID, s.zonesOf(j.Key)),
			Unique:      unique,
			Workflow:    j.workflow || old != nil && old.Workflow,
			Trace:       j.Trace,
			marked:      marked,
		}
		if err := q.put(tx, j.Type, j.ID, old, rec); err != nil {
			return nil, err
		}
		return rec.job(j.Type, j.ID), nil
	}
	rec := *old
	rec.Unique = unique
	if rec.Trace.IsZero() && !j.Trace.IsZero() {
		// A job keeps the trace it was first added in; one added with
		// none takes the first it is given.
		rec.Trace = j.Trace
	}
	switch old.State {
	case Pending:
		if j.ScheduledAt.IsZero() {
			// No new time: the job keeps its place in the queue
			// (couch_jobs keeps the time it was given), so a periodic
			// re-add neither rewrites it nor sends it to the back.
			sched = old.ScheduledAt
		}
		rec.ScheduledAt, rec.Data, rec.Priority = sched, j.Data, j.Priority
		rec.MaxAttempts, rec.Retry = j.MaxAttempts, j.Retry
		if j.Key != old.Key {
			rec.Key, rec.Shard = j.Key, shardOf(j.ID, s.zonesOf(j.Key))
		}
		if rec.ScheduledAt == old.ScheduledAt && bytes.Equal(rec.Data, old.Data) && rec.Priority == old.Priority &&
			rec.MaxAttempts == old.MaxAttempts && samePolicy(rec.Retry, old.Retry) && rec.Key == old.Key &&
			bytes.Equal(rec.Unique, old.Unique) && rec.Trace == old.Trace {
			return old.job(j.Type, j.ID), nil // couch_jobs: a resubmit that changes nothing writes nothing
		}
	case Running:
		if old.Resubmit && old.ResubmitAt == sched && bytes.Equal(rec.Unique, old.Unique) && rec.Trace == old.Trace {
			return old.job(j.Type, j.ID), nil
		}
		rec.Resubmit, rec.ResubmitAt = true, sched
	}
	rec.LastAdd, rec.marked = token, marked
	if rec.Error != "" {
		// New data may leave less room for the error of an earlier
		// attempt, which is jobstage's own text: cut it, not the add.
		rec.setError(rec.Error)
	}
	if err := q.put(tx, j.Type, j.ID, old, &rec); err != nil {
		return nil, err
	}
	return rec.job(j.Type, j.ID), nil
}

func samePolicy(a, b *RetryPolicy) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
