package pipeline_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

type email struct {
	To string `json:"to"`
}

// emailJobs returns n jobs of type "t" with ids 0..n-1 and a recipient each.
func emailJobs(n int) []fdbq.NewJob {
	jobs := make([]fdbq.NewJob, n)
	for i := range jobs {
		jobs[i] = fdbq.NewJob{Type: "t", ID: fmt.Sprint(i), Data: []byte(fmt.Sprintf(`{"to":"u%d"}`, i))}
	}
	return jobs
}

// TestPipelineSmoke runs 2,000 jobs through a pipeline on a durable store:
// every job is handled, none is left running.
func TestPipelineSmoke(t *testing.T) {
	e := newEnv(t, envOptions{dir: t.TempDir()})
	const n = 2000
	e.add(t, emailJobs(n)...)
	var handled atomic.Int64
	done := make(chan struct{})
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[email]) (string, error) {
		if j.Data.To == "" {
			return "", fmt.Errorf("no recipient")
		}
		if handled.Add(1) == n {
			close(done)
		}
		return "sent to " + j.Data.To, nil
	}, consumer.Options{Concurrency: 16})
	p := e.start(t, pipeline.From(e.producer(producer.Options{})).To(c))
	recv(t, done, "every job handled")
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	fin, pend, run := e.count(t, fdbq.Finished), e.count(t, fdbq.Pending), e.count(t, fdbq.Running)
	if fin+pend != n || run != 0 {
		t.Fatalf("finished %d pending %d running %d", fin, pend, run)
	}
}
