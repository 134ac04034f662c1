package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// Job is a job as the API shows it. Times that are not set are omitted.
type Job struct {
	Type        string          `json:"type"`
	ID          string          `json:"id"`
	State       fdbq.State      `json:"state"`
	Outcome     fdbq.Outcome    `json:"outcome,omitempty"`
	Data        json.RawMessage `json:"data"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       string          `json:"error,omitempty"`
	Progress    json.RawMessage `json:"progress,omitempty"`
	Priority    int             `json:"priority"`
	Key         string          `json:"key,omitempty"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"max_attempts"`
	// Resubmitted: the job was added again while it ran; it goes back to
	// pending when its worker finishes.
	Resubmitted bool      `json:"resubmitted,omitempty"`
	AddedAt     time.Time `json:"added_at,omitzero"`
	ScheduledAt time.Time `json:"scheduled_at,omitzero"`
	StartedAt   time.Time `json:"started_at,omitzero"`
	HeartbeatAt time.Time `json:"heartbeat_at,omitzero"`
	FinishedAt  time.Time `json:"finished_at,omitzero"`
	// Holder names, while the job runs, who accepted it: a pipeline's
	// host and pid, or what an HTTP worker's accept named.
	Holder string `json:"holder,omitempty"`
	// Added, in the answer to an enqueue of a job with unique, says what
	// the enqueue did: "added", "duplicate" (this job was there, nothing
	// was written) or "replaced" (this job was there and was added again
	// with the new data).
	Added fdbq.Added `json:"added,omitempty"`
	// Workflow and Node name the workflow of a workflow's job and its
	// name there.
	Workflow string `json:"workflow,omitempty"`
	Node     string `json:"node,omitempty"`
	// TraceID is the id of the trace the job was enqueued in (W3C, 32
	// lower-case hex digits): its handler's spans are in that trace.
	TraceID string `json:"trace_id,omitempty"`
	// Errors are the errors of the job's last failed attempts, oldest
	// first (at most 10, each its last 1 KiB; see fdbq.Job.Errors).
	Errors []AttemptError `json:"errors,omitempty"`
}

// AttemptError is the error of one failed attempt.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// Lease is a job accepted by an external worker, with the lock it must
// send back with every heartbeat, finish and fail.
type Lease struct {
	Job
	Lock string `json:"lock"`
}

// NewJob is one job to enqueue: the body of POST /v1/types/{type}/jobs
// (or one element of a batch).
type NewJob struct {
	// ID is the caller's id; empty: the server makes one. Enqueuing an id
	// that exists resubmits that job (see fdbq.Queue.Add).
	ID string `json:"id,omitempty"`
	// Data is the job's JSON data; empty means null.
	Data json.RawMessage `json:"data,omitempty"`
	// ScheduledAt: not before this time; zero means now.
	ScheduledAt time.Time `json:"scheduled_at,omitzero"`
	// Priority: higher runs first among due jobs.
	Priority int `json:"priority,omitempty"`
	// Key is the job's fairness key (fdbq.NewJob.Key); empty: none.
	Key string `json:"key,omitempty"`
	// MaxAttempts overrides the type's retry policy's; 0 keeps it.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Unique makes the job unique among its type's jobs (fdbq.Unique).
	Unique *Unique `json:"unique,omitempty"`
}

// Unique is fdbq.Unique with names for the states and the policy, and
// the window as a duration string.
type Unique struct {
	// Fields are the top-level fields of the data (an object) that make
	// the job unique; empty: the whole data.
	Fields []string `json:"fields,omitempty"`
	// States in which an existing job counts: pending, running,
	// succeeded, failed, canceled, or finished for the last three;
	// empty: pending, running, succeeded.
	States []string `json:"states,omitempty"`
	// Window is how long a finished job counts after it finished; empty
	// or "0s": as long as it is kept.
	Window Duration `json:"window,omitempty"`
	// OnDuplicate: "return" (the default), "replace" or "refuse" (409
	// duplicate, naming the job in job_id).
	OnDuplicate string `json:"on_duplicate,omitempty"`
}

// Duration is a time.Duration that travels in JSON as a Go duration
// string ("30s", "1h30m").
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// RetryPolicy is fdbq.RetryPolicy with durations as strings.
type RetryPolicy struct {
	MaxAttempts int          `json:"max_attempts"`
	Backoff     fdbq.Backoff `json:"backoff"`
	Base        Duration     `json:"base"`
	Max         Duration     `json:"max"`
}

// TypeSettings is fdbq.TypeSettings with durations as strings: the body of
// PUT /v1/types/{type} and the settings in a TypeInfo.
type TypeSettings struct {
	ActivityTimeout Duration    `json:"activity_timeout"`
	Retry           RetryPolicy `json:"retry"`
	Paused          bool        `json:"paused"`
	Retention       Duration    `json:"retention"`
	// Zones, MaxRunning, Keys and KeyDefault are fdbq's fairness
	// settings. Keys travels as {} when it is empty, so that a PUT of a
	// TypeSettings replaces every field.
	Zones      int                  `json:"zones"`
	MaxRunning int                  `json:"max_running"`
	Keys       map[string]KeyPolicy `json:"keys"`
	KeyDefault KeyPolicy            `json:"key_default"`
}

// MarshalJSON writes s with a nil Keys as {}.
func (s TypeSettings) MarshalJSON() ([]byte, error) {
	type plain TypeSettings
	if s.Keys == nil {
		s.Keys = map[string]KeyPolicy{}
	}
	return json.Marshal(plain(s))
}

// KeyPolicy is fdbq.KeyPolicy with the period as a string.
type KeyPolicy struct {
	Weight     int      `json:"weight"`
	MaxRunning int      `json:"max_running"`
	MaxStarts  int      `json:"max_starts"`
	Per        Duration `json:"per"`
	Zones      int      `json:"zones"`
}

// TypeInfo is a registered type, its settings and its job counts.
type TypeInfo struct {
	Name     string       `json:"name"`
	Settings TypeSettings `json:"settings"`
	Pending  int64        `json:"pending"`
	Running  int64        `json:"running"`
	Finished int64        `json:"finished"`
	// Error, in GET /v1/types only, says why the type's settings cannot
	// be read (they are then zero; PUT /v1/types/{type} replaces them),
	// or, with Name empty, why a key of the registry names no type.
	Error string `json:"error,omitempty"`
}

// Page is one page of GET /v1/types/{type}/jobs.
type Page struct {
	Jobs []*Job `json:"jobs"`
	// Unreadable are the page's index entries whose job could not be read
	// (its record does not decode, or the entry's key is not one jobstage
	// writes); the page lists the other jobs.
	Unreadable []Unreadable `json:"unreadable,omitempty"`
	// Next is the cursor of the next page; empty on the last page.
	Next string `json:"next,omitempty"`
}

// Unreadable is an index entry whose job a listing could not read. A job
// with an ID can be deleted (DELETE /v1/types/{type}/jobs/{id}); the other
// operations on it answer 500 corrupt.
type Unreadable struct {
	// ID is the job's id; empty when the key names none.
	ID string `json:"id,omitempty"`
	// Key is the entry's key in the store, printable: bytes other than
	// printable ASCII as \xNN, and a backslash as \\ (as fdbcli prints
	// keys).
	Key string `json:"key"`
	// Error says what is wrong.
	Error string `json:"error"`
}

// ListOptions select a page of jobs: State (default pending), Limit
// (default 100, at most 1000) and the Cursor of the previous Page, and
// filter it (fdbq.ListOptions says exactly how): Key, the jobs' fairness
// key; IDPrefix, how their ids begin; Since and Until (zero: no bound),
// Since <= t < Until of the state's time t (pending: scheduled_at,
// running: started_at, finished: finished_at). A filtered page may be
// short, or empty, with Next set; a cursor goes with the filters it was
// made with.
type ListOptions struct {
	State        fdbq.State
	Limit        int
	Cursor       string
	Key          string
	IDPrefix     string
	Since, Until time.Time
}

// AcceptRequest is the body of POST /v1/types/{type}/accept: take up to
// Max jobs (default 1, at most MaxAccept), waiting up to Wait (at most
// MaxWait) for one to be due.
type AcceptRequest struct {
	Max  int      `json:"max,omitempty"`
	Wait Duration `json:"wait,omitempty"`
	// Holder names the worker in the jobs it holds (fdbq.ValidateHolder);
	// none: "http " and the client's address.
	Holder string `json:"holder,omitempty"`
}

// HeartbeatRequest is the body of POST …/jobs/{id}/heartbeat. Data and
// Progress, when set, replace the job's.
type HeartbeatRequest struct {
	Lock     string          `json:"lock"`
	Data     json.RawMessage `json:"data,omitempty"`
	Progress json.RawMessage `json:"progress,omitempty"`
}

// FinishRequest is the body of POST …/jobs/{id}/finish.
type FinishRequest struct {
	Lock   string          `json:"lock"`
	Result json.RawMessage `json:"result,omitempty"`
}

// FailRequest is the body of POST …/jobs/{id}/fail: the attempt failed
// with Error; the type's retry policy decides whether it runs again.
type FailRequest struct {
	Lock  string `json:"lock"`
	Error string `json:"error"`
}

// APIError is an error answer of the API: the HTTP status and the body
// {"error": Code, "message": Message}. The client returns it for every
// non-2xx answer it read in full (one cut short is a *RequestError).
type APIError struct {
	Status  int    `json:"-"`
	Code    string `json:"error"`
	Message string `json:"message"`
	// JobID names the job the error is about where the message alone
	// would make a client parse it: the existing job of a duplicate.
	JobID string `json:"job_id,omitempty"`
	// RetryAfter, on a 429, is how long until the client may try again
	// (the Retry-After header, in whole seconds).
	RetryAfter time.Duration `json:"-"`
	// guess: a 401 for credentials that were sent and are wrong (a
	// secret no token has, a cookie not signed by one), which the limit
	// on failed authentications counts.
	guess bool
}

func (e *APIError) Error() string {
	return fmt.Sprintf("httpapi: %d %s: %s", e.Status, e.Code, e.Message)
}

// RequestError is a request of Client that got no answer to read: it
// could not be encoded or sent, or the answer was cut short or did not
// decode. An answer with an error status, read in full, is an *APIError
// instead.
type RequestError struct {
	Method string // the request's method
	Path   string // its path, without the query
	Stage  string // StageEncode, StageSend or StageDecode
	Err    error  // what failed: encoding/json's error, the transport's, ctx's
}

// The stages of a RequestError.
const (
	StageEncode = "encode" // the body did not encode as JSON
	StageSend   = "send"   // the request could not be made, sent, or answered
	StageDecode = "decode" // a 2xx answer's body did not decode
)

// Error says the stage, the request and the cause: "httpapi: GET
// /v1/types: dial tcp …: connection refused".
func (e *RequestError) Error() string { return "httpapi: " + e.Describe() }

// Describe is Error without the package's name, for a program that
// reports the failure in its own words (the jobstage client).
func (e *RequestError) Describe() string {
	switch e.Stage {
	case StageEncode:
		return fmt.Sprintf("encoding the %s %s body: %v", e.Method, e.Path, e.Err)
	case StageDecode:
		return fmt.Sprintf("%s %s: decoding the answer: %v", e.Method, e.Path, e.Err)
	}
	cause := e.Err
	var ue *url.Error
	if errors.As(cause, &ue) {
		// net/http's error names the method and the URL again.
		cause = ue.Err
	}
	return fmt.Sprintf("%s %s: %v", e.Method, e.Path, cause)
}

// Unwrap returns the cause.
func (e *RequestError) Unwrap() error { return e.Err }

// Error codes of APIError.Code.
const (
	CodeInvalidJSON      = "invalid_json"       // 400: the body is not JSON of the expected shape
	CodeInvalid          = "invalid"            // 400: a field or parameter has a bad value
	CodeUnauthorized     = "unauthorized"       // 401: no token, or an unknown one
	CodeForbidden        = "forbidden"          // 403: the token's role may not do this, or a non-loopback client of a server without tokens
	CodeNotFound         = "not_found"          // 404: no such job or route
	CodeUnknownType      = "unknown_type"       // 404: the job type is not registered
	CodeUnknownSchedule  = "unknown_schedule"   // 404: no periodic schedule of that name
	CodeUnknownWorkflow  = "unknown_workflow"   // 404: no workflow of that id
	CodeWorkflowExists   = "workflow_exists"    // 409: a workflow of that id was added before
	CodeMethodNotAllowed = "method_not_allowed" // 405
	CodeHalt             = "halt"               // 409: the worker's lock is gone; stop working the job
	CodeWrongState       = "wrong_state"        // 409: the operation does not apply to the job's state
	CodeDuplicate        = "duplicate"          // 409: a unique job that refuses duplicates has one (job_id names it)
	CodeTooLarge         = "too_large"          // 413: the body, or a job's data, is over the limit
	CodeTooManyTypes     = "too_many_types"     // 422: an event stream of every type, and more types than one follows
	CodeTooManyRequests  = "too_many_requests"  // 429: too many failed authentications from the client's address
	CodeNotReady         = "not_ready"          // 503: readyz
	CodeBusy             = "busy"               // 503: the server serves as many event streams as it may
	CodeInternal         = "internal"           // 500
	CodeCorrupt          = "corrupt"            // 500: what the store holds for the job or type does not decode
)

func toJob(j *fdbq.Job) *Job {
	data := j.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	return &Job{
		Type: j.Type, ID: j.ID, State: j.State, Outcome: j.Outcome,
		Data: data, Result: j.Result, Error: j.Error, Progress: j.Progress,
		Priority: j.Priority, Key: j.Key, Attempts: j.Attempts, MaxAttempts: j.MaxAttempts,
		Resubmitted: j.Resubmitted,
		AddedAt:     j.AddedAt, ScheduledAt: j.ScheduledAt, StartedAt: j.StartedAt,
		HeartbeatAt: j.HeartbeatAt, FinishedAt: j.FinishedAt, Holder: j.Holder,
		Added: j.Added, Workflow: j.Workflow, Node: j.Node,
		TraceID: j.Trace.TraceIDString(),
		Errors:  toAttemptErrors(j.Errors),
	}
}

func toAttemptErrors(es []fdbq.AttemptError) []AttemptError {
	if len(es) == 0 {
		return nil
	}
	out := make([]AttemptError, len(es))
	for i, e := range es {
		out[i] = AttemptError{Attempt: e.Attempt, At: e.At, Error: e.Error}
	}
	return out
}

func toTypeSettings(s fdbq.TypeSettings) TypeSettings {
	return TypeSettings{
		ActivityTimeout: Duration(s.ActivityTimeout),
		Retry: RetryPolicy{
			MaxAttempts: s.Retry.MaxAttempts, Backoff: s.Retry.Backoff,
			Base: Duration(s.Retry.Base), Max: Duration(s.Retry.Max),
		},
		Paused:     s.Paused,
		Retention:  Duration(s.Retention),
		Zones:      s.Zones,
		MaxRunning: s.MaxRunning,
		Keys:       toKeyPolicies(s.Keys),
		KeyDefault: toKeyPolicy(s.KeyDefault),
	}
}

func toKeyPolicy(p fdbq.KeyPolicy) KeyPolicy {
	return KeyPolicy{Weight: p.Weight, MaxRunning: p.MaxRunning, MaxStarts: p.MaxStarts, Per: Duration(p.Per), Zones: p.Zones}
}

func toKeyPolicies(m map[string]fdbq.KeyPolicy) map[string]KeyPolicy {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]KeyPolicy, len(m))
	for k, p := range m {
		out[k] = toKeyPolicy(p)
	}
	return out
}

func toTypeInfo(t *fdbq.TypeInfo) *TypeInfo {
	info := &TypeInfo{Name: t.Name, Settings: toTypeSettings(t.Settings), Pending: t.Pending, Running: t.Running, Finished: t.Finished}
	if t.Err != nil {
		info.Error = fdbqDetail(t.Err)
	}
	return info
}

func toUnreadable(u fdbq.Unreadable) Unreadable {
	return Unreadable{ID: u.ID, Key: printableKey(u.Key), Error: fdbqDetail(u.Err)}
}

// printableKey writes a key as fdbcli prints one: printable ASCII as it
// is, a backslash as \\, any other byte as \xNN.
func printableKey(k []byte) string {
	var b strings.Builder
	for _, c := range k {
		switch {
		case c == '\\':
			b.WriteString(`\\`)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	return b.String()
}
