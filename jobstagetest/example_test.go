package jobstagetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/jobstagetest"
	"github.com/jobstage/jobstage/kv"
)

type Refund struct {
	Order string `json:"order"`
	Cents int    `json:"cents"`
}

func (Refund) Kind() string { return "refund" }

// refund is a handler under test: it snoozes while the order is locked
// and cancels what cannot be refunded.
func refund(ctx context.Context, j *jobstage.Job[Refund]) error {
	switch {
	case j.Data.Order == "locked":
		return jobstage.Snooze(time.Minute)
	case j.Data.Cents <= 0:
		return jobstage.Cancel("nothing to refund")
	}
	return j.Progress(ctx, "refunded")
}

// A test runs a handler on one job, without a store or a pipeline, and
// checks how the attempt ended. (The package's functions take the test's
// testing.TB, which an Example cannot have: this one is compiled, not
// run.)
func Example() {
	testRefund := func(t *testing.T) {
		r := jobstagetest.Run(t, refund, Refund{Order: "42", Cents: 500}, nil)
		if r.Outcome != consumer.OutcomeSucceeded || len(r.Progress) != 1 {
			t.Errorf("refund: %s %v, progress %s", r.Outcome, r.Err, r.Progress)
		}

		r = jobstagetest.Run(t, refund, Refund{Order: "locked", Cents: 500}, nil)
		if r.Outcome != consumer.OutcomeSnoozed || r.SnoozedFor != time.Minute {
			t.Errorf("locked order: %s after %v", r.Outcome, r.SnoozedFor)
		}

		r = jobstagetest.Run(t, refund, Refund{Order: "42"}, nil)
		if r.Outcome != consumer.OutcomeCanceled || r.CancelReason != "nothing to refund" {
			t.Errorf("empty refund: %s %q", r.Outcome, r.CancelReason)
		}
	}
	_ = testRefund
}

// A test of code that enqueues inside its own transaction checks the job
// it enqueued before the transaction commits: the transaction reads its
// own writes. (Compiled, not run: see Example.)
func ExampleRequireEnqueued() {
	testCancelOrder := func(t *testing.T) {
		ctx := context.Background()
		c := jobstagetest.Open(t) // in memory, closed when the test ends
		err := c.DB().Transact(ctx, func(tx kv.Tx) error {
			tx.Set([]byte("orders/42"), []byte(`{"state":"canceled"}`))
			if _, err := jobstage.EnqueueTx(ctx, tx, c, Refund{Order: "42", Cents: 500}, nil); err != nil {
				return err
			}
			job := jobstagetest.RequireEnqueued[Refund](t, tx, c)
			if job.Data.Order != "42" {
				t.Errorf("enqueued a refund of order %s", job.Data.Order)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	_ = testCancelOrder
}
