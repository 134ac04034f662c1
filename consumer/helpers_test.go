package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

const waitLimit = 20 * time.Second

// newQueue returns a queue over a fresh in-memory store with type "t"
// registered with settings s (nil: the defaults).
func newQueue(t testing.TB, s *fdbq.TypeSettings) *fdbq.Queue {
	t.Helper()
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	t.Cleanup(func() { db.Close() })
	q := fdbq.New(db, fdbq.Options{})
	settings := fdbq.DefaultTypeSettings()
	if s != nil {
		settings = *s
	}
	if err := q.SetType(context.Background(), db, "t", settings); err != nil {
		t.Fatal(err)
	}
	return q
}

// leases adds n jobs "j000"… with data {"n":i} and accepts them all, in
// index order.
func leases(t testing.TB, q *fdbq.Queue, n int) []*fdbq.Lease {
	t.Helper()
	ctx := context.Background()
	jobs := make([]fdbq.NewJob, n)
	for i := range jobs {
		jobs[i] = fdbq.NewJob{Type: "t", ID: fmt.Sprintf("j%03d", i), Data: []byte(fmt.Sprintf(`{"n":%d}`, i)), MaxAttempts: 1}
	}
	if _, err := q.AddBatch(ctx, q.DB(), jobs); err != nil {
		t.Fatal(err)
	}
	var out []*fdbq.Lease
	for len(out) < n {
		ls, err := q.Accept(ctx, "t", fdbq.AcceptOptions{Max: n - len(out), Window: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 0 {
			t.Fatalf("accepted %d of %d", len(out), n)
		}
		out = append(out, ls...)
	}
	return out
}

func get(t testing.TB, q *fdbq.Queue, id string) *fdbq.Job {
	t.Helper()
	j, err := q.Get(context.Background(), q.DB(), "t", id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	return jobtest.Recv(t, ch, waitLimit, what)
}

// waitStore waits until cond holds, re-checking it after each change to a
// job of type "t".
func waitStore(t testing.TB, q *fdbq.Queue, what string, cond func() bool) {
	t.Helper()
	jobtest.WaitStore(t, q.DB(), "t", waitLimit, what, cond)
}

// serve runs c.Serve over in (closed by the caller) and waits, bounded,
// for it to return.
func serve(t testing.TB, c *consumer.Consumer, in <-chan *consumer.Envelope) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Serve(in, func(int) {})
	}()
	recv(t, done, "Serve to return")
}

// serveLeases serves envelopes of ls with options o through c, and waits
// for Serve to return.
func serveLeases(t testing.TB, c *consumer.Consumer, q *fdbq.Queue, ls []*fdbq.Lease, o consumer.EnvelopeOptions) {
	t.Helper()
	in := make(chan *consumer.Envelope, len(ls))
	for _, l := range ls {
		in <- consumer.NewEnvelope(context.Background(), q, l, o)
	}
	close(in)
	serve(t, c, in)
}
