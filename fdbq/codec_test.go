package fdbq

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func sampleRecords() []*record {
	return []*record{
		{State: Pending, AddedAt: 1, ScheduledAt: 1},
		{
			State: Running, Data: json.RawMessage(`{"to":"a@b.c"}`), Priority: -7, Attempts: 2, MaxAttempts: 9,
			Lock: "0123456789abcdef0123456789abcdef", LastAdd: "fedcba9876543210fedcba9876543210",
			AddedAt: 1_700_000_000_000, ScheduledAt: 1_700_000_000_001, StartedAt: 1_700_000_000_002,
			HeartbeatAt: 1_700_000_000_003, ExpiresAt: 1_700_000_030_003, Progress: json.RawMessage(`[1,2]`),
			Resubmit: true, ResubmitAt: -5, Error: "héllo ✓", ActiveVersion: 1<<40 + 7, Snoozes: 300,
			Unique: bytes.Repeat([]byte{0xa5}, 32),
			Retry:  &RetryPolicy{MaxAttempts: 3, Backoff: Linear, Base: time.Second, Max: time.Hour},
		},
		{
			State: Finished, Outcome: Failed, Result: json.RawMessage(`"x"`), Error: "boom", Priority: math.MaxInt32,
			LastLock: "l:fail", FinishedAt: math.MaxInt64, StartedAt: math.MinInt64, Attempts: 5,
			Unique: []byte{0},
			Trace: TraceContext{
				TraceID: [16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
				SpanID:  [8]byte{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, Flags: 1, State: "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
			},
			Errors: []attemptError{{attempt: 4, at: 1_700_000_000_000, err: "timeout"}, {attempt: 5, at: -1, err: "boom"}},
		},
		{State: Pending, AddedAt: 2, ScheduledAt: 2, Trace: TraceContext{TraceID: [16]byte{15: 1}, SpanID: [8]byte{7: 1}}},
		{State: Finished, Outcome: Canceled, Retry: &RetryPolicy{}},
		{State: Finished, Outcome: Succeeded, Data: json.RawMessage(`null`)},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for i, r := range sampleRecords() {
		b, err := r.encode()
		if err != nil {
			t.Fatalf("record %d: encode: %v", i, err)
		}
		if b[0] != formatBinary2 {
			t.Fatalf("record %d: format byte 0x%02x", i, b[0])
		}
		got, err := decodeRecord(b, "t", "id")
		if err != nil {
			t.Fatalf("record %d: decode: %v", i, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("record %d: round trip\n got %+v\nwant %+v", i, got, r)
		}
		// Every proper prefix is refused, never misread.
		for n := 0; n < len(b); n++ {
			if _, err := decodeRecord(b[:n], "t", "id"); err == nil {
				t.Fatalf("record %d: a prefix of %d of %d bytes decoded", i, n, len(b))
			}
		}
	}
}

// Records of format 1 (before the active version) are still read, and a
// running one is known as legacy: its activity entry is keyed by deadline.
func TestRecordReadsFormat1(t *testing.T) {
	for i, r := range sampleRecords() {
		want := *r
		want.ActiveVersion, want.Unique, want.Trace, want.Errors = 0, nil, TraceContext{}, nil // format 1 has none
		b, err := want.encodeAs(formatBinary1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRecord(b, "t", "id")
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		want.legacy = r.State == Running
		if !reflect.DeepEqual(got, &want) {
			t.Fatalf("record %d: from format 1\n got %+v\nwant %+v", i, got, &want)
		}
	}
}

// Records stored as JSON by earlier versions are still read.
func TestRecordReadsJSON(t *testing.T) {
	for i, r := range sampleRecords() {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRecord(b, "t", "id")
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		// A running job of an earlier version has a deadline-keyed
		// activity entry, and no active version.
		if got.legacy != (r.State == Running) {
			t.Fatalf("record %d (%s): legacy %v", i, r.State, got.legacy)
		}
		want := *r
		want.ActiveVersion, want.legacy = 0, got.legacy
		want.Snoozes = 0 // earlier versions had none
		want.Unique = nil
		want.Trace = TraceContext{}
		want.Errors = nil
		if !reflect.DeepEqual(got, &want) {
			t.Fatalf("record %d: from JSON\n got %+v\nwant %+v", i, got, &want)
		}
	}
}

func TestRecordRefusesUnknown(t *testing.T) {
	// A history of 0 errors, or of more than MaxErrorHistory, is not one
	// that is written.
	noHistory, _ := (&record{State: Pending}).encode()
	badCount := func(n byte) []byte {
		b := slices.Clone(noHistory)
		b[3] |= flagErrors
		return append(b, n)
	}
	for _, b := range [][]byte{nil, {0x03, 1, 0, 0}, {formatBinary1, 9, 0, 0}, {formatBinary1, 1, 9, 0}, {formatBinary2, 9, 0, 0}, badCount(0), badCount(MaxErrorHistory + 1)} {
		if _, err := decodeRecord(b, "t", "id"); err == nil {
			t.Fatalf("% x decoded", b)
		}
	}
	if _, err := (&record{State: "lost"}).encode(); err == nil {
		t.Fatal("a record in an unknown state was encoded")
	}
}

// An appended-to field never writes over its neighbour in the stored
// value.
func TestRecordFieldsDoNotOverlap(t *testing.T) {
	r := &record{State: Pending, Data: json.RawMessage(`"a"`), Result: json.RawMessage(`"b"`)}
	b, _ := r.encode()
	got, err := decodeRecord(b, "t", "id")
	if err != nil {
		t.Fatal(err)
	}
	_ = append(got.Data, 'x')
	if string(got.Result) != `"b"` {
		t.Fatalf("result became %s", got.Result)
	}
}

func FuzzRecordRoundTrip(f *testing.F) {
	f.Add(uint8(1), uint8(0), false, int64(0), 0, int64(1), int64(2), "lock", "", []byte(`{}`), []byte(nil), false, int64(0))
	f.Add(uint8(3), uint8(2), true, int64(-9), 4, int64(-1), int64(math.MaxInt64), "", "err\xff", []byte(nil), []byte(`1`), true, int64(time.Second))
	f.Fuzz(func(t *testing.T, st, oc uint8, resubmit bool, prio int64, attempts int, t1, t2 int64, lock, errText string, data, result []byte, retry bool, base int64) {
		r := &record{
			State: stateCodes[1+int(st)%3], Outcome: outcomeCodes[int(oc)%4], Resubmit: resubmit,
			Priority: int(prio), Attempts: attempts & math.MaxInt32, AddedAt: t1, ScheduledAt: t2, ExpiresAt: t1 ^ t2,
			Lock: lock, LastLock: errText + lock, Error: errText, Data: data, Result: result,
			Snoozes: int(uint16(prio)),
		}
		if len(r.Data) == 0 {
			r.Data = nil
		}
		if len(r.Result) == 0 {
			r.Result = nil
		}
		if retry {
			r.Retry = &RetryPolicy{MaxAttempts: attempts & 0xffff, Backoff: Backoff(lock), Base: time.Duration(base), Max: time.Duration(-base)}
		}
		b, err := r.encode()
		if err != nil {
			return // too large
		}
		got, err := decodeRecord(b, "t", "id")
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip\n got %+v\nwant %+v", got, r)
		}
	})
}

// Any bytes decode to a record or an error, never a panic; a record that
// decodes encodes back to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range sampleRecords() {
		b, _ := r.encode()
		f.Add(b)
	}
	f.Add([]byte(`{"s":"pending","ta":1,"ts":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b, "t", "id")
		if err != nil || b[0] != formatBinary2 {
			return
		}
		again, err := r.encode()
		if err != nil {
			return
		}
		if !bytes.Equal(again, b) {
			// Varints have one shortest form; a longer one in the input
			// decodes the same but encodes shorter.
			r2, err := decodeRecord(again, "t", "id")
			if err != nil || !reflect.DeepEqual(r2, r) {
				t.Fatalf("re-encoded record differs: %v\n%+v\n%+v", err, r, r2)
			}
		}
	})
}

// The history keeps the newest MaxErrorHistory errors, each cut to its
// end; it gives way to data, result and progress, newest entries kept,
// so a job at the size limit still fails and finishes.
func TestAttemptErrorHistory(t *testing.T) {
	r := &record{State: Running}
	for i := 1; i <= MaxErrorHistory+3; i++ {
		r.Attempts = i
		r.failAttempt(fmt.Sprintf("attempt %d failed", i), int64(i))
	}
	if len(r.Errors) != MaxErrorHistory || r.Errors[0].attempt != 4 || r.Errors[MaxErrorHistory-1].err != "attempt 13 failed" || r.Errors[0].at != 4 {
		t.Fatalf("history %+v", r.Errors)
	}
	long := strings.Repeat("x", 5000) + "the end"
	r.failAttempt(long, 14)
	if e := r.Errors[len(r.Errors)-1].err; len(e) > MaxHistoryErrorSize || !strings.HasSuffix(e, "the end") || !strings.HasPrefix(e, truncatedMark) {
		t.Fatalf("a long error kept as %d bytes: %.20q…", len(e), e)
	}
	if r.Error != long {
		t.Fatalf("the last error is cut to %d bytes", len(r.Error))
	}
	b, err := r.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeRecord(b, "t", "id")
	if err != nil || !reflect.DeepEqual(got.Errors, r.Errors) {
		t.Fatalf("decoded history %+v (%v), want %+v", got.Errors, err, r.Errors)
	}

	// Data that leaves room for the last error and three entries: the
	// three newest are stored.
	r.Data = json.RawMessage(`"` + strings.Repeat("d", MaxDataSize-len(r.Error)-3*(len("attempt 13 failed")+historyEntryOverhead)-MaxHistoryErrorSize-historyEntryOverhead-2) + `"`)
	b, err = r.encode()
	if err != nil {
		t.Fatalf("a record whose history does not fit: %v", err)
	}
	got, err = decodeRecord(b, "t", "id")
	if err != nil || len(got.Errors) == 0 || len(got.Errors) >= MaxErrorHistory || !reflect.DeepEqual(got.Errors, r.Errors[len(r.Errors)-len(got.Errors):]) {
		t.Fatalf("stored history %d entries (%v), want the newest that fit", len(got.Errors), err)
	}
	// Data at the limit: none stored, the record still written.
	r.Data = json.RawMessage(`"` + strings.Repeat("d", MaxDataSize-len(r.Error)-2) + `"`)
	if b, err = r.encode(); err != nil {
		t.Fatalf("a record at the limit with a history: %v", err)
	}
	if got, err = decodeRecord(b, "t", "id"); err != nil || got.Errors != nil {
		t.Fatalf("history at the limit: %+v (%v)", got.Errors, err)
	}
}
