package gostreams_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reugn/go-streams/flow"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/pipeline/gostreams"
	"github.com/jobstage/jobstage/producer"
)

const waitLimit = 30 * time.Second

type email struct {
	To string `json:"to"`
}

// newQueue is a queue over a fresh in-memory store with n jobs of type
// "t" pending.
func newQueue(t *testing.T, n int) *fdbq.Queue {
	t.Helper()
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	t.Cleanup(func() { db.Close() })
	q := fdbq.New(db, fdbq.Options{})
	ctx := context.Background()
	if err := q.SetType(ctx, db, "t", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	jobs := make([]fdbq.NewJob, n)
	for i := range jobs {
		jobs[i] = fdbq.NewJob{Type: "t", ID: string(rune('a'+i/26)) + string(rune('a'+i%26)), Data: []byte(`{"to":"x@y.z"}`)}
	}
	if _, err := q.AddBatch(ctx, db, jobs); err != nil {
		t.Fatal(err)
	}
	return q
}

// TestSourceFlowSink runs jobs from a producer as a go-streams Source,
// through a go-streams Map and Batch, into a consumer as a Sink: every job
// finishes, and the sink keeps the consumer's concurrency.
func TestSourceFlowSink(t *testing.T) {
	const n = 200
	q := newQueue(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src, err := gostreams.NewSource(ctx, producer.New(q, "t", producer.Options{}), 8)
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
	sink := gostreams.NewSink(c)
	// A go-streams Map that passes the envelope through (it could inspect
	// or rewrite the lease), then a Batch that paces jobs in groups.
	m := flow.NewMap(func(e *consumer.Envelope) *consumer.Envelope { return e }, 1)
	go src.Via(m).Via(flow.NewBatch[any](16, 10*time.Millisecond)).To(sink)
	jobtest.Recv(t, done, waitLimit, "every job handled")
	src.Close()
	sink.AwaitCompletion()
	// Every handler acknowledged before the sink completed, and an
	// acknowledgement commits the outcome.
	if fin, _ := q.Count(ctx, q.DB(), "t", fdbq.Finished); fin != n {
		t.Fatalf("finished %d of %d", fin, n)
	}
	if maxInFlight.Load() > 4 {
		t.Fatalf("%d handlers at once, concurrency is 4", maxInFlight.Load())
	}
}

// TestViaFlow runs a go-streams Map and Batch as a stage of a pipeline:
// every job reaches the consumer, batches flattened.
func TestViaFlow(t *testing.T) {
	const n = 50
	q := newQueue(t, n)
	var seen, handled atomic.Int64
	done := make(chan struct{})
	c := consumer.Must(consumer.New(func(ctx context.Context, j *consumer.Job[email]) (string, error) {
		if handled.Add(1) == n {
			close(done)
		}
		return "", nil
	}, consumer.Options{Concurrency: 4}))
	m := flow.NewMap(func(e *consumer.Envelope) *consumer.Envelope { seen.Add(1); return e }, 1)
	p, err := pipeline.From(producer.New(q, "t", producer.Options{})).
		Via(gostreams.ViaFlow(m), gostreams.ViaFlow(flow.NewBatch[any](8, 10*time.Millisecond))).
		To(c).
		Build()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	jobtest.Recv(t, done, waitLimit, "every job handled")
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if seen.Load() != n {
		t.Fatalf("the flow saw %d jobs of %d", seen.Load(), n)
	}
	if fin, _ := q.Count(ctx, q.DB(), "t", fdbq.Finished); fin != n {
		t.Fatalf("finished %d of %d", fin, n)
	}
}
