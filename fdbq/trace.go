package fdbq

import (
	"encoding/hex"
	"errors"
	"strings"
)

// TraceContext is the W3C trace context (https://www.w3.org/TR/trace-context/)
// a job was enqueued in: the span that enqueued it, so that the handler
// that works it continues the same trace. It is stored with the job in a
// fixed 25 bytes and a tracestate of at most MaxTraceStateSize bytes.
// fdbq only keeps it; package tracing makes spans of it.
//
// The zero TraceContext is none. A job keeps the context it was first
// added in: a resubmit (Add of its id) of a pending or running job
// changes it only when it had none, and a finished job added again is a
// new job with the new add's.
type TraceContext struct {
	TraceID [16]byte
	SpanID  [8]byte
	// Flags are the trace flags: bit 0 sampled, bit 1 random (W3C level
	// 2); the others are dropped.
	Flags byte
	// State is the tracestate header's list, as "key=value,key=value".
	State string
}

// MaxTraceStateSize bounds a stored tracestate: the size the W3C
// specification asks every vendor to propagate. A longer one loses its
// last entries until it fits.
const MaxTraceStateSize = 512

// maxTraceStateMembers is the most list members a tracestate holds (W3C).
const maxTraceStateMembers = 32

// ErrInvalidTraceContext: a traceparent that is not one (ParseTraceContext).
var ErrInvalidTraceContext = errors.New("fdbq: invalid traceparent")

// IsZero reports whether t holds no trace context.
func (t TraceContext) IsZero() bool { return t.TraceID == [16]byte{} }

// valid reports whether t's ids are both set, as W3C requires.
func (t TraceContext) valid() bool {
	return t.TraceID != [16]byte{} && t.SpanID != [8]byte{}
}

// TraceIDString is the trace id in lower-case hex; "" for none.
func (t TraceContext) TraceIDString() string {
	if t.IsZero() {
		return ""
	}
	return hex.EncodeToString(t.TraceID[:])
}

// Traceparent is t as a version 00 traceparent header; "" for none.
func (t TraceContext) Traceparent() string {
	if t.IsZero() {
		return ""
	}
	var b [55]byte
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], t.TraceID[:])
	b[35] = '-'
	hex.Encode(b[36:52], t.SpanID[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{t.Flags})
	return string(b[:])
}

// ParseTraceContext reads the traceparent and tracestate headers of a
// request. A traceparent that is not valid (W3C trace context: version
// 00 exactly, a later version with fields after the flags, lower-case
// hex, ids not all zero) is ErrInvalidTraceContext; a tracestate that is
// not valid is dropped without failing the traceparent, as the
// specification asks, and one over MaxTraceStateSize keeps what of its
// first entries fits.
func ParseTraceContext(traceparent, tracestate string) (TraceContext, error) {
	var t TraceContext
	h := traceparent
	var ver [1]byte
	if !hexPart(ver[:], &h, 2) || ver[0] == 0xff {
		return TraceContext{}, ErrInvalidTraceContext
	}
	if !hexPart(t.TraceID[:], &h, 32) || !hexPart(t.SpanID[:], &h, 16) {
		return TraceContext{}, ErrInvalidTraceContext
	}
	var flags [1]byte
	if !hexPart(flags[:], &h, 2) {
		return TraceContext{}, ErrInvalidTraceContext
	}
	if ver[0] == 0 && (len(traceparent) != 55 || flags[0] > 3) {
		// Version 00 has no other fields and no other flags.
		return TraceContext{}, ErrInvalidTraceContext
	}
	t.Flags = flags[0] & 3
	if !t.valid() {
		return TraceContext{}, ErrInvalidTraceContext
	}
	t.State = cleanTraceState(tracestate)
	return t, nil
}

// hexPart reads the next '-'-separated field of *h, n lower-case hex
// digits, into dst.
func hexPart(dst []byte, h *string, n int) bool {
	part, rest, _ := strings.Cut(*h, "-")
	*h = rest
	if len(part) != n {
		return false
	}
	for i := range dst {
		hi, lo := unhex(part[2*i]), unhex(part[2*i+1])
		if hi > 15 || lo > 15 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return 0xff
}

// cleanTraceState returns s's list members, without the empty ones and
// the spaces around them, joined by commas; "" when a member is not
// valid or there are more than 32. Members from the end are left out
// until it fits MaxTraceStateSize.
func cleanTraceState(s string) string {
	if s == "" {
		return ""
	}
	members := make([]string, 0, 4)
	for m := range strings.SplitSeq(s, ",") {
		m = strings.Trim(m, " \t")
		if m == "" {
			continue
		}
		if len(members) == maxTraceStateMembers || !validTraceMember(m) {
			return ""
		}
		members = append(members, m)
	}
	n := 0
	for i, m := range members {
		if n+len(m)+min(i, 1) > MaxTraceStateSize {
			members = members[:i]
			break
		}
		n += len(m) + min(i, 1)
	}
	return strings.Join(members, ",")
}

// validTraceMember reports whether m is key=value as W3C allows: a key of
// lower-case letters, digits and _-*/ (with one @ for a tenant), up to
// 256 bytes, starting with a letter or digit; a value of up to 256
// printable ASCII bytes other than ',' and '=', not ending with a space.
func validTraceMember(m string) bool {
	key, val, ok := strings.Cut(m, "=")
	if !ok || key == "" || len(key) > 256 || val == "" || len(val) > 256 {
		return false
	}
	if c := key[0]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
		return false
	}
	if strings.Count(key, "@") > 1 || strings.HasSuffix(key, "@") {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("_-*/@", c) >= 0) {
			return false
		}
	}
	for i := 0; i < len(val); i++ {
		if c := val[i]; c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return val[len(val)-1] != ' '
}

// cleanTrace is what of t a record stores: nothing when its ids are not
// valid, and its tracestate cleaned as ParseTraceContext does.
func cleanTrace(t TraceContext) TraceContext {
	if !t.valid() {
		return TraceContext{}
	}
	t.Flags &= 3
	t.State = cleanTraceState(t.State)
	return t
}
