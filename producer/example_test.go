package producer_test

import (
	"context"
	"fmt"
	"log"
	"slices"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/producer"
)

// openQueue opens a queue over an in-memory store with the type "email"
// declared.
func openQueue() (*fdbq.Queue, *kv.DB) {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	q := fdbq.New(db, fdbq.Options{})
	if err := q.DeclareType(context.Background(), db, "email", fdbq.DefaultTypeSettings()); err != nil {
		log.Fatal(err)
	}
	return q, db
}

// A pipeline pulls as much as its consumers ask for; a producer used on
// its own does the same. Pull accepts the due jobs, up to the demand, in
// one transaction.
func Example() {
	q, db := openQueue()
	defer db.Close()
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: id}); err != nil {
			log.Fatal(err)
		}
	}

	p := producer.New(q, "email", producer.Options{})
	leases, err := p.Pull(ctx, 10) // demand for 10; 3 are due
	if err != nil {
		log.Fatal(err)
	}
	var ids []string
	for _, l := range leases {
		ids = append(ids, l.ID)
		if err := q.Finish(ctx, db, l, nil); err != nil {
			log.Fatal(err)
		}
	}
	slices.Sort(ids) // accepted in priority order, ties picked at random
	fmt.Println("accepted:", ids)
	// Output:
	// accepted: [a b c]
}

// With nothing due, Pull waits on the type's watch key: a job added later
// wakes it at once, without polling.
func ExampleProducer_Pull() {
	q, db := openQueue()
	defer db.Close()
	ctx := context.Background()
	p := producer.New(q, "email", producer.Options{})

	got := make(chan []*fdbq.Lease)
	go func() {
		leases, err := p.Pull(ctx, 1)
		if err != nil {
			log.Fatal(err)
		}
		got <- leases
	}()
	if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: "late"}); err != nil {
		log.Fatal(err)
	}
	leases := <-got
	fmt.Println("accepted:", leases[0].ID, leases[0].State)

	// A Pull whose context ends returns the context's error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := p.Pull(cctx, 1)
	fmt.Println("canceled pull:", err)
	// Output:
	// accepted: late running
	// canceled pull: context canceled
}

// Release hands accepted jobs back to pending at once, the attempt not
// counted: what a stopping pipeline does with the jobs it did not start.
func ExampleProducer_Release() {
	q, db := openQueue()
	defer db.Close()
	ctx := context.Background()
	if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: "x"}); err != nil {
		log.Fatal(err)
	}
	p := producer.New(q, "email", producer.Options{})

	leases, err := p.Pull(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Release(ctx, leases); err != nil {
		log.Fatal(err)
	}
	j, err := q.Get(ctx, db, "email", "x")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", j.State, "attempts", j.Attempts)

	leases, err = p.Pull(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("accepted again:", leases[0].ID, "attempt", leases[0].Attempts)
	// Output:
	// released: pending attempts 0
	// accepted again: x attempt 1
}
