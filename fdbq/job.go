package fdbq

import (
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// State is where a job is in its life.
type State string

// States. A pending job waits (maybe scheduled in the future); a running
// job is held by one worker under a lock; a finished job has an outcome and
// stays until retention removes it.
const (
	Pending  State = "pending"
	Running  State = "running"
	Finished State = "finished"
)

// Outcome says how a finished job ended.
type Outcome string

// Outcomes.
const (
	Succeeded Outcome = "succeeded"
	Failed    Outcome = "failed"   // its last attempt failed
	Canceled  Outcome = "canceled" // canceled by a caller
)

// Errors. Check them with errors.Is; what an error of one says beyond the
// sentinel is its *Error's Detail (errors.As).
var (
	// ErrHalt: the caller's lock on the job is gone: the job was recycled
	// by the activity monitor, canceled, removed, or finished. The worker
	// must stop; nothing it tried to commit with the lock was committed.
	ErrHalt = errors.New("fdbq: halt: the job's lock is gone")
	// ErrNotFound: no such job.
	ErrNotFound = errors.New("fdbq: job not found")
	// ErrUnknownType: the job type was never registered.
	ErrUnknownType = errors.New("fdbq: unknown job type")
	// ErrInvalidJob: bad input (id, type, data, options); the message says
	// which.
	ErrInvalidJob = errors.New("fdbq: invalid job")
	// ErrDataTooLarge: the job's data, result or progress does not fit in
	// its record (MaxDataSize). The error is cut to fit rather than
	// refused.
	ErrDataTooLarge = errors.New("fdbq: job data too large")
	// ErrWrongState: the operation does not apply to the job's state (say,
	// requeue of a pending job).
	ErrWrongState = errors.New("fdbq: job is in the wrong state")
)

// MaxDataSize bounds a job's data plus its result, error and progress: the
// job record is one store value (100,000 bytes on FoundationDB), and the
// rest of the record needs room. Data, result and progress beyond it are
// refused; the error is cut to what they leave (see the package doc).
const MaxDataSize = 90_000

// MaxIDSize bounds job ids (MaxTypeNameSize bounds type names).
const MaxIDSize = 256

// Job is a snapshot of a job, as Get and List return it.
type Job struct {
	Type    string
	ID      string
	State   State
	Outcome Outcome // set when State is Finished
	Data    json.RawMessage
	Result  json.RawMessage // what the worker returned (Succeeded)
	Error   string          // the last attempt's error (cleared when an attempt starts)
	// Errors are the errors of the last failed attempts, oldest first: at
	// most MaxErrorHistory, each cut to its last MaxHistoryErrorSize
	// bytes, and fewer when the job's data, result and progress leave
	// no room (they give way, never the job).
	Errors   []AttemptError
	Progress json.RawMessage // last progress a worker reported
	Priority int
	// Key is the job's fairness key ("": none): see Fairness in the
	// package doc.
	Key         string
	Attempts    int // attempts started (a snoozed attempt is not counted)
	MaxAttempts int // 0: the type's retry policy decides
	Snoozes     int // times a worker snoozed the job (End with AttemptSnoozed)
	// Resubmitted: the job was added again while it ran; it goes back to
	// pending when its worker finishes.
	Resubmitted bool
	AddedAt     time.Time
	ScheduledAt time.Time
	StartedAt   time.Time // of the current or last attempt
	HeartbeatAt time.Time
	FinishedAt  time.Time
	// Holder names, while the job runs, who accepted it
	// (AcceptOptions.Holder; empty when it did not say).
	Holder string
	// Added says, on a job Add returned for a NewJob with Unique, what
	// the add did: added it, found a duplicate (this job), or replaced
	// the duplicate (this job). Empty elsewhere.
	Added Added
	// Workflow and Node name the workflow the job belongs to and its
	// name there (AddWorkflow); empty for other jobs.
	Workflow, Node string
	// Trace is the trace context the job was added in (NewJob.Trace);
	// zero: none.
	Trace TraceContext
}

// record is a job as stored, in one value under the job key (codec.go
// has its encoding; the JSON tags served the records of earlier versions,
// which are still read).
type record struct {
	State       State           `json:"s"`
	Outcome     Outcome         `json:"o,omitempty"`
	Data        json.RawMessage `json:"d,omitempty"`
	Result      json.RawMessage `json:"r,omitempty"`
	Error       string          `json:"e,omitempty"`
	Progress    json.RawMessage `json:"p,omitempty"`
	Priority    int             `json:"pr,omitempty"`
	Key         string          `json:"-"`
	Shard       int             `json:"-"`
	Attempts    int             `json:"a,omitempty"`
	MaxAttempts int             `json:"ma,omitempty"`
	Snoozes     int             `json:"-"`
	Retry       *RetryPolicy    `json:"rp,omitempty"`
	Lock        string          `json:"l,omitempty"`  // running: the holder's lock
	LastLock    string          `json:"ll,omitempty"` // the lock that last left running, for idempotent retries
	LastAdd     string          `json:"la,omitempty"` // the AddBatch call that last wrote the job, for idempotent retries
	Resubmit    bool            `json:"rs,omitempty"`
	ResubmitAt  int64           `json:"rt,omitempty"`
	AddedAt     int64           `json:"ta"`
	ScheduledAt int64           `json:"ts"`
	StartedAt   int64           `json:"tst,omitempty"`
	HeartbeatAt int64           `json:"th,omitempty"`
	FinishedAt  int64           `json:"tf,omitempty"`
	ExpiresAt   int64           `json:"tx,omitempty"` // running: activity deadline by the worker's clock (shown, not trusted)
	// ActiveVersion (running) is the read version of the transaction that
	// last renewed the job's activity (Accept, Heartbeat): its activity
	// entry's key. Records of earlier versions have none (legacy).
	ActiveVersion int64 `json:"-"`
	// Unique is the digest of what makes the job unique (NewJob.Unique),
	// the key of its entry in the unique index; nil: none.
	Unique []byte `json:"-"`
	// Workflow: the job is a job of a workflow (its id is WORKFLOW:NAME).
	Workflow bool `json:"-"`
	// Trace is the trace context the job was added in; zero: none.
	Trace TraceContext `json:"-"`
	// Errors are the errors of the job's last failed attempts, oldest
	// first (see failAttempt).
	Errors []attemptError `json:"-"`

	// legacy: a running record written before activity entries were keyed
	// by version; its entry is the deadline-keyed one (tagLegacyActive).
	legacy bool
	// renew asks put for a new activity entry (Accept, Heartbeat).
	renew bool
	// stampToken, if not 0, names the stamp the caller writes itself,
	// once for every job it renews in the transaction (see putFrom).
	stampToken int64
	// marked, if set, is what this transaction has marked already
	// (AddBatch), so that put reads each zone's mark once and bumps the
	// watch key once.
	marked *zoneMarks
	// attemptEnd, if set, is how the attempt of a running record that put
	// moves to pending ended (histRetried, histRecycled), at attemptEndAt:
	// its count in the type's history.
	attemptEnd   historyKind
	attemptEndAt int64
}

// zone is the zone the job waits in when pending.
func (r *record) zone() zone { return zone{key: r.Key, shard: r.Shard} }

// activityTimeoutMs is the activity timeout, in ms, the job's last
// renewal gave it: the element of its activity entry's key.
func (r *record) activityTimeoutMs() int64 {
	return max(r.ExpiresAt-r.HeartbeatAt, 1)
}

func (r *record) job(typ, id string) *Job {
	j := &Job{
		Type:        typ,
		ID:          id,
		State:       r.State,
		Outcome:     r.Outcome,
		Data:        r.Data,
		Result:      r.Result,
		Error:       r.Error,
		Progress:    r.Progress,
		Priority:    r.Priority,
		Key:         r.Key,
		Attempts:    r.Attempts,
		MaxAttempts: r.MaxAttempts,
		Snoozes:     r.Snoozes,
		Resubmitted: r.Resubmit,
		AddedAt:     fromMs(r.AddedAt),
		ScheduledAt: fromMs(r.ScheduledAt),
		StartedAt:   fromMs(r.StartedAt),
		HeartbeatAt: fromMs(r.HeartbeatAt),
		FinishedAt:  fromMs(r.FinishedAt),
		Trace:       r.Trace,
	}
	if r.State == Running {
		j.Holder = holderOf(r.Lock)
	}
	for _, e := range r.Errors {
		j.Errors = append(j.Errors, AttemptError{Attempt: e.attempt, At: fromMs(e.at), Error: e.err})
	}
	if r.Workflow {
		j.Workflow, j.Node, _ = strings.Cut(id, ":")
	}
	return j
}

// canonicalJSON validates raw and returns it compacted and HTML-escaped, as
// encoding/json writes it; empty stays empty.
func canonicalJSON(raw json.RawMessage) (json.RawMessage, bool) {
	if len(raw) == 0 {
		return raw, true
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, false
	}
	return b, true
}

func toMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMs(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func isHalt(err error) bool { return errors.Is(err, ErrHalt) }
