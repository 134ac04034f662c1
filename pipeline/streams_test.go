package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reugn/go-streams/flow"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// TestGoStreamsSourceFlowSink runs jobs from a producer as a go-streams
// Source, through a go-streams Map and Batch, into a consumer as a Sink:
// every job finishes, and the sink keeps the consumer's concurrency.
func TestGoStreamsSourceFlowSink(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 200
	e.add(t, emailJobs(n)...)
	src, err := pipeline.NewSource(ctx, e.producer(producer.Options{}), 8)
	if err != nil {
		t.Fatal(err)
	}
	var handled, inFlight, maxInFlight atomic.Int64
	done := make(chan struct{})
	c := consumer.Must(consumer.New(func(ctx context.Context, j *consumer.Job[email]) (string, error) {
		defer inFlight.Add(-1)
		if v := inFlight.Add(1); v > maxInFlight.Load() {
			maxInFlight.Store(v)
		}
		if handled.Add(1) == n {
			close(done)
		}
		return j.Data.To, nil
	}, consumer.Options{Concurrency: 4}))
	sink := pipeline.NewSink(c)
	// A go-streams Map that passes the envelope through (it could inspect
	// or rewrite the lease), then a Batch that paces jobs in groups.
	m := flow.NewMap(func(e *consumer.Envelope) *consumer.Envelope { return e }, 1)
	go src.Via(m).Via(flow.NewBatch[any](16, 10*time.Millisecond)).To(sink)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("handled %d of %d", handled.Load(), n)
	}
	src.Close()
	sink.AwaitCompletion()
	// Every handler acknowledged before the sink completed, and an
	// acknowledgement commits the outcome.
	if fin, _ := e.q.Count(ctx, e.db, "t", fdbq.Finished); fin != n {
		t.Fatalf("finished %d of %d", fin, n)
	}
	if maxInFlight.Load() > 4 {
		t.Fatalf("%d handlers at once, concurrency is 4", maxInFlight.Load())
	}
}
