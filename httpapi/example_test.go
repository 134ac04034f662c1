package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// A producer enqueues over HTTP, an external worker accepts and finishes
// the job, and the producer's wait returns it finished.
func Example() {
	ctx := context.Background()
	st, _ := embedded.Open("", embedded.Options{InMemory: true})
	db := kv.NewDB(st, kv.Options{})
	defer db.Close()
	q := fdbq.New(db, fdbq.Options{})

	srv, _ := httpapi.New(q, httpapi.Options{Logger: discardLogger()})
	hs := httptest.NewServer(srv) // a loopback listener: no tokens needed
	defer hs.Close()
	c := httpapi.NewClient(hs.URL, "", hs.Client())

	if _, err := c.SetType(ctx, "email", httpapi.TypeSettings{
		ActivityTimeout: httpapi.Duration(fdbq.DefaultActivityTimeout),
		Retry:           httpapi.RetryPolicy{MaxAttempts: 3, Backoff: fdbq.Exponential, Base: httpapi.Duration(fdbq.DefaultBackoffBase)},
	}); err != nil {
		fmt.Println(err)
		return
	}
	j, _ := c.Enqueue(ctx, "email", httpapi.NewJob{ID: "welcome-1", Data: json.RawMessage(`{"to":"ada@example.com"}`)})
	fmt.Println(j.ID, j.State)

	leases, _ := c.Accept(ctx, "email", httpapi.AcceptRequest{Max: 10})
	for _, l := range leases {
		_ = c.Finish(ctx, l, json.RawMessage(`"sent"`))
	}

	j, _ = c.Wait(ctx, "email", "welcome-1", fdbq.Finished, httpapi.MaxWait)
	fmt.Println(j.ID, j.State, j.Outcome, string(j.Result))

	_, err := c.Enqueue(ctx, "emial", httpapi.NewJob{})
	fmt.Println(err)
	// Output:
	// welcome-1 pending
	// welcome-1 finished succeeded "sent"
	// httpapi: 404 unknown_type: unknown job type "emial"; register it with PUT /v1/types/{type}
}
