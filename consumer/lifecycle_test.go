package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/lifecycletest"
)

// The heartbeater and the batch finisher follow the lifecycle of every
// long-running part.
func TestHeartbeaterLifecycle(t *testing.T) {
	lifecycletest.Run(t, "consumer.Heartbeater", func(*testing.T) lifecycletest.Part {
		return consumer.NewHeartbeater(time.Millisecond)
	})
}

func TestBatchFinisherLifecycle(t *testing.T) {
	q := newQueue(t, nil)
	lifecycletest.Run(t, "consumer.BatchFinisher", func(*testing.T) lifecycletest.Part {
		return consumer.NewBatchFinisher(q, 0)
	})
}

// A finisher stopped before it started takes no outcome: Finish fails
// (End) with ErrFinisherClosed rather than wait for a start that cannot come.
func TestBatchFinisherStoppedBeforeStart(t *testing.T) {
	q := newQueue(t, nil)
	ls := leases(t, q, 1)
	b := consumer.NewBatchFinisher(q, 0)
	ctx := context.Background()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.End(ctx, ls[0], fdbq.Ending{Result: json.RawMessage(`1`)}); !errors.Is(err, consumer.ErrFinisherClosed) {
		t.Fatalf("finish on a finisher stopped before start: %v", err)
	}
}

// Outcomes submitted before Start wait for it, and commit then.
func TestBatchFinisherSubmitBeforeStart(t *testing.T) {
	q := newQueue(t, nil)
	ls := leases(t, q, 1)
	b := consumer.NewBatchFinisher(q, 0)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := b.End(ctx, ls[0], fdbq.Ending{Result: json.RawMessage(`1`)})
		done <- err
	}()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, done, "the finish"); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
