package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

type Charge struct {
	Order string `json:"order"`
	Cents int    `json:"cents"`
}

type Receipt struct {
	Charged int `json:"charged"`
}

// A typed handler, run by a consumer stage in a pipeline: the job's
// JSON data decodes into Charge, the Receipt is stored as its result, an
// error fails the attempt, and Cancel ends the job whatever attempts it
// has left. Data that does not decode cancels the job too.
func Example() {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	defer db.Close()
	q := fdbq.New(db, fdbq.Options{})
	ctx := context.Background()
	settings := fdbq.DefaultTypeSettings()
	settings.Retry.MaxAttempts = 1 // a failed attempt fails the job
	if err := q.DeclareType(ctx, db, "charge", settings); err != nil {
		log.Fatal(err)
	}
	jobs := map[string]string{
		"ok":       `{"order":"1","cents":250}`,
		"empty":    `{"order":"2","cents":0}`,
		"declined": `{"order":"3","cents":-1}`,
		"garbled":  `{"order":4}`,
	}
	ids := []string{"declined", "empty", "garbled", "ok"}
	for _, id := range ids {
		if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "charge", ID: id, Data: json.RawMessage(jobs[id])}); err != nil {
			log.Fatal(err)
		}
	}

	charge := func(ctx context.Context, j *consumer.Job[Charge]) (Receipt, error) {
		switch {
		case j.Data.Cents == 0:
			return Receipt{}, consumer.Cancel("nothing to charge")
		case j.Data.Cents < 0:
			return Receipt{}, errors.New("card declined")
		}
		return Receipt{Charged: j.Data.Cents}, nil
	}
	c, err := consumer.New(charge, consumer.Options{Concurrency: 2, JobTimeout: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	p, err := pipeline.From(producer.New(q, "charge", producer.Options{})).To(c).Build()
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		log.Fatal(err)
	}
	results, err := q.Wait(ctx, "charge", ids, fdbq.Finished)
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	for _, r := range results {
		j := r.Job
		fmt.Printf("%s: %s result=%s error=%.40q\n", j.ID, j.Outcome, j.Result, j.Error)
	}
	// Output:
	// declined: failed result= error="card declined"
	// empty: canceled result= error="nothing to charge"
	// garbled: canceled result= error="consumer: decode data of charge/garbled:"
	// ok: succeeded result={"charged":250} error=""
}

// A handler runs outside a pipeline on a job NewJob makes: to test it, or
// to call it from code of one's own. Its progress goes to
// JobOptions.Progress.
func ExampleNewJob() {
	resize := func(ctx context.Context, j *consumer.Job[[]string]) (int, error) {
		for i := range j.Data {
			if err := j.Progress(ctx, map[string]int{"done": i + 1, "of": len(j.Data)}); err != nil {
				return i, err
			}
		}
		return len(j.Data), nil
	}
	job := consumer.NewJob([]string{"a.jpg", "b.jpg"}, consumer.JobOptions{
		ID: "resize-1", Type: "resize",
		Progress: func(ctx context.Context, p json.RawMessage) error {
			fmt.Println("progress:", string(p))
			return nil
		},
	})
	n, err := resize(context.Background(), job)
	fmt.Println("resized:", n, err, "attempt", job.Attempt)
	// Output:
	// progress: {"done":1,"of":2}
	// progress: {"done":2,"of":2}
	// resized: 2 <nil> attempt 1
}

// AttemptOutcome names how an attempt ended, as the Metrics middleware
// and package metrics label it. The context's cause comes first.
func ExampleAttemptOutcome() {
	ctx := context.Background()
	timedOut, cancel := context.WithTimeout(ctx, 0)
	defer cancel()
	<-timedOut.Done()
	halted, halt := context.WithCancelCause(ctx)
	halt(consumer.ErrHalted)

	fmt.Println(consumer.AttemptOutcome(ctx, nil))
	fmt.Println(consumer.AttemptOutcome(ctx, errors.New("boom")))
	fmt.Println(consumer.AttemptOutcome(ctx, fmt.Errorf("charge: %w", consumer.Cancel("gone"))))
	fmt.Println(consumer.AttemptOutcome(ctx, consumer.Snooze(time.Minute)))
	fmt.Println(consumer.AttemptOutcome(ctx, consumer.RetryAt(time.Now().Add(time.Minute), errors.New("429"))))
	fmt.Println(consumer.AttemptOutcome(ctx, &consumer.PanicError{Value: "oops"}))
	fmt.Println(consumer.AttemptOutcome(timedOut, timedOut.Err()))
	fmt.Println(consumer.AttemptOutcome(halted, nil))
	// Output:
	// succeeded
	// failed
	// canceled
	// snoozed
	// failed
	// panicked
	// timeout
	// halted
}

// Snooze and RetryAt put off a job; the EndError they return says how.
func ExampleSnooze() {
	var end *consumer.EndError
	err := fmt.Errorf("rate limited: %w", consumer.Snooze(30*time.Second))
	if errors.As(err, &end) {
		fmt.Println(end.How, end.After)
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	err = consumer.RetryAt(at, errors.New("503 Service Unavailable"))
	if errors.As(err, &end) {
		fmt.Println(end.How, end.At.Format(time.RFC3339), end.Reason)
	}
	// Output:
	// snoozed 30s
	// failed 2030-01-02T03:04:05Z 503 Service Unavailable
}
