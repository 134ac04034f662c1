package pipeline_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

type email struct {
	To string `json:"to"`
}

func TestPipelineSmoke(t *testing.T) {
	st, err := embedded.Open(t.TempDir(), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	defer db.Close()
	q := fdbq.New(db, fdbq.Options{})
	ctx := context.Background()
	if err := q.SetType(ctx, db, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	var jobs []fdbq.NewJob
	for i := 0; i < n; i++ {
		jobs = append(jobs, fdbq.NewJob{Type: "email", ID: fmt.Sprint(i), Data: []byte(fmt.Sprintf(`{"to":"u%d"}`, i))})
	}
	if _, err := q.AddBatch(ctx, db, jobs); err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	done := make(chan struct{})
	c, err := consumer.New(func(ctx context.Context, j *consumer.Job[email]) (string, error) {
		if j.Data.To == "" {
			return "", fmt.Errorf("no recipient")
		}
		if handled.Add(1) == n {
			close(done)
		}
		return "sent to " + j.Data.To, nil
	}, consumer.Options{Concurrency: 16})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.From(producer.New(q, "email", producer.Options{})).To(c).Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("handled %d of %d", handled.Load(), n)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	fin, _ := q.Count(ctx, db, "email", fdbq.Finished)
	pend, _ := q.Count(ctx, db, "email", fdbq.Pending)
	run, _ := q.Count(ctx, db, "email", fdbq.Running)
	t.Logf("finished %d pending %d running %d; stats %+v", fin, pend, run, db.Stats().Commits.Load())
	if fin+pend != n || run != 0 {
		t.Fatalf("finished %d pending %d running %d", fin, pend, run)
	}
}
