package httpapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jsontext"
)

// Limits of the worker and wait calls.
const (
	// MaxAccept is the most jobs one accept may ask for.
	MaxAccept = 1000
	// MaxWait is the longest an accept or a wait may block. Long polls
	// longer than this are refused rather than shortened, so a client
	// never mistakes a cut wait for an empty queue.
	MaxWait = 60 * time.Second
	// DefaultWait is how long GET …/wait blocks when no timeout is given.
	DefaultWait = 30 * time.Second
	// DefaultMaxBodyBytes is the default limit on a request body.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultRequestTimeout is the default bound on one request
	// (Options.RequestTimeout).
	DefaultRequestTimeout = 30 * time.Second
)

// The request decoders below are strict: unknown fields, trailing data and
// values of the wrong JSON type are errors that name the field. The
// durations and times travel as strings and are parsed here, so a bad one
// is reported with its field's name too. Every error they return is an
// *APIError with a 4xx status (or an *http.MaxBytesError, which becomes a
// 413), never anything that would answer 500.

// newJobBody is one job of an enqueue body.
type newJobBody struct {
	ID          bodyID          `json:"id"`
	Data        json.RawMessage `json:"data"`
	ScheduledAt string          `json:"scheduled_at"`
	Priority    int             `json:"priority"`
	Key         bodyID          `json:"key"`
	MaxAttempts int             `json:"max_attempts"`
	Unique      *uniqueBody     `json:"unique"`
}

type uniqueBody struct {
	Fields      []string `json:"fields"`
	States      []string `json:"states"`
	Window      string   `json:"window"`
	OnDuplicate string   `json:"on_duplicate"`
}

// unique reads a job's unique options; where prefixes the field names in
// a problem.
func (u *uniqueBody) unique(where string) (*fdbq.Unique, error) {
	out := &fdbq.Unique{Fields: u.Fields}
	var err error
	if out.States, err = fdbq.ParseUniqueStates(u.States); err != nil {
		return nil, invalid("%sunique.states: %s", where, fdbqDetail(err))
	}
	if out.OnDuplicate, err = fdbq.ParseOnDuplicate(u.OnDuplicate); err != nil {
		return nil, invalid("%sunique.on_duplicate: %s", where, fdbqDetail(err))
	}
	if u.Window != "" {
		d, err := time.ParseDuration(u.Window)
		if err != nil || d < 0 {
			return nil, invalid("%sunique.window: %q is not a duration of 0 or more such as \"24h\"", where, u.Window)
		}
		out.Window = d
	}
	if len(u.Fields) > fdbq.MaxUniqueFields {
		return nil, invalid("%sunique.fields: %d fields, more than %d", where, len(u.Fields), fdbq.MaxUniqueFields)
	}
	for i, f := range u.Fields {
		if f == "" {
			return nil, invalid("%sunique.fields[%d]: empty field name", where, i)
		}
	}
	return out, nil
}

// decodeEnqueue reads an enqueue body: one job object, or an array of them
// (batch is true). The jobs get type typ.
func decodeEnqueue(r io.Reader, typ string) (jobs []fdbq.NewJob, batch bool, err error) {
	br := bufio.NewReader(r)
	first, err := firstByte(br)
	if err == io.EOF {
		return nil, false, &APIError{Status: http.StatusBadRequest, Code: CodeInvalidJSON, Message: "empty body: expected a job object or an array of them"}
	}
	if err != nil {
		return nil, false, err
	}
	var bodies []newJobBody
	if first == '[' {
		batch = true
		if err := decodeStrict(br, &bodies); err != nil {
			return nil, true, err
		}
		if len(bodies) == 0 {
			return nil, true, invalid("empty batch: the array must hold at least one job")
		}
	} else {
		var b newJobBody
		if err := decodeStrict(br, &b); err != nil {
			return nil, false, err
		}
		bodies = []newJobBody{b}
	}
	jobs = make([]fdbq.NewJob, len(bodies))
	for i, b := range bodies {
		where := ""
		if batch {
			where = fmt.Sprintf("[%d].", i)
		}
		if b.ID.problem != "" {
			return nil, batch, invalid("%sid: job id %s", where, b.ID.problem)
		}
		if b.ID.id != "" {
			if err := fdbq.ValidateID(b.ID.id); err != nil {
				return nil, batch, nameInvalid(where+"id", err)
			}
		}
		if b.Key.problem != "" {
			return nil, batch, invalid("%skey: fairness key %s", where, b.Key.problem)
		}
		if b.Key.id != "" {
			if err := fdbq.ValidateKey(b.Key.id); err != nil {
				return nil, batch, nameInvalid(where+"key", err)
			}
		}
		j := fdbq.NewJob{Type: typ, ID: b.ID.id, Data: b.Data, Priority: b.Priority, Key: b.Key.id, MaxAttempts: b.MaxAttempts}
		if b.ScheduledAt != "" {
			t, err := time.Parse(time.RFC3339Nano, b.ScheduledAt)
			if err != nil {
				return nil, batch, invalid("%sscheduled_at: %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", where, b.ScheduledAt)
			}
			j.ScheduledAt = t
		}
		if b.MaxAttempts < 0 {
			return nil, batch, invalid("%smax_attempts: %d is negative", where, b.MaxAttempts)
		}
		if b.Unique != nil {
			if j.Unique, err = b.Unique.unique(where); err != nil {
				return nil, batch, err
			}
		}
		jobs[i] = j
	}
	return jobs, batch, nil
}

// bodyID is the id, or the fairness key, of an enqueue body. encoding/json decodes a byte that
// is not UTF-8, and a \u escape of half a surrogate pair, as U+FFFD: the
// job would be stored under an id other than the one sent, which the
// client could not name. UnmarshalJSON keeps the decoded id and notes such
// a problem for decodeEnqueue to refuse, with the job's place in a batch.
type bodyID struct {
	id      string
	problem string
}

func (b *bodyID) UnmarshalJSON(data []byte) error {
	if err := json.Unmarshal(data, &b.id); err != nil {
		return err
	}
	if len(data) > 0 && data[0] == '"' {
		b.problem = jsontext.StringProblem(data[1 : len(data)-1])
	}
	return nil
}

// acceptBody is the body of an accept.
type acceptBody struct {
	Max    *int   `json:"max"`
	Wait   string `json:"wait"`
	Holder string `json:"holder"`
}

// decodeAccept reads an accept body; an empty body takes the defaults
// (one job, no wait).
func decodeAccept(r io.Reader) (fdbq.AcceptOptions, error) {
	var b acceptBody
	if err := decodeOptional(r, &b); err != nil {
		return fdbq.AcceptOptions{}, err
	}
	o := fdbq.AcceptOptions{Max: 1}
	if b.Max != nil {
		o.Max = *b.Max
	}
	switch {
	case o.Max < 1:
		return o, invalid("max: %d is below 1", o.Max)
	case o.Max > MaxAccept:
		return o, invalid("max: %d is over the limit of %d", o.Max, MaxAccept)
	}
	if b.Wait != "" {
		d, err := parseWait("wait", b.Wait)
		if err != nil {
			return o, err
		}
		o.Timeout = d
	}
	if err := fdbq.ValidateHolder(b.Holder); err != nil {
		return o, invalid("%s", fdbqDetail(err))
	}
	o.Holder = b.Holder
	return o, nil
}

// parseWait parses a long-poll duration, 0 to MaxWait.
func parseWait(field, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, invalid("%s: %q is not a duration such as \"5s\"", field, s)
	}
	if d < 0 {
		return 0, invalid("%s: %s is negative", field, s)
	}
	if d > MaxWait {
		return 0, invalid("%s: %s is over the limit of %ds", field, s, int(MaxWait/time.Second))
	}
	return d, nil
}

// decodeHeartbeat, decodeFinish and decodeFail read the worker bodies;
// each needs the lock.
func decodeHeartbeat(r io.Reader) (HeartbeatRequest, error) {
	var b HeartbeatRequest
	if err := decodeStrict(r, &b); err != nil {
		return b, err
	}
	return b, needLock(b.Lock)
}

func decodeFinish(r io.Reader) (FinishRequest, error) {
	var b FinishRequest
	if err := decodeStrict(r, &b); err != nil {
		return b, err
	}
	return b, needLock(b.Lock)
}

func decodeFail(r io.Reader) (FailRequest, error) {
	var b FailRequest
	if err := decodeStrict(r, &b); err != nil {
		return b, err
	}
	return b, needLock(b.Lock)
}

func needLock(lock string) error {
	if lock == "" {
		return invalid("lock: required; send the lock the accept returned")
	}
	return nil
}

// settingsBody is the body of PUT /v1/types/{type}.
type settingsBody struct {
	ActivityTimeout string    `json:"activity_timeout"`
	Retry           retryBody `json:"retry"`
	Paused          bool      `json:"paused"`
	Retention       string    `json:"retention"`
	Zones           int       `json:"zones"`
	MaxRunning      int       `json:"max_running"`
	// Keys, when given (not null), replaces every key policy.
	Keys       map[string]keyPolicyBody `json:"keys"`
	KeyDefault keyPolicyBody            `json:"key_default"`
}

type keyPolicyBody struct {
	Weight     int    `json:"weight"`
	MaxRunning int    `json:"max_running"`
	MaxStarts  int    `json:"max_starts"`
	Per        string `json:"per"`
	Zones      int    `json:"zones"`
}

func toKeyPolicyBody(p fdbq.KeyPolicy) keyPolicyBody {
	return keyPolicyBody{Weight: p.Weight, MaxRunning: p.MaxRunning, MaxStarts: p.MaxStarts, Per: p.Per.String(), Zones: p.Zones}
}

// policy returns b as fdbq's key policy, checked; field names where b is
// in the body.
func (b keyPolicyBody) policy(field string) (fdbq.KeyPolicy, error) {
	p := fdbq.KeyPolicy{Weight: b.Weight, MaxRunning: b.MaxRunning, MaxStarts: b.MaxStarts, Zones: b.Zones}
	if b.Per != "" {
		d, err := time.ParseDuration(b.Per)
		if err != nil {
			return p, invalid("%s.per: %q is not a duration such as \"30s\"", field, b.Per)
		}
		p.Per = d
	}
	if err := p.Validate(); err != nil {
		return p, invalid("%s: %s", field, fdbqDetail(err))
	}
	return p, nil
}

type retryBody struct {
	MaxAttempts int    `json:"max_attempts"`
	Backoff     string `json:"backoff"`
	Base        string `json:"base"`
	Max         string `json:"max"`
}

// decodeSettings reads settings over base: fields the body leaves out keep
// base's values, so {"retention": "1h"} changes the retention alone.
func decodeSettings(r io.Reader, base fdbq.TypeSettings) (fdbq.TypeSettings, error) {
	b := settingsBody{
		ActivityTimeout: base.ActivityTimeout.String(),
		Retry: retryBody{
			MaxAttempts: base.Retry.MaxAttempts, Backoff: string(base.Retry.Backoff),
			Base: base.Retry.Base.String(), Max: base.Retry.Max.String(),
		},
		Paused:     base.Paused,
		Retention:  base.Retention.String(),
		Zones:      base.Zones,
		MaxRunning: base.MaxRunning,
		KeyDefault: toKeyPolicyBody(base.KeyDefault),
	}
	if err := decodeOptional(r, &b); err != nil {
		return base, err
	}
	s := fdbq.TypeSettings{
		Paused:     b.Paused,
		Retry:      fdbq.RetryPolicy{MaxAttempts: b.Retry.MaxAttempts, Backoff: fdbq.Backoff(b.Retry.Backoff)},
		Zones:      b.Zones,
		MaxRunning: b.MaxRunning,
		Keys:       maps.Clone(base.Keys),
	}
	var err error
	if s.KeyDefault, err = b.KeyDefault.policy("key_default"); err != nil {
		return base, err
	}
	if b.Keys != nil {
		if len(b.Keys) > fdbq.MaxKeyPolicies {
			return base, invalid("keys: %d key policies, more than %d", len(b.Keys), fdbq.MaxKeyPolicies)
		}
		s.Keys = make(map[string]fdbq.KeyPolicy, len(b.Keys))
		for _, k := range slices.Sorted(maps.Keys(b.Keys)) {
			if err := fdbq.ValidateKey(k); err != nil {
				return base, nameInvalid("keys", err)
			}
			if s.Keys[k], err = b.Keys[k].policy(fmt.Sprintf("keys[%q]", k)); err != nil {
				return base, err
			}
		}
	}
	for _, f := range []struct {
		name string
		in   string
		out  *time.Duration
	}{
		{"activity_timeout", b.ActivityTimeout, &s.ActivityTimeout},
		{"retry.base", b.Retry.Base, &s.Retry.Base},
		{"retry.max", b.Retry.Max, &s.Retry.Max},
		{"retention", b.Retention, &s.Retention},
	} {
		d, err := time.ParseDuration(f.in)
		if err != nil {
			return base, invalid("%s: %q is not a duration such as \"30s\"", f.name, f.in)
		}
		*f.out = d
	}
	if err := s.Validate(); err != nil {
		return base, invalid("%s", fdbqDetail(err))
	}
	return s, nil
}

// decodeOptional is decodeStrict that takes an empty body as {}.
func decodeOptional(r io.Reader, v any) error {
	br := bufio.NewReader(r)
	switch _, err := firstByte(br); {
	case err == io.EOF:
		return nil
	case err != nil:
		return err
	}
	return decodeStrict(br, v)
}

// firstByte returns the first byte after white space without consuming
// it; io.EOF when there is none.
func firstByte(br *bufio.Reader) (byte, error) {
	for {
		c, err := br.ReadByte()
		if err != nil {
			return 0, err
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c, br.UnreadByte()
	}
}

// decodeStrict decodes exactly one JSON value into v, refusing unknown
// fields and trailing data.
func decodeStrict(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case err == io.EOF:
		return nil
	case err != nil:
		return jsonError(err)
	default:
		return &APIError{Status: http.StatusBadRequest, Code: CodeInvalidJSON, Message: "unexpected data after the JSON value"}
	}
}

// jsonError turns a decoding error into an answer that says where and
// what.
func jsonError(err error) error {
	var (
		tooBig *http.MaxBytesError
		syn    *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	bad := func(format string, args ...any) error {
		return &APIError{Status: http.StatusBadRequest, Code: CodeInvalidJSON, Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case errors.As(err, &tooBig):
		return err
	case errors.As(err, &syn):
		return bad("invalid JSON at byte %d: %s", syn.Offset, syn.Error())
	case errors.As(err, &typ):
		if typ.Field == "" {
			return bad("the body is a JSON %s; expected %s", typ.Value, jsonKind(typ.Type.Kind().String()))
		}
		return bad("field %q: expected %s, got a JSON %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	case err == io.EOF:
		return bad("empty body: expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return bad("invalid JSON: the body ends too early")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no error type for an unknown field; this
		// prefix is its documented message.
		return bad("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	default:
		return bad("invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
}

// jsonKind names a Go kind as JSON readers know it.
func jsonKind(kind string) string {
	switch kind {
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "int", "int64", "int32", "uint", "uint64":
		return "an integer"
	case "float64", "float32":
		return "a number"
	}
	return "a " + kind
}

// invalid is a 400 for a bad value.
func invalid(format string, args ...any) *APIError {
	return &APIError{Status: http.StatusBadRequest, Code: CodeInvalid, Message: fmt.Sprintf(format, args...)}
}
