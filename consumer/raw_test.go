package consumer_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jobstage/jobstage/consumer"
)

// TestRawKeepsTheJob: the typed handler under Raw sees the job's metadata
// as the raw one has it, snoozes included, and its progress goes where
// the raw job's goes.
func TestRawKeepsTheJob(t *testing.T) {
	var progress []string
	job := consumer.NewJob(json.RawMessage(`{"n":7}`), consumer.JobOptions{ID: "r", Type: "t", Attempt: 3, Snoozes: 2, Priority: 5,
		Progress: func(_ context.Context, p json.RawMessage) error {
			progress = append(progress, string(p))
			return nil
		}})
	var seen consumer.Job[num]
	h := consumer.Raw(func(ctx context.Context, j *consumer.Job[num]) (int, error) {
		seen = *j
		return j.Data.N, j.Progress(ctx, "half")
	})
	r, err := h(context.Background(), job)
	if err != nil || string(r) != "7" {
		t.Fatalf("Raw: %s, %v", r, err)
	}
	if seen.ID != "r" || seen.Type != "t" || seen.Attempt != 3 || seen.Snoozes != 2 || seen.Priority != 5 || seen.Data.N != 7 {
		t.Errorf("typed handler saw %+v", seen)
	}
	if len(progress) != 1 || progress[0] != `"half"` {
		t.Errorf("progress %q", progress)
	}
}
