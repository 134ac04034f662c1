package fdbq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/tuple"
)

// openExampleQueue opens a queue over an in-memory store with the type
// "email" registered. A deployment opens embedded.Open(dir, …) or a
// FoundationDB cluster instead.
func openExampleQueue() (*fdbq.Queue, *kv.DB) {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	q := fdbq.New(db, fdbq.Options{})
	if err := q.SetType(context.Background(), db, "email", fdbq.DefaultTypeSettings()); err != nil {
		log.Fatal(err)
	}
	return q, db
}

// A producer adds a job; a worker accepts it, does the work and finishes
// it with a result.
func Example_addAcceptFinish() {
	q, db := openExampleQueue()
	defer db.Close()
	ctx := context.Background()

	job, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: "welcome-42", Data: json.RawMessage(`{"to":"ada@example.com"}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("added:", job.ID, job.State)

	leases, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 10})
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range leases {
		var msg struct{ To string }
		if err := json.Unmarshal(l.Data, &msg); err != nil {
			log.Fatal(err)
		}
		fmt.Println("working on:", l.ID, "attempt", l.Attempts, "to", msg.To)
		// Finish fails with fdbq.ErrHalt if the job was canceled, removed
		// or taken back by the activity monitor meanwhile.
		if err := q.Finish(ctx, db, l, json.RawMessage(`{"message_id":"m-1"}`)); err != nil {
			log.Fatal(err)
		}
	}

	done, err := q.Get(ctx, db, "email", "welcome-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("now:", done.State, done.Outcome, string(done.Result))
	// Output:
	// added: welcome-42 pending
	// working on: welcome-42 attempt 1 to ada@example.com
	// now: finished succeeded {"message_id":"m-1"}
}

// Adding a job inside the application's own transaction: the order row and
// its confirmation email commit together or not at all.
func ExampleQueue_Add_inTransaction() {
	q, db := openExampleQueue()
	defer db.Close()
	ctx := context.Background()
	orders := tuple.Sub("shop", "orders")

	placeOrder := func(id string, fail bool) error {
		return db.Transact(ctx, func(tx kv.Tx) error {
			tx.Set(orders.MustPack(tuple.Tuple{id}), []byte("placed"))
			if _, err := q.Add(ctx, tx, fdbq.NewJob{Type: "email", ID: "confirm-" + id}); err != nil {
				return err
			}
			if fail {
				// Returning an error from the function rolls back both the
				// row and the job.
				return errors.New("payment declined")
			}
			return nil
		})
	}

	fmt.Println("order 1:", placeOrder("1", false))
	fmt.Println("order 2:", placeOrder("2", true))

	for _, id := range []string{"1", "2"} {
		row, err := kv.ReadTransact(ctx, db, func(tx kv.ReadTx) ([]byte, error) {
			return tx.Get(orders.MustPack(tuple.Tuple{id}))
		})
		if err != nil {
			log.Fatal(err)
		}
		_, err = q.Get(ctx, db, "email", "confirm-"+id)
		fmt.Printf("order %s row=%q, email job exists: %v\n", id, row, err == nil)
	}
	n, _ := q.Count(ctx, db, "email", fdbq.Pending)
	fmt.Println("pending emails:", n)
	// Output:
	// order 1: <nil>
	// order 2: payment declined
	// order 1 row="placed", email job exists: true
	// order 2 row="", email job exists: false
	// pending emails: 1
}

// Waiting for a job: WaitOne blocks, on a watch rather than by polling,
// until the job reaches the state or finishes.
func ExampleQueue_WaitOne() {
	q, db := openExampleQueue()
	defer db.Close()
	ctx := context.Background()

	if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: "report", Data: json.RawMessage(`{"pages":3}`)}); err != nil {
		log.Fatal(err)
	}

	// A worker elsewhere; Timeout -1 blocks until a job comes.
	worker := make(chan error, 1)
	go func() {
		leases, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Timeout: -1})
		if err != nil {
			worker <- err
			return
		}
		worker <- q.Finish(ctx, db, leases[0], json.RawMessage(`"sent"`))
	}()

	job, err := q.WaitOne(ctx, "email", "report", fdbq.Finished)
	if err != nil {
		log.Fatal(err)
	}
	if err := <-worker; err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.ID, job.State, job.Outcome, string(job.Result))

	// A job that does not exist is reported, not waited for.
	_, err = q.WaitOne(ctx, "email", "nope", fdbq.Finished)
	fmt.Println(errors.Is(err, fdbq.ErrNotFound))
	// Output:
	// report finished succeeded "sent"
	// true
}
