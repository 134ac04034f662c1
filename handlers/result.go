package handlers

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// asResult makes a job result of out, leading and trailing white space
// trimmed: out itself when it is a JSON value, null when it is blank, and
// otherwise out as a JSON string.
func asResult(out []byte) json.RawMessage {
	trimmed := bytes.TrimSpace(out)
	if len(trimmed) == 0 {
		return json.RawMessage("null")
	}
	if json.Valid(trimmed) {
		return json.RawMessage(bytes.Clone(trimmed))
	}
	b, _ := json.Marshal(string(trimmed)) // a string always marshals
	return b
}

// excerpt returns at most n bytes of b for an error message, cut at a rune
// boundary and marked when cut.
func excerpt(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	b = b[:n]
	for len(b) > 0 && !utf8.Valid(b) {
		b = b[:len(b)-1]
	}
	return string(b) + "…"
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
	cut bool // bytes before buf were dropped
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.cut = t.cut || len(t.buf) > 0 || len(p) > t.max
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String returns the kept bytes, starting at a rune boundary, marked when
// earlier bytes were dropped.
func (t *tailBuffer) String() string {
	b := t.buf
	if !t.cut {
		return string(b)
	}
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	return "…" + string(b)
}

// limitBuffer keeps the first max bytes written to it and counts the rest,
// so a writer never blocks on a full bound and the caller learns the
// output was too long.
type limitBuffer struct {
	max   int
	buf   []byte
	total int64
}

func (l *limitBuffer) Write(p []byte) (int, error) {
	l.total += int64(len(p))
	if room := l.max - len(l.buf); room > 0 {
		l.buf = append(l.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// over reports whether more than max bytes were written.
func (l *limitBuffer) over() bool { return l.total > int64(l.max) }
