package gostreams_test

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/reugn/go-streams/flow"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/pipeline/gostreams"
	"github.com/jobstage/jobstage/producer"
)

// openQueue opens a queue over an in-memory store with jobs of type
// "email" pending, one per id.
func openQueue(ids ...string) (*fdbq.Queue, *kv.DB) {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	q := fdbq.New(db, fdbq.Options{})
	ctx := context.Background()
	if err := q.DeclareType(ctx, db, "email", fdbq.DefaultTypeSettings()); err != nil {
		log.Fatal(err)
	}
	for _, id := range ids {
		if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: id, Data: []byte(`{"to":"` + id + `@example.com"}`)}); err != nil {
			log.Fatal(err)
		}
	}
	return q, db
}

// A producer as a go-streams Source, through go-streams flows, into a
// consumer as a Sink. Each element is a *consumer.Envelope; the sink
// acknowledges it, which commits the job's outcome.
func Example() {
	ids := []string{"ann", "bob", "cy"}
	q, db := openQueue(ids...)
	defer db.Close()
	ctx := context.Background()

	src, err := gostreams.NewSource(ctx, producer.New(q, "email", producer.Options{}), 8)
	if err != nil {
		log.Fatal(err)
	}
	var seen atomic.Int64
	inspect := flow.NewMap(func(e *consumer.Envelope) *consumer.Envelope {
		seen.Add(1) // a flow may inspect the lease; it must pass the envelope on
		return e
	}, 1)
	send := func(ctx context.Context, j *consumer.Job[email]) (string, error) {
		return "sent to " + j.Data.To, nil
	}
	sink := gostreams.NewSink(consumer.Must(consumer.New(send, consumer.Options{Concurrency: 2})))
	go src.Via(inspect).Via(flow.NewBatch[any](2, 10*time.Millisecond)).To(sink)

	results, err := q.Wait(ctx, "email", ids, fdbq.Finished)
	if err != nil {
		log.Fatal(err)
	}
	src.Close() // ends the stream: the flows and the sink finish
	sink.AwaitCompletion()
	for _, r := range results {
		fmt.Printf("%s: %s %s\n", r.Job.ID, r.Job.Outcome, r.Job.Result)
	}
	fmt.Println("the flow saw", seen.Load(), "jobs")
	// Output:
	// ann: succeeded "sent to ann@example.com"
	// bob: succeeded "sent to bob@example.com"
	// cy: succeeded "sent to cy@example.com"
	// the flow saw 3 jobs
}

// ViaFlow runs a go-streams flow as a stage of a jobstage pipeline: here
// a Map that passes each envelope on, and a Batch that groups them (the
// groups are flattened before the consumer).
func ExampleViaFlow() {
	ids := []string{"a", "b", "c", "d"}
	q, db := openQueue(ids...)
	defer db.Close()
	ctx := context.Background()

	var handled atomic.Int64
	count := func(ctx context.Context, j *consumer.Job[email]) (struct{}, error) {
		handled.Add(1)
		return struct{}{}, nil
	}
	p, err := pipeline.From(producer.New(q, "email", producer.Options{})).
		Via(gostreams.ViaFlow(flow.NewMap(func(e *consumer.Envelope) *consumer.Envelope { return e }, 1)),
			gostreams.ViaFlow(flow.NewBatch[any](2, 10*time.Millisecond))).
		To(consumer.Must(consumer.New(count, consumer.Options{}))).
		Build()
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := q.Wait(ctx, "email", ids, fdbq.Finished); err != nil {
		log.Fatal(err)
	}
	if err := p.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("handled", handled.Load(), "jobs")
	// Output:
	// handled 4 jobs
}
