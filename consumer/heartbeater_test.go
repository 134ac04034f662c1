package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
)

// TestHeartbeaterRenewsAndHalts: one heartbeater renews the leases of
// several envelopes in shared transactions; when one job's lock is gone,
// that envelope alone is halted and the others are still renewed.
func TestHeartbeaterRenewsAndHalts(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.ActivityTimeout = 300 * time.Millisecond
	q := newQueue(t, &s)
	ls := leases(t, q, 3)
	h := consumer.NewHeartbeater(10 * time.Millisecond)
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer h.Stop(context.Background())
	var envs []*consumer.Envelope
	for _, l := range ls {
		e := consumer.NewEnvelope(context.Background(), q, l, consumer.EnvelopeOptions{Heartbeater: h, Heartbeat: time.Hour})
		if !e.Start() {
			t.Fatal("start refused")
		}
		envs = append(envs, e)
	}
	renewedAfter := func(at time.Time, ids ...string) func() bool {
		return func() bool {
			for _, id := range ids {
				if !get(t, q, id).HeartbeatAt.After(at) {
					return false
				}
			}
			return true
		}
	}
	start := get(t, q, "j000").HeartbeatAt
	waitStore(t, q, "every lease renewed", renewedAfter(start, "j000", "j001", "j002"))

	if err := q.Cancel(context.Background(), q.DB(), "t", "j001"); err != nil {
		t.Fatal(err)
	}
	recv(t, envs[1].Context().Done(), "the halt")
	if cause := context.Cause(envs[1].Context()); !errors.Is(cause, consumer.ErrHalted) || !errors.Is(cause, fdbq.ErrHalt) {
		t.Fatalf("cause %v, want ErrHalted, which is fdbq.ErrHalt", cause)
	}
	halted := time.Now()
	waitStore(t, q, "the others renewed after the halt", renewedAfter(halted.Add(-time.Millisecond), "j000", "j002"))
	for _, e := range []*consumer.Envelope{envs[0], envs[2]} {
		if e.Context().Err() != nil {
			t.Fatalf("envelope %s halted with its lock held: %v", e.Lease.ID, context.Cause(e.Context()))
		}
	}
	for _, e := range envs {
		e.Ack(json.RawMessage(`"done"`), nil)
	}
	if !errors.Is(envs[1].Err(), fdbq.ErrHalt) || envs[0].Err() != nil || envs[2].Err() != nil {
		t.Fatalf("acks: %v, %v, %v", envs[0].Err(), envs[1].Err(), envs[2].Err())
	}
	for id, want := range map[string]fdbq.Outcome{"j000": fdbq.Succeeded, "j001": fdbq.Canceled, "j002": fdbq.Succeeded} {
		if j := get(t, q, id); j.Outcome != want {
			t.Fatalf("%s: %s, want %s", id, j.Outcome, want)
		}
	}
}
