package jobstage_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/jobstagetest"
)

// Statement's kind has fairness settings of its own.
type Statement struct {
	Customer string `json:"customer"`
}

func (Statement) Kind() string { return "statement" }

func (Statement) Defaults() jobstage.Defaults {
	return jobstage.Defaults{
		Zones:      2,
		MaxRunning: 8,
		Keys:       map[string]fdbq.KeyPolicy{"acme": {Weight: 3, MaxStarts: 10, Per: time.Minute}},
		KeyDefault: fdbq.KeyPolicy{MaxRunning: 1},
	}
}

// EnqueueOptions.Key reaches the stored jobs, and a kind's fairness
// Defaults its registered settings; a bad key is refused.
func TestEnqueueKey(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	job, err := jobstage.Enqueue(ctx, c, Statement{Customer: "acme"}, &jobstage.EnqueueOptions{Key: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if job.Key != "acme" {
		t.Errorf("enqueued job's key %q, want acme", job.Key)
	}
	jobs, err := jobstage.EnqueueMany(ctx, c, []Statement{{}, {}}, &jobstage.EnqueueOptions{Key: "globex"})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		stored, err := c.Queue().Get(ctx, c.DB(), "statement", j.ID)
		if err != nil || stored.Key != "globex" {
			t.Errorf("stored %+v %v, want key globex", stored, err)
		}
	}
	if j, err := jobstage.Enqueue(ctx, c, Statement{}, nil); err != nil || j.Key != "" {
		t.Errorf("enqueued without a key: %+v %v", j, err)
	}
	info, err := c.Queue().GetType(ctx, c.DB(), "statement")
	if err != nil {
		t.Fatal(err)
	}
	want := fdbq.DefaultTypeSettings()
	want.Zones, want.MaxRunning = 2, 8
	want.Keys = map[string]fdbq.KeyPolicy{"acme": {Weight: 3, MaxStarts: 10, Per: time.Minute}}
	want.KeyDefault = fdbq.KeyPolicy{MaxRunning: 1}
	if !info.Settings.Equal(want) {
		t.Errorf("registered settings %+v, want %+v", info.Settings, want)
	}
	if _, err := jobstage.Enqueue(ctx, c, Statement{}, &jobstage.EnqueueOptions{Key: "bad\x00key"}); !errors.Is(err, fdbq.ErrInvalidJob) {
		t.Errorf("Enqueue with a key holding a NUL: %v, want ErrInvalidJob", err)
	}
}
