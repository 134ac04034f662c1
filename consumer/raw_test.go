package consumer_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
)

// The typed handler Raw adapts sees the job as the raw one is: its
// snoozes, and progress going where the raw job's goes (NewJob's
// Progress, in a test).
func TestRawKeepsTheJob(t *testing.T) {
	var got []string
	raw := consumer.NewJob(json.RawMessage(`{"n":7}`), consumer.JobOptions{ID: "a", Type: "t", Attempt: 2, Snoozes: 3,
		Progress: func(_ context.Context, p json.RawMessage) error {
			got = append(got, string(p))
			return nil
		}})
	var seen consumer.Job[num]
	h := consumer.Raw(func(ctx context.Context, j *consumer.Job[num]) (int, error) {
		seen = *j
		return j.Data.N, j.Progress(ctx, "half")
	})
	res, err := h(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != "7" || seen.Attempt != 2 || seen.Snoozes != 3 || seen.ID != "a" {
		t.Errorf("result %s; the typed handler saw attempt %d, %d snoozes, id %q", res, seen.Attempt, seen.Snoozes, seen.ID)
	}
	if len(got) != 1 || got[0] != `"half"` {
		t.Errorf("progress received: %q", got)
	}
}

// Data that does not decode into the typed handler's type cancels the
// job under Raw as it does under New, instead of spending its attempts.
func TestRawUndecodableCancels(t *testing.T) {
	q := newQueue(t, nil)
	ctx := context.Background()
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "t", ID: "bad", Data: json.RawMessage(`{"n":"seven"}`), MaxAttempts: 5}); err != nil {
		t.Fatal(err)
	}
	ls, err := q.Accept(ctx, "t", fdbq.AcceptOptions{})
	if err != nil || len(ls) != 1 {
		t.Fatalf("accept: %d leases, %v", len(ls), err)
	}
	ran := false
	c, err := consumer.New(consumer.Raw(func(context.Context, *consumer.Job[num]) (int, error) {
		ran = true
		return 0, nil
	}), consumer.Options{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	serveLeases(t, c, q, ls, consumer.EnvelopeOptions{})
	if ran {
		t.Error("the typed handler ran on data that does not decode")
	}
	if j := get(t, q, "bad"); j.State != fdbq.Finished || j.Outcome != fdbq.Canceled || j.Attempts != 1 || !strings.Contains(j.Error, "decode") {
		t.Errorf("undecodable job under Raw: %s/%s after %d attempts, %q; want finished/canceled after 1", j.State, j.Outcome, j.Attempts, j.Error)
	}
}
