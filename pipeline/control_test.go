package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// endings records what each committed outcome did (Options.OnEnded).
type endings struct {
	mu  sync.Mutex
	all map[string][]endRecord
}

type endRecord struct {
	ended fdbq.Ended
	err   error
}

func (r *endings) on(e *consumer.Envelope) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.all == nil {
		r.all = map[string][]endRecord{}
	}
	r.all[e.Lease.ID] = append(r.all[e.Lease.ID], endRecord{e.Ended(), e.Err()})
}

func (r *endings) of(id string) []endRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]endRecord(nil), r.all[id]...)
}

// A handler chooses how its job ends: Cancel finishes it canceled with
// attempts left, Snooze runs it again without counting the attempt (and
// the handler sees it), RetryAt fails the attempt to run at a time of its
// choosing; wrapped, they work the same. Each acknowledgement commits.
func TestHandlerControl(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.Retry = fdbq.RetryPolicy{MaxAttempts: 5, Backoff: fdbq.Constant, Base: time.Millisecond}
	e := newEnv(t, envOptions{settings: &s})
	far := time.Now().Add(24 * time.Hour).Truncate(time.Millisecond)
	type seen struct{ attempt, snoozes int }
	var mu sync.Mutex
	visits := map[string][]seen{}
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[struct{}]) (string, error) {
		mu.Lock()
		visits[j.ID] = append(visits[j.ID], seen{j.Attempt, j.Snoozes})
		mu.Unlock()
		switch j.ID {
		case "cancel":
			return "", consumer.Cancel("the order is gone")
		case "cancel-wrapped":
			return "", fmt.Errorf("charging: %w", consumer.Cancel("card expired"))
		case "snooze":
			if j.Snoozes < 2 {
				return "", consumer.Snooze(time.Millisecond)
			}
			return "done", nil
		case "retry-at":
			return "", consumer.RetryAt(far, errors.New("rate limited"))
		}
		return "", fmt.Errorf("unexpected job %s", j.ID)
	}, consumer.Options{Concurrency: 2})
	var rec endings
	p := e.start(t, pipeline.From(e.producer(producer.Options{})).To(c).WithOptions(pipeline.Options{OnEnded: rec.on}))
	e.add(t, fdbq.NewJob{ID: "cancel"}, fdbq.NewJob{ID: "cancel-wrapped"}, fdbq.NewJob{ID: "snooze"}, fdbq.NewJob{ID: "retry-at"})

	got := e.waitFinished(t, "cancel", "cancel-wrapped", "snooze")
	for i, want := range []string{"the order is gone", "card expired"} {
		if got[i].Outcome != fdbq.Canceled || got[i].Attempts != 1 || got[i].Error != want {
			t.Errorf("%s: %s after %d attempts, error %q; want canceled after 1, %q", got[i].ID, got[i].Outcome, got[i].Attempts, got[i].Error, want)
		}
	}
	if j := got[2]; j.Outcome != fdbq.Succeeded || j.Attempts != 1 || j.Snoozes != 2 || string(j.Result) != `"done"` {
		t.Errorf("snoozed job: %s after %d attempts and %d snoozes, result %s", j.Outcome, j.Attempts, j.Snoozes, j.Result)
	}
	e.waitStore(t, "the retried job pending", func() bool { return e.get(t, "retry-at").State == fdbq.Pending })
	if j := e.get(t, "retry-at"); !j.ScheduledAt.Equal(far) || j.Attempts != 1 || j.Error != "rate limited" {
		t.Errorf("job failed with RetryAt: runs at %v (want %v), %d attempts, error %q", j.ScheduledAt, far, j.Attempts, j.Error)
	}

	mu.Lock()
	if v := fmt.Sprint(visits["snooze"]); v != "[{1 0} {1 1} {1 2}]" {
		t.Errorf("the snoozed job's handler saw (attempt, snoozes) %s, want [{1 0} {1 1} {1 2}]", v)
	}
	mu.Unlock()
	// Stop returns once every job the pipeline held was reported.
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, m := len(rec.of("retry-at")), len(rec.of("snooze")); n != 1 || m != 3 {
		t.Fatalf("outcomes reported: %d of the retried job, %d of the snoozed one; want 1 and 3", n, m)
	}
	for _, id := range []string{"cancel", "cancel-wrapped", "snooze", "retry-at"} {
		for i, r := range rec.of(id) {
			if r.err != nil {
				t.Errorf("%s: acknowledgement %d: %v", id, i, r.err)
			}
		}
	}
	if r := rec.of("retry-at")[0].ended; !r.Retried || !r.At.Equal(far) {
		t.Errorf("RetryAt's commit said %+v", r)
	}
	if r := rec.of("snooze")[0].ended; r.Retried || r.State != fdbq.Pending {
		t.Errorf("Snooze's commit said %+v", r)
	}
}

type invoice struct{ N int }

func (invoice) Kind() string { return "invoice" }

// A consumer whose data type names a kind is refused when it is built
// with a producer of another type, and accepted with its own.
func TestBuildRefusesKindMismatch(t *testing.T) {
	e := newEnv(t, envOptions{types: []string{"t", "invoice"}})
	c := mustConsumer(t, func(context.Context, *consumer.Job[invoice]) (string, error) { return "", nil }, consumer.Options{})
	if c.Kind() != "invoice" {
		t.Fatalf("consumer kind %q", c.Kind())
	}
	_, err := pipeline.From(producer.New(e.q, "t", producer.Options{})).To(c).Build()
	if err == nil || !strings.Contains(err.Error(), `kind "invoice"`) || !strings.Contains(err.Error(), `type "t"`) {
		t.Fatalf("a producer of t feeding an invoice consumer: %v", err)
	}
	if _, err := pipeline.From(producer.New(e.q, "invoice", producer.Options{})).To(c).Build(); err != nil {
		t.Fatalf("a producer of the consumer's own kind: %v", err)
	}
}
