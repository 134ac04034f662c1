package pipeline_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// An end-to-end run: register a type, enqueue jobs, run a pipeline with a
// typed handler, wait for the jobs and stop.
func Example() {
	store, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		panic(err)
	}
	db := kv.NewDB(store, kv.Options{})
	defer db.Close()
	q := fdbq.New(db, fdbq.Options{})
	ctx := context.Background()
	if err := q.SetType(ctx, db, "email", fdbq.DefaultTypeSettings()); err != nil {
		panic(err)
	}
	type Email struct {
		To      string `json:"to"`
		Subject string `json:"subject"`
	}
	ids := []string{"welcome-ann", "welcome-bob", "welcome-cy"}
	for _, id := range ids {
		name := strings.TrimPrefix(id, "welcome-")
		data := fmt.Sprintf(`{"to":"%s@example.com","subject":"Hello %s"}`, name, name)
		if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: id, Data: []byte(data)}); err != nil {
			panic(err)
		}
	}

	send := func(ctx context.Context, j *consumer.Job[Email]) (string, error) {
		return "sent " + j.Data.Subject + " to " + j.Data.To, nil
	}
	p, err := pipeline.From(producer.New(q, "email", producer.Options{})).
		To(consumer.Must(consumer.New(send, consumer.Options{Concurrency: 2}))).
		Build()
	if err != nil {
		panic(err)
	}
	if err := p.Start(ctx); err != nil {
		panic(err)
	}
	results, err := q.Wait(ctx, "email", ids, fdbq.Finished)
	if err != nil {
		panic(err)
	}
	if err := p.Stop(ctx); err != nil {
		panic(err)
	}
	for _, r := range results {
		fmt.Printf("%s: %s %s\n", r.Job.ID, r.Job.Outcome, r.Job.Result)
	}
	// Output:
	// welcome-ann: succeeded "sent Hello ann to ann@example.com"
	// welcome-bob: succeeded "sent Hello bob to bob@example.com"
	// welcome-cy: succeeded "sent Hello cy to cy@example.com"
}
