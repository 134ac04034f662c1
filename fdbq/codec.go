package fdbq

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// A job record is stored in a compact binary form whose first byte names
// the format, so that a later format can be told apart from this one (and
// from the JSON records of earlier versions, which begin with '{' and are
// still read):
//
//	0x02                        format 2 (0x01: format 1, the same without
//	                            the active version)
//	state, outcome              one byte each (codes below)
//	flags                       bit 0: resubmit; bit 1: retry policy follows;
//	                            bit 2: snoozes follow; bit 3: a zone follows;
//	                            bit 4: a unique digest follows; bit 5: a
//	                            workflow's job; bit 6: a trace context
//	                            follows; bit 7: errors of attempts follow
//	priority                    signed varint
//	attempts, max attempts      unsigned varints
//	added, scheduled, started,  signed varints, Unix milliseconds (0: unset)
//	heartbeat, finished,
//	expires, resubmit times
//	active version              (format 2) signed varint: the read version of
//	                            the transaction that last renewed a running
//	                            job's activity; in the header, so that the
//	                            job's index entries can be told from it when
//	                            what follows is damaged
//	zone (bit 3 only)           the fairness key (unsigned varint length,
//	                            then the bytes) and the shard (unsigned
//	                            varint); without it the zone is ("", 0)
//	lock, last lock, last add,  unsigned varint length, then the bytes
//	error
//	data, result, progress      unsigned varint length, then the bytes
//	retry policy (bit 1 only)   max attempts (unsigned varint), backoff
//	                            (length and bytes), base and max (signed
//	                            varints, nanoseconds)
//	snoozes (bit 2 only)        unsigned varint
//	unique digest (bit 4 only)  unsigned varint length, then the bytes: the
//	                            digest of what makes the job unique
//	                            (NewJob.Unique), the key of its entry in
//	                            the unique index
//	trace (bit 6 only)          the trace context the job was added in:
//	                            trace id (16 bytes), span id (8), flags
//	                            (1), then the tracestate (unsigned varint
//	                            length, then the bytes, at most
//	                            MaxTraceStateSize)
//	errors (bit 7 only)         the errors of the last failed attempts,
//	                            oldest first: a count (unsigned varint, at
//	                            most MaxErrorHistory), then for each the
//	                            attempt (unsigned varint), when (signed
//	                            varint, Unix ms) and the error (unsigned
//	                            varint length, then the bytes)
//
// Encoding/json took about 13% of the CPU of a pipeline burning jobs
// down: each record is decoded and encoded again at every transition. This form is written with one allocation and read with two
// (the record, and one string that the text fields share); data, result
// and progress point into the stored value, which no one writes to.
const (
	formatJSON    = '{'
	formatBinary1 = 0x01
	formatBinary2 = 0x02
)

const (
	flagResubmit = 1 << iota
	flagRetry
	flagSnoozes
	flagZone
	flagUnique
	// flagWorkflow: the job is a job of a workflow, whose id and node
	// name its id holds (WORKFLOW:NAME); no payload.
	flagWorkflow
	flagTrace
	flagErrors
	flagsKnown = flagResubmit | flagRetry | flagSnoozes | flagZone | flagUnique | flagWorkflow | flagTrace | flagErrors
)

// traceSize is a stored trace context's size before its tracestate.
const traceSize = 16 + 8 + 1

var stateCodes = [...]State{1: Pending, 2: Running, 3: Finished}

var outcomeCodes = [...]Outcome{0: "", 1: Succeeded, 2: Failed, 3: Canceled}

func stateCode(s State) (byte, bool) {
	for i, v := range stateCodes {
		if i > 0 && v == s {
			return byte(i), true
		}
	}
	return 0, false
}

func outcomeCode(o Outcome) (byte, bool) {
	for i, v := range outcomeCodes {
		if v == o {
			return byte(i), true
		}
	}
	return 0, false
}

// encode returns the record's stored form (format 2).
func (r *record) encode() ([]byte, error) { return r.encodeAs(formatBinary2) }

// encodeAs returns the record's stored form in format 2, or in format 1,
// which earlier versions wrote (tests make such records with it).
func (r *record) encodeAs(format byte) ([]byte, error) {
	if n := len(r.Data) + len(r.Result) + len(r.Error) + len(r.Progress); n > MaxDataSize {
		return nil, errorf(ErrDataTooLarge, "data, result, error and progress take %d bytes, more than %d", n, MaxDataSize)
	}
	sc, ok := stateCode(r.State)
	if !ok {
		return nil, fmt.Errorf("fdbq: cannot store a job in state %q", r.State)
	}
	oc, ok := outcomeCode(r.Outcome)
	if !ok {
		return nil, fmt.Errorf("fdbq: cannot store a job with outcome %q", r.Outcome)
	}
	var flags byte
	if r.Resubmit {
		flags |= flagResubmit
	}
	if r.Retry != nil {
		flags |= flagRetry
	}
	if r.Snoozes > 0 {
		flags |= flagSnoozes
	}
	hasZone := format >= formatBinary2 && (r.Key != "" || r.Shard != 0)
	if hasZone {
		flags |= flagZone
	}
	hasUnique := format >= formatBinary2 && len(r.Unique) > 0
	if hasUnique {
		flags |= flagUnique
	}
	if format >= formatBinary2 && r.Workflow {
		flags |= flagWorkflow
	}
	hasTrace := format >= formatBinary2 && !r.Trace.IsZero()
	if hasTrace {
		flags |= flagTrace
	}
	var history []attemptError
	if format >= formatBinary2 {
		history = r.errorsThatFit()
	}
	if len(history) > 0 {
		flags |= flagErrors
	}
	// An upper bound of the size, so the value is allocated once.
	size := 4 + 14*10 + 5*7 + len(r.Key) + len(r.Lock) + len(r.LastLock) + len(r.LastAdd) + len(r.Error) +
		len(r.Data) + len(r.Result) + len(r.Progress) + len(r.Unique)
	if hasTrace {
		size += traceSize + 2 + len(r.Trace.State)
	}
	if r.Retry != nil {
		size += 3*10 + 5 + len(r.Retry.Backoff)
	}
	for _, e := range history {
		size += historyEntryOverhead + len(e.err)
	}
	if len(history) > 0 {
		size++
	}
	b := make([]byte, 0, size)
	b = append(b, format, sc, oc, flags)
	b = binary.AppendVarint(b, int64(r.Priority))
	b = binary.AppendUvarint(b, uint64(r.Attempts))
	b = binary.AppendUvarint(b, uint64(r.MaxAttempts))
	for _, t := range [...]int64{r.AddedAt, r.ScheduledAt, r.StartedAt, r.HeartbeatAt, r.FinishedAt, r.ExpiresAt, r.ResubmitAt} {
		b = binary.AppendVarint(b, t)
	}
	if format >= formatBinary2 {
		b = binary.AppendVarint(b, r.ActiveVersion)
	}
	if hasZone {
		b = binary.AppendUvarint(b, uint64(len(r.Key)))
		b = append(b, r.Key...)
		b = binary.AppendUvarint(b, uint64(r.Shard))
	}
	for _, s := range [...]string{r.Lock, r.LastLock, r.LastAdd, r.Error} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, f := range [...][]byte{r.Data, r.Result, r.Progress} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	if p := r.Retry; p != nil {
		b = binary.AppendUvarint(b, uint64(p.MaxAttempts))
		b = binary.AppendUvarint(b, uint64(len(p.Backoff)))
		b = append(b, p.Backoff...)
		b = binary.AppendVarint(b, int64(p.Base))
		b = binary.AppendVarint(b, int64(p.Max))
	}
	if r.Snoozes > 0 {
		b = binary.AppendUvarint(b, uint64(r.Snoozes))
	}
	if hasUnique {
		b = binary.AppendUvarint(b, uint64(len(r.Unique)))
		b = append(b, r.Unique...)
	}
	if hasTrace {
		b = append(b, r.Trace.TraceID[:]...)
		b = append(b, r.Trace.SpanID[:]...)
		b = append(b, r.Trace.Flags)
		b = binary.AppendUvarint(b, uint64(len(r.Trace.State)))
		b = append(b, r.Trace.State...)
	}
	if len(history) > 0 {
		b = binary.AppendUvarint(b, uint64(len(history)))
		for _, e := range history {
			b = binary.AppendUvarint(b, uint64(e.attempt))
			b = binary.AppendVarint(b, e.at)
			b = binary.AppendUvarint(b, uint64(len(e.err)))
			b = append(b, e.err...)
		}
	}
	if len(b) > kv.MaxValueSize {
		return nil, errorf(ErrDataTooLarge, "the job record takes %d bytes once encoded, more than %d", len(b), kv.MaxValueSize)
	}
	return b, nil
}

// decodeRecord reads a stored record, in format 1 or in the JSON of
// earlier versions; one it cannot read is ErrCorrupt. The record's data, result and progress share b's
// memory, so b must not change afterwards.
func decodeRecord(b []byte, typ, id string) (*record, error) {
	var r record
	var err error
	switch {
	case len(b) == 0:
		err = errors.New("empty value")
	case b[0] == formatBinary1 || b[0] == formatBinary2:
		err = r.decodeBinary(b[1:], b[0])
		r.legacy = b[0] == formatBinary1 && r.State == Running
	case b[0] == formatJSON:
		err = json.Unmarshal(b, &r)
		r.legacy = r.State == Running
	default:
		err = fmt.Errorf("unknown format 0x%02x", b[0])
	}
	if err != nil {
		return nil, corruptf("job %s/%s: corrupt record: %w", typ, id, err)
	}
	return &r, nil
}

var errShortRecord = errors.New("record ends early")

// recordReader reads format 1's fields; the first error sticks.
type recordReader struct {
	b   []byte
	err error
}

func (d *recordReader) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *recordReader) byte() byte {
	if len(d.b) == 0 {
		d.fail(errShortRecord)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *recordReader) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(errShortRecord)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *recordReader) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errShortRecord)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// maxCount is the largest count a record holds (attempts, max attempts,
// snoozes): what reads back as an int on any platform. A count that
// would pass it is refused (max attempts) or stays at it (snoozes), so
// that no record is written that cannot be read.
const maxCount = math.MaxInt32

// int reads an unsigned varint that must fit an int.
func (d *recordReader) int() int {
	v := d.uvarint()
	if v > maxCount {
		d.fail(errors.New("count out of range"))
		return 0
	}
	return int(v)
}

// zone reads a record's zone: its fairness key and shard.
func (d *recordReader) zone() (string, int) {
	key := string(d.bytes())
	shard := d.uvarint()
	if d.err == nil && shard >= MaxZones {
		d.fail(fmt.Errorf("shard %d out of range", shard))
	}
	if d.err == nil && key != "" && ValidateKey(key) != nil {
		d.fail(fmt.Errorf("fairness key %q is not valid", key))
	}
	return key, int(shard)
}

// trace reads a record's trace context. One that is not valid (ids of
// zeros, a tracestate too long or not valid) reads as none, or without
// its tracestate: the job is readable whatever became of its trace.
func (d *recordReader) trace() TraceContext {
	if len(d.b) < traceSize {
		d.fail(errShortRecord)
		return TraceContext{}
	}
	var t TraceContext
	copy(t.TraceID[:], d.b[:16])
	copy(t.SpanID[:], d.b[16:24])
	t.Flags = d.b[24]
	d.b = d.b[traceSize:]
	state := d.bytes()
	if len(state) <= MaxTraceStateSize {
		t.State = string(state)
	}
	return cleanTrace(t)
}

// errors reads a record's history of attempt errors.
func (d *recordReader) errors() []attemptError {
	n := d.uvarint()
	if d.err == nil && (n == 0 || n > MaxErrorHistory) {
		d.fail(fmt.Errorf("%d errors of attempts, not 1 to %d", n, MaxErrorHistory))
	}
	if d.err != nil {
		return nil
	}
	es := make([]attemptError, n)
	for i := range es {
		es[i] = attemptError{attempt: d.int(), at: d.varint(), err: string(d.bytes())}
	}
	if d.err != nil {
		return nil
	}
	return es
}

// bytes reads a length-prefixed field; nil when empty. The result's
// capacity ends with it, so an append to it cannot write over the next
// field.
func (d *recordReader) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail(errShortRecord)
		return nil
	}
	if n == 0 {
		return nil
	}
	f := d.b[:n:n]
	d.b = d.b[n:]
	return f
}

func (r *record) decodeBinary(b []byte, format byte) error {
	d := recordReader{b: b}
	sc, oc, flags := d.byte(), d.byte(), d.byte()
	if d.err == nil && (sc == 0 || int(sc) >= len(stateCodes) || int(oc) >= len(outcomeCodes)) {
		d.fail(fmt.Errorf("unknown state %d or outcome %d", sc, oc))
	}
	if d.err == nil && flags&^flagsKnown != 0 {
		d.fail(fmt.Errorf("unknown flags 0x%02x", flags&^flagsKnown))
	}
	if d.err != nil {
		return d.err
	}
	r.State, r.Outcome = stateCodes[sc], outcomeCodes[oc]
	r.Resubmit = flags&flagResubmit != 0
	r.Workflow = flags&flagWorkflow != 0
	priority := d.varint()
	if int64(int(priority)) != priority {
		d.fail(errors.New("priority out of range"))
	}
	r.Priority = int(priority)
	r.Attempts = d.int()
	r.MaxAttempts = d.int()
	r.AddedAt, r.ScheduledAt, r.StartedAt = d.varint(), d.varint(), d.varint()
	r.HeartbeatAt, r.FinishedAt, r.ExpiresAt = d.varint(), d.varint(), d.varint()
	r.ResubmitAt = d.varint()
	if format >= formatBinary2 {
		r.ActiveVersion = d.varint()
	}
	if flags&flagZone != 0 {
		r.Key, r.Shard = d.zone()
	}
	// The four text fields become one string and share it: one
	// allocation instead of four.
	var lens [4]int
	var spans [4][]byte
	total := 0
	for i := range spans {
		spans[i] = d.bytes()
		lens[i] = len(spans[i])
		total += lens[i]
	}
	if total > 0 && d.err == nil {
		var sb strings.Builder
		sb.Grow(total)
		for _, s := range spans {
			sb.Write(s)
		}
		all := sb.String()
		texts := [4]*string{&r.Lock, &r.LastLock, &r.LastAdd, &r.Error}
		at := 0
		for i, p := range texts {
			*p = all[at : at+lens[i]]
			at += lens[i]
		}
	}
	r.Data, r.Result, r.Progress = d.bytes(), d.bytes(), d.bytes()
	if flags&flagRetry != 0 {
		p := &RetryPolicy{}
		p.MaxAttempts = d.int()
		p.Backoff = Backoff(d.bytes())
		p.Base = time.Duration(d.varint())
		p.Max = time.Duration(d.varint())
		r.Retry = p
	}
	if flags&flagSnoozes != 0 {
		r.Snoozes = d.int()
	}
	if flags&flagUnique != 0 {
		r.Unique = d.bytes()
		if d.err == nil && len(r.Unique) == 0 {
			d.fail(errors.New("empty unique digest"))
		}
	}
	if flags&flagTrace != 0 {
		r.Trace = d.trace()
	}
	if flags&flagErrors != 0 {
		r.Errors = d.errors()
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail(fmt.Errorf("%d bytes after the record", len(d.b)))
	}
	return d.err
}
