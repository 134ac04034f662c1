package fdbq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jobstage/jobstage/internal/lifecycle"
	"github.com/jobstage/jobstage/kv"
)

// SchedulerOptions configure a Scheduler.
type SchedulerOptions struct {
	// Logger gets the scheduler's failures (a tick that cannot add its
	// job, a schedule that cannot be read). Default: the queue's.
	Logger *slog.Logger
	// OnTick is told of every tick transaction that committed and did
	// something, with the lag of its newest tick's job: how long after
	// the tick's time it was added. It runs on the scheduler's goroutine.
	OnTick func(t *Tick, lag time.Duration)
	// Retry is how long a schedule whose tick failed waits before its
	// next try; it doubles on each failure in a row, up to a minute.
	// Default: one second.
	Retry time.Duration
	// After returns a channel that receives once d has passed (default
	// time.After); tests give one driven by their clock.
	After func(d time.Duration) <-chan time.Time
}

// Scheduler runs the ticks of every schedule the store holds
// (Queue.DeclareSchedule). Any number of processes may run one over the
// same store, with no leader: each tick is one transaction that reads the
// schedule's state with a conflict, so when two schedulers handle the same
// tick one commits and the other, retried, finds the tick handled.
//
// Between ticks it sleeps until the earliest next tick, or until a
// schedule changes (a watch on the key every declare, pause, resume and
// delete bumps); it makes no transactions while nothing is due.
type Scheduler struct {
	q        *Queue
	o        SchedulerOptions
	life     lifecycle.Lifecycle
	stopLoop func()
	// failures counts each schedule's failed ticks in a row; retryAt is
	// when it is tried again.
	failures map[string]int
	retryAt  map[string]time.Time
}

// NewScheduler returns a Scheduler over q's store; Start runs it.
func NewScheduler(q *Queue, o SchedulerOptions) *Scheduler {
	if o.Logger == nil {
		o.Logger = q.logger()
	}
	if o.Retry <= 0 {
		o.Retry = time.Second
	}
	if o.After == nil {
		o.After = time.After
	}
	return &Scheduler{q: q, o: o, life: lifecycle.Lifecycle{Name: "fdbq.Scheduler"},
		failures: map[string]int{}, retryAt: map[string]time.Time{}}
}

// Start runs the scheduler in the background until Stop.
func (s *Scheduler) Start(ctx context.Context) error {
	return s.life.Start(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		s.stopLoop = func() {
			cancel()
			<-done
		}
		go s.loop(ctx, done)
		return nil
	})
}

// Stop ends the scheduler, waiting for a tick transaction in flight, or
// for ctx. It is safe from any goroutine, any number of times.
func (s *Scheduler) Stop(ctx context.Context) error {
	return s.life.Stop(ctx, func(_ context.Context, started bool) error {
		if started {
			s.stopLoop()
		}
		return nil
	})
}

func (s *Scheduler) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		wake, w, err := s.RunDue(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.o.Logger.Warn("scheduler: reading the schedules failed; trying again", "err", err, "in", s.o.Retry)
			wake = s.q.now().Add(s.o.Retry)
		}
		var timer <-chan time.Time
		if !wake.IsZero() {
			timer = s.o.After(max(wake.Sub(s.q.now()), 0))
		}
		var changed <-chan struct{}
		if w != nil {
			changed = w.Ready()
		}
		select {
		case <-ctx.Done():
		case <-timer:
		case <-changed:
		}
		if w != nil {
			w.Cancel()
		}
	}
}

// RunDue handles every schedule's due ticks once, each schedule in its
// own transactions, and returns when the next tick is due (zero: none
// is), and a watch that fires when a schedule changes (nil if the read
// failed). Start runs it in a loop; tests and tools may call it directly.
func (s *Scheduler) RunDue(ctx context.Context) (time.Time, kv.Watch, error) {
	q := s.q
	type due struct {
		name string
		next time.Time
	}
	var w kv.Watch
	list, err := kv.Transact(ctx, q.db, func(tx kv.Tx) ([]due, error) {
		if w != nil {
			w.Cancel()
		}
		w = tx.Watch(q.k.schedulesChange())
		kvs, err := tx.Snapshot().GetRange(q.k.schedules().Range(), kv.RangeOptions{})
		if err != nil {
			return nil, err
		}
		var out []due
		for _, e := range kvs {
			t, err := q.k.schedules().Unpack(e.Key)
			if err != nil || len(t) != 1 {
				continue
			}
			name, ok := t[0].(string)
			if !ok {
				continue
			}
			r, p, err := q.decodeSchedule(name, e.Value)
			if err != nil {
				s.failed(name, err)
				continue
			}
			if r.Paused {
				continue
			}
			if next := p.timing.next(time.UnixMilli(r.Last)); !next.IsZero() {
				out = append(out, due{name, next})
			}
		}
		return out, nil
	})
	if err != nil {
		if w != nil {
			w.Cancel()
		}
		return time.Time{}, nil, err
	}
	var wake time.Time
	earliest := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	ticked := map[string]bool{}
	for _, d := range list {
		next := d.next
		if at, ok := s.retryAt[d.name]; ok && at.After(next) {
			next = at
		}
		if next.After(q.now()) {
			earliest(next)
			continue
		}
		for ctx.Err() == nil {
			t, err := q.TickSchedule(ctx, q.db, d.name)
			if err != nil {
				if ctx.Err() == nil {
					earliest(s.failed(d.name, err))
				}
				break
			}
			delete(s.failures, d.name)
			delete(s.retryAt, d.name)
			ticked[d.name] = true
			if s.o.OnTick != nil && (len(t.Jobs) > 0 || t.Skipped > 0) {
				var lag time.Duration
				if n := len(t.Ticks); n > 0 {
					lag = q.now().Sub(t.Ticks[n-1])
				}
				s.o.OnTick(t, lag)
			}
			if !t.More {
				break
			}
		}
	}
	// A schedule that ticked is read again for its next tick.
	if len(list) > 0 && (wake.IsZero() || wake.After(q.now())) {
		for _, d := range list {
			if ticked[d.name] {
				earliest(q.now())
				break
			}
		}
	}
	return wake, w, nil
}

// failed logs a schedule's failure and returns when to try it again.
func (s *Scheduler) failed(name string, err error) time.Time {
	n := s.failures[name]
	s.failures[name] = n + 1
	wait := s.o.Retry << min(n, 6)
	wait = min(wait, time.Minute)
	at := s.q.now().Add(wait)
	s.retryAt[name] = at
	if n == 0 || wait == time.Minute && !errors.Is(err, ErrCorrupt) {
		s.o.Logger.Warn(fmt.Sprintf("scheduler: schedule %s", name), "err", err, "retry_in", wait)
	}
	return at
}
