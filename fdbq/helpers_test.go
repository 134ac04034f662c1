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
	s := fdbq.DefaultTypeSettings()
	s.Retry.Base = time.Second
	return openTestQueue(t, nil, s)
}

// openTestQueue is a queue with logger log (nil: the default) over a
// fresh in-memory store, type "email" registered with settings s, and its
// clock.
func openTestQueue(t testing.TB, log *slog.Logger, s fdbq.TypeSettings) (*fdbq.Queue, *clock) {
	t.Helper()
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	t.Cleanup(func() { db.Close() })
	c := newClock()
	q := fdbq.New(db, fdbq.Options{Now: c.Now, Logger: log})
	if err := q.SetType(context.Background(), db, "email", s); err != nil {
		t.Fatal(err)
	}
	return q, c
}

// staleSweep sweeps as a monitor that noted the store's version and then,
// by its own clock, saw no activity for longer than any timeout: it takes
// back every job whose last renewal committed before the call, whatever
// the queue's clock says. Its stats are those of both its sweeps.
func staleSweep(ctx context.Context, q *fdbq.Queue, o fdbq.MonitorOptions) (fdbq.SweepStats, error) {
	own := newClock()
	o.Clock = own.Now
	m := fdbq.NewMonitor(q, o)
	// The second sweep's error says what the first's would.
	first, _ := m.Sweep(ctx)
	own.Advance(1000 * time.Hour)
	st, err := m.Sweep(ctx)
	st.Recycled += first.Recycled
	st.Failed += first.Failed
	st.Expired += first.Expired
	for typ, f := range first.ByType {
		s := st.ByType[typ]
		s.Recycled += f.Recycled
		s.Failed += f.Failed
		s.Expired += f.Expired
		st.ByType[typ] = s
	}
	return st, err
}

// newLoggedQueue is newQueue with the queue's logger set, and the type's
// default settings.
func newLoggedQueue(t testing.TB, log *slog.Logger) (*fdbq.Queue, *clock) {
	t.Helper()
	return openTestQueue(t, log, fdbq.DefaultTypeSettings())
}
