package fdbq

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// A record format 2 stored before trace contexts existed (this version's
// sampleRecords()[1] as a workflow's job, written by the version before)
// reads the same, with no trace context.
func TestRecordReadsFormat2WithoutTrace(t *testing.T) {
	const stored = "020200370d020980a0abfef96282a0abfef96284a0abfef96286a0abfef96200e6f4aefef962098e8080808040203031323334353637383961626364656630313233343536373839616263646566002066656463626139383736353433323130666564636261393837363534333231300a68c3a96c6c6f20e29c930e7b22746f223a226140622e63227d00055b312c325d03066c696e65617280a8d6b9078080c58bc6d101ac0220a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5"
	b, err := hex.DecodeString(stored)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeRecord(b, "t", "id")
	if err != nil {
		t.Fatal(err)
	}
	want := sampleRecords()[1]
	want.Workflow = true
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if !got.Trace.IsZero() {
		t.Fatalf("trace %+v", got.Trace)
	}
	again, err := got.encode()
	if err != nil || !bytes.Equal(again, b) {
		t.Fatalf("encoded again differently (%v)", err)
	}
}

// A stored trace context whose ids are zeros, or whose tracestate is too
// long, does not make its job unreadable: it reads as none, or without
// the tracestate.
func TestRecordDamagedTraceReadsAsNone(t *testing.T) {
	r := &record{State: Pending, AddedAt: 1, ScheduledAt: 1, Trace: TraceContext{TraceID: [16]byte{1}, SpanID: [8]byte{1}, State: "a=b"}}
	b, err := r.encode()
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, r.Trace.TraceID[:])
	zeros := bytes.Clone(b)
	copy(zeros[at+16:at+24], make([]byte, 8)) // span id of zeros
	got, err := decodeRecord(zeros, "t", "id")
	if err != nil || !got.Trace.IsZero() {
		t.Fatalf("zero span id: %v, %+v", err, got)
	}
	long := append(b[:at+traceSize:at+traceSize], 0x81, 0x04) // a tracestate of 513 bytes
	long = append(long, strings.Repeat("a", MaxTraceStateSize+1)...)
	got, err = decodeRecord(long, "t", "id")
	if err != nil || got.Trace.State != "" || got.Trace.TraceID != r.Trace.TraceID {
		t.Fatalf("long tracestate: %v, %+v", err, got)
	}
	if _, err := decodeRecord(b[:at+10], "t", "id"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a record cut in its trace context: %v", err)
	}
}

func TestParseTraceContext(t *testing.T) {
	const id, span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, c := range []struct {
		parent, state string
		ok            bool
		wantState     string
		wantFlags     byte
	}{
		{parent: "00-" + id + "-" + span + "-01", ok: true, wantFlags: 1},
		{parent: "00-" + id + "-" + span + "-00", state: " a=1 ,, b@c=x y ", ok: true, wantState: "a=1,b@c=x y"},
		{parent: "01-" + id + "-" + span + "-03-what-comes-later", ok: true, wantFlags: 3},
		{parent: "cc-" + id + "-" + span + "-09", ok: true, wantFlags: 1},
		{parent: "00-" + id + "-" + span + "-01", state: "A=1", ok: true, wantFlags: 1}, // an invalid tracestate is dropped
		{parent: "00-" + id + "-" + span + "-01", state: "a=1,b", ok: true, wantFlags: 1},
		{parent: "00-" + id + "-" + span + "-01", state: strings.Repeat("k=v,", 33), ok: true, wantFlags: 1},
		{parent: "00-" + id + "-" + span + "-01-"},
		{parent: "00-" + id + "-" + span + "-04"},
		{parent: "ff-" + id + "-" + span + "-01"},
		{parent: "00-" + strings.ToUpper(id) + "-" + span + "-01"},
		{parent: "00-00000000000000000000000000000000-" + span + "-01"},
		{parent: "00-" + id + "-0000000000000000-01"},
		{parent: "00-" + id + "-" + span},
		{parent: "00-" + id + "x-" + span + "-01"},
		{parent: ""},
		{parent: "\xff\x00"},
	} {
		got, err := ParseTraceContext(c.parent, c.state)
		if (err == nil) != c.ok {
			t.Errorf("%q: error %v", c.parent, err)
			continue
		}
		if !c.ok {
			if !errors.Is(err, ErrInvalidTraceContext) || !got.IsZero() {
				t.Errorf("%q: %v, %+v", c.parent, err, got)
			}
			continue
		}
		if got.TraceIDString() != id || got.Flags != c.wantFlags || got.State != c.wantState {
			t.Errorf("%q %q: %+v", c.parent, c.state, got)
		}
		if p := got.Traceparent(); !strings.HasPrefix(p, "00-"+id+"-"+span+"-") || len(p) != 55 {
			t.Errorf("%q: traceparent %q", c.parent, p)
		}
	}
}

// A tracestate over MaxTraceStateSize keeps its first entries that fit.
func TestParseTraceContextTrimsState(t *testing.T) {
	var members []string
	for i := range 20 {
		members = append(members, "k"+strings.Repeat("x", 40)+string(rune('a'+i))+"=v")
	}
	got, err := ParseTraceContext("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", strings.Join(members, ","))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.State) > MaxTraceStateSize || !strings.HasPrefix(strings.Join(members, ","), got.State) || len(got.State) < MaxTraceStateSize-50 {
		t.Fatalf("state of %d bytes: %q", len(got.State), got.State)
	}
}

// A job added with a trace context gives it to its lease and to Get; one
// whose ids are not valid is added without it.
func TestAddKeepsTraceContext(t *testing.T) {
	ctx := context.Background()
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	t.Cleanup(func() { db.Close() })
	q := New(db, Options{})
	if err := q.SetType(ctx, db, "t", DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	tc, err := ParseTraceContext("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Add(ctx, q.DB(), NewJob{Type: "t", ID: "traced", Trace: tc}); err != nil {
		t.Fatal(err)
	}
	bad := TraceContext{SpanID: [8]byte{1}, State: "a=1"}
	if _, err := q.Add(ctx, q.DB(), NewJob{Type: "t", ID: "bad", Trace: bad}); err != nil {
		t.Fatal(err)
	}
	j, err := q.Get(ctx, q.DB(), "t", "bad")
	if err != nil || !j.Trace.IsZero() {
		t.Fatalf("bad: %v %+v", err, j)
	}
	leases, err := q.Accept(ctx, "t", AcceptOptions{Max: 2, Window: 2})
	if err != nil || len(leases) != 2 {
		t.Fatalf("accept: %v, %d", err, len(leases))
	}
	for _, l := range leases {
		if l.ID == "traced" && l.Trace != tc {
			t.Fatalf("lease trace %+v, want %+v", l.Trace, tc)
		}
	}
	// A retry keeps it.
	for _, l := range leases {
		if _, err := q.End(ctx, q.DB(), l, Ending{How: AttemptFailed, Cause: "again"}); err != nil {
			t.Fatal(err)
		}
	}
	j, err = q.Get(ctx, q.DB(), "t", "traced")
	if err != nil || j.Trace != tc || j.Attempts != 1 {
		t.Fatalf("after a failed attempt: %v %+v", err, j)
	}
}

// Whatever the headers, ParseTraceContext returns an error or a context
// that is valid, whose traceparent reads back the same, and whose
// tracestate fits MaxTraceStateSize and parses back unchanged.
func FuzzParseTraceContext(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-x", " a=1 ,,")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", "a@b=c d")
	f.Add("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "")
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", strings.Repeat("k=v,", 40))
	f.Add("\x00\xff-", "=\x00")
	f.Fuzz(func(t *testing.T, parent, state string) {
		tc, err := ParseTraceContext(parent, state)
		if err != nil {
			if !tc.IsZero() {
				t.Fatalf("error %v with %+v", err, tc)
			}
			return
		}
		if !tc.valid() || tc.Flags > 3 || len(tc.State) > MaxTraceStateSize {
			t.Fatalf("%+v", tc)
		}
		again, err := ParseTraceContext(tc.Traceparent(), tc.State)
		if err != nil || again != tc {
			t.Fatalf("read back %+v (%v), want %+v", again, err, tc)
		}
		r := &record{State: Pending, AddedAt: 1, ScheduledAt: 1, Trace: tc}
		b, err := r.encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRecord(b, "t", "id")
		if err != nil || got.Trace != tc {
			t.Fatalf("stored %+v, read %+v (%v)", tc, got, err)
		}
	})
}
