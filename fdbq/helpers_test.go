package fdbq_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// clock is a manual clock for tests.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.UnixMilli(1_700_000_000_000)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newQueue returns a queue over a fresh in-memory store with type "email"
// registered, and its clock.
func newQueue(t testing.TB) (*fdbq.Queue, *clock) {
	t.Helper()
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	t.Cleanup(func() { db.Close() })
	c := newClock()
	q := fdbq.New(db, fdbq.Options{Now: c.Now})
	s := fdbq.DefaultTypeSettings()
	s.Retry.Base = time.Second
	if err := q.SetType(context.Background(), db, "email", s); err != nil {
		t.Fatal(err)
	}
	return q, c
}

// newLoggedQueue is newQueue with the queue's logger set.
func newLoggedQueue(t testing.TB, log *slog.Logger) (*fdbq.Queue, *clock) {
	t.Helper()
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	t.Cleanup(func() { db.Close() })
	c := newClock()
	q := fdbq.New(db, fdbq.Options{Now: c.Now, Logger: log})
	if err := q.SetType(context.Background(), db, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	return q, c
}
