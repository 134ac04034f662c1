package jobstage_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
)

type Invoice struct {
	Order string `json:"order"`
	Cents int    `json:"cents"`
}

func (Invoice) Kind() string { return "invoice" }

// Invoices get 5 attempts, a second apart, and run before other jobs.
func (Invoice) Defaults() jobstage.Defaults {
	return jobstage.Defaults{
		Priority: 10,
		Retry:    &fdbq.RetryPolicy{MaxAttempts: 5, Backoff: fdbq.Constant, Base: time.Second},
	}
}

// The job is enqueued in the transaction that saves the order: both
// commit, or neither does. The handler's result is stored with the job.
func Example_transaction() {
	ctx := context.Background()
	c, err := jobstage.Open(ctx, jobstage.Config{}) // in memory
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	jobstage.WorkResult(c, func(ctx context.Context, j *jobstage.Job[Invoice]) (string, error) {
		if j.Data.Cents <= 0 {
			return "", jobstage.Cancel("nothing to bill") // no retry
		}
		return fmt.Sprintf("billed %s: %d cents", j.Data.Order, j.Data.Cents), nil
	}, nil)
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	var job *fdbq.Job
	err = c.DB().Transact(ctx, func(tx kv.Tx) error {
		tx.Set([]byte("orders/42"), []byte(`{"total":1999}`))
		var err error
		job, err = jobstage.EnqueueTx(ctx, tx, c, Invoice{Order: "42", Cents: 1999}, nil)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	done, receipt, err := jobstage.WaitResult[Invoice, string](ctx, c, job.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.Outcome, done.Priority, receipt)
	// Output:
	// succeeded 10 billed 42: 1999 cents
}

// A handler that cannot do its job yet snoozes it: it runs again later,
// the attempt not counted, and the handler sees how often it snoozed.
func ExampleSnooze() {
	ctx := context.Background()
	c, err := jobstage.Open(ctx, jobstage.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	jobstage.Work(c, func(ctx context.Context, j *jobstage.Job[Invoice]) error {
		if j.Snoozes < 2 {
			fmt.Println("the ledger is closed; attempt", j.Attempt, "snoozed", j.Snoozes, "times")
			return jobstage.Snooze(time.Millisecond)
		}
		fmt.Println("billed on attempt", j.Attempt)
		return nil
	}, nil)
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	job, err := jobstage.Enqueue(ctx, c, Invoice{Order: "7", Cents: 1}, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := jobstage.Wait[Invoice](ctx, c, job.ID); err != nil {
		log.Fatal(err)
	}
	// Output:
	// the ledger is closed; attempt 1 snoozed 0 times
	// the ledger is closed; attempt 1 snoozed 1 times
	// billed on attempt 1
}

// The README's first example is examples/quickstart/main.go, which runs
// as an Example test there: the two must not drift apart.
func TestREADMEFirstExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "```go\n")
	block, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatal("README.md has no Go block")
	}
	want, err := os.ReadFile("examples/quickstart/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if block != string(want) {
		t.Fatalf("the README's first Go block is not examples/quickstart/main.go:\n%s", block)
	}
}
