package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
)

func isDone(e *consumer.Envelope) bool {
	select {
	case <-e.Done():
		return true
	default:
		return false
	}
}

// TestEnvelopeAcks: a job delivered to three consumers commits after the
// third acknowledgement, failing with the first error; OnDone runs once,
// before Done is closed.
func TestEnvelopeAcks(t *testing.T) {
	q := newQueue(t, nil)
	ls := leases(t, q, 2)
	var calls atomic.Int32
	var doneBeforeOnDone atomic.Bool
	onDone := func(e *consumer.Envelope) {
		calls.Add(1)
		if isDone(e) {
			doneBeforeOnDone.Store(true)
		}
	}
	ok := consumer.NewEnvelope(context.Background(), q, ls[0], consumer.EnvelopeOptions{Acks: 3, OnDone: onDone})
	bad := consumer.NewEnvelope(context.Background(), q, ls[1], consumer.EnvelopeOptions{Acks: 3, OnDone: onDone})
	for i := range 2 {
		for _, e := range []*consumer.Envelope{ok, bad} {
			if !e.Start() {
				t.Fatal("start refused")
			}
			var err error
			if e == bad && i == 1 {
				err = errors.New("second consumer failed")
			}
			e.Ack(json.RawMessage(`"r"`), err)
			if isDone(e) || e.PendingAcks() != 2-i {
				t.Fatalf("after %d acks: done %v, %d pending", i+1, isDone(e), e.PendingAcks())
			}
		}
	}
	if j := get(t, q, "j000"); j.State != fdbq.Running {
		t.Fatalf("job committed after two of three acks: %s", j.State)
	}
	ok.Start()
	ok.Ack(json.RawMessage(`"r"`), nil)
	bad.Start()
	bad.Ack(nil, errors.New("third consumer failed"))
	for _, e := range []*consumer.Envelope{ok, bad} {
		if !isDone(e) || e.Err() != nil {
			t.Fatalf("after three acks: done %v, err %v", isDone(e), e.Err())
		}
		if e.Context().Err() == nil {
			t.Fatal("context of a settled envelope not cancelled")
		}
	}
	if j := get(t, q, "j000"); j.Outcome != fdbq.Succeeded || string(j.Result) != `"r"` {
		t.Fatalf("all succeeded: %s %s", j.Outcome, j.Result)
	}
	if j := get(t, q, "j001"); j.Outcome != fdbq.Failed || j.Error != "second consumer failed" {
		t.Fatalf("one failed: %s %q", j.Outcome, j.Error)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("OnDone ran %d times for 2 envelopes", n)
	}
	if doneBeforeOnDone.Load() {
		t.Fatal("Done was closed before OnDone ran")
	}
}

// TestEnvelopeHeartbeatHalt: the heartbeat renews the lease, and cancels
// the envelope's context with ErrHalted once the job's lock is gone; the
// acknowledgement then commits nothing.
func TestEnvelopeHeartbeatHalt(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.ActivityTimeout = 300 * time.Millisecond
	q := newQueue(t, &s)
	ls := leases(t, q, 1)
	e := consumer.NewEnvelope(context.Background(), q, ls[0], consumer.EnvelopeOptions{Heartbeat: 10 * time.Millisecond})
	if !e.Start() {
		t.Fatal("start refused")
	}
	// Heartbeats renew the lease.
	before := get(t, q, "j000").HeartbeatAt
	waitStore(t, q, "two heartbeats", func() bool {
		return get(t, q, "j000").HeartbeatAt.Sub(before) >= 20*time.Millisecond
	})
	if err := q.Cancel(context.Background(), q.DB(), "t", "j000"); err != nil {
		t.Fatal(err)
	}
	recv(t, e.Context().Done(), "the halt")
	if cause := context.Cause(e.Context()); !errors.Is(cause, consumer.ErrHalted) || !errors.Is(cause, fdbq.ErrHalt) {
		t.Fatalf("cause %v, want ErrHalted, which is fdbq.ErrHalt", cause)
	}
	e.Ack(json.RawMessage(`"late"`), nil)
	if !errors.Is(e.Err(), fdbq.ErrHalt) {
		t.Fatalf("ack of a halted job: %v, want ErrHalt", e.Err())
	}
	if j := get(t, q, "j000"); j.Outcome != fdbq.Canceled || len(j.Result) != 0 {
		t.Fatalf("halted job: %s %s", j.Outcome, j.Result)
	}
}

// TestEnvelopeStopping: once the pipeline stops past its drain deadline
// (ErrStopping), a failed attempt goes back to pending uncounted, while a
// successful one is still committed.
func TestEnvelopeStopping(t *testing.T) {
	q := newQueue(t, nil)
	ls := leases(t, q, 2)
	parent, stop := context.WithCancelCause(context.Background())
	failed := consumer.NewEnvelope(parent, q, ls[0], consumer.EnvelopeOptions{})
	succeeded := consumer.NewEnvelope(parent, q, ls[1], consumer.EnvelopeOptions{})
	failed.Start()
	succeeded.Start()
	stop(consumer.ErrStopping)
	if failed.Start() {
		t.Fatal("Start of a started job after the stop reported it may run")
	}
	failed.Ack(nil, context.Cause(failed.Context()))
	succeeded.Ack(json.RawMessage(`1`), nil)
	if failed.Err() != nil || succeeded.Err() != nil {
		t.Fatalf("acks: %v, %v", failed.Err(), succeeded.Err())
	}
	if j := get(t, q, "j000"); j.State != fdbq.Pending || j.Attempts != 0 || j.Error != "" {
		t.Fatalf("interrupted job: %s, %d attempts, %q", j.State, j.Attempts, j.Error)
	}
	if j := get(t, q, "j001"); j.Outcome != fdbq.Succeeded {
		t.Fatalf("job done before the stop: %s", j.Outcome)
	}
}

// TestReleaseUnstarted: releasing hands back only what no handler started;
// a released envelope cannot start, and its acknowledgement does nothing.
func TestReleaseUnstarted(t *testing.T) {
	q := newQueue(t, nil)
	ls := leases(t, q, 3)
	var calls atomic.Int32
	var envs []*consumer.Envelope
	for _, l := range ls {
		envs = append(envs, consumer.NewEnvelope(context.Background(), q, l, consumer.EnvelopeOptions{
			Heartbeat: time.Hour, OnDone: func(*consumer.Envelope) { calls.Add(1) },
		}))
	}
	if !envs[0].Start() {
		t.Fatal("start refused")
	}
	n, err := consumer.ReleaseUnstarted(context.Background(), envs)
	if n != 2 || err != nil {
		t.Fatalf("released %d (%v), want 2", n, err)
	}
	if n, _ := consumer.ReleaseUnstarted(context.Background(), envs); n != 0 {
		t.Fatalf("released %d again", n)
	}
	for _, e := range envs[1:] {
		if !isDone(e) || e.Err() != nil || !errors.Is(context.Cause(e.Context()), consumer.ErrReleased) {
			t.Fatalf("released envelope: done %v, err %v, cause %v", isDone(e), e.Err(), context.Cause(e.Context()))
		}
		if e.Start() {
			t.Fatal("a released envelope started")
		}
		e.Ack(nil, context.Cause(e.Context()))
		if j := get(t, q, e.Lease.ID); j.State != fdbq.Pending || j.Attempts != 0 || j.Error != "" {
			t.Fatalf("released job %s: %s, %d attempts, %q", j.ID, j.State, j.Attempts, j.Error)
		}
	}
	if isDone(envs[0]) {
		t.Fatal("started envelope was released")
	}
	if j := get(t, q, "j000"); j.State != fdbq.Running {
		t.Fatalf("started job: %s", j.State)
	}
	envs[0].Ack(nil, nil)
	if j := get(t, q, "j000"); j.Outcome != fdbq.Succeeded {
		t.Fatalf("started job: %s", j.Outcome)
	}
	if c := calls.Load(); c != 3 {
		t.Fatalf("OnDone ran %d times, want 3", c)
	}
}
