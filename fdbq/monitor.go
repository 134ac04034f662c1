package fdbq

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// MonitorOptions configure a Monitor.
type MonitorOptions struct {
	// Interval between sweeps; each sweep is jittered by up to half of it
	// so that monitors in several processes spread out. Default 1 s.
	Interval time.Duration
	// ClaimTTL: accept claims (see Accept) older than this are deleted.
	// Default 5 min.
	ClaimTTL time.Duration
	Logger   *slog.Logger
	// OnSweep, if set, is called after each sweep with what it did.
	OnSweep func(SweepStats)
}

// SweepStats is what one sweep did.
type SweepStats struct {
	Recycled int // running jobs past their activity deadline made pending again
	Failed   int // of those, jobs out of attempts, finished as failed
	Expired  int // finished jobs past retention removed
	// ByType breaks the counts down by job type; every type the sweep
	// went through has an entry, zero or not.
	ByType map[string]TypeSweepStats
}

// TypeSweepStats is what one sweep did to one job type's jobs.
type TypeSweepStats struct {
	Recycled, Failed, Expired int
}

func (st *SweepStats) add(typ string, recycled, failed, expired int) {
	st.Recycled += recycled
	st.Failed += failed
	st.Expired += expired
	if st.ByType == nil {
		st.ByType = map[string]TypeSweepStats{}
	}
	t := st.ByType[typ]
	t.Recycled += recycled
	t.Failed += failed
	t.Expired += expired
	st.ByType[typ] = t
}

// Monitor is the activity monitor: it takes back running jobs whose worker
// stopped heartbeating, and removes finished jobs past their type's
// retention. Monitors in several processes may run at once: every change is
// a transaction that re-checks the job, so a job is recycled once.
//
// Sweeps go in batches whose size adapts like couch_jobs' (AIMD): start at
// 1000 jobs, +100 after a transaction that succeeds, ×0.75 after each
// attempt that fails (too old, too large, a conflict, including the
// attempts the store's retry loop retries), at least 1, so a sweep stays
// inside FoundationDB's 5 s and 10 MB limits whatever the backlog.
type Monitor struct {
	q    *Queue
	opts MonitorOptions

	mu      sync.Mutex
	batch   int
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewMonitor returns a stopped monitor.
func NewMonitor(q *Queue, o MonitorOptions) *Monitor {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.ClaimTTL <= 0 {
		o.ClaimTTL = 5 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Monitor{q: q, opts: o, batch: 1000}
}

// Start runs sweeps in the background until Stop. Starting a started
// monitor does nothing.
func (m *Monitor) Start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.started, m.cancel, m.done = true, cancel, make(chan struct{})
	go m.loop(ctx, m.done)
}

// Stop ends the background sweeps and waits for the one running, or for
// ctx. Stopping a stopped (or never started) monitor does nothing.
func (m *Monitor) Stop(ctx context.Context) error {
	m.mu.Lock()
	if !m.started {
		m.mu.Unlock()
		return nil
	}
	m.started = false
	cancel, done := m.cancel, m.done
	m.mu.Unlock()
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Monitor) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	for {
		d := m.opts.Interval/2 + time.Duration(rand.Int64N(int64(m.opts.Interval)))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		st, err := m.Sweep(ctx)
		if err != nil && ctx.Err() == nil {
			m.opts.Logger.Warn("fdbq: activity monitor sweep failed", "err", err)
		}
		if m.opts.OnSweep != nil {
			m.opts.OnSweep(st)
		}
	}
}

// Sweep runs one sweep over every type now.
func (m *Monitor) Sweep(ctx context.Context) (SweepStats, error) {
	var st SweepStats
	// Settings only: the per-state counts Types adds are not needed here.
	types, err := kv.ReadTransact(ctx, m.q.db, m.q.registry)
	if err != nil {
		return st, err
	}
	var errs []error
	for _, t := range types {
		if err := m.recycle(ctx, t.Name, t.Settings, &st); err != nil {
			errs = append(errs, err)
		}
		if t.Settings.Retention > 0 {
			if err := m.expire(ctx, t.Name, t.Settings.Retention, &st); err != nil {
				errs = append(errs, err)
			}
		}
	}
	cut := m.q.nowMs() - m.opts.ClaimTTL.Milliseconds()
	if err := m.q.db.Transact(ctx, func(tx kv.Tx) error {
		tx.ClearRange(rangeUpTo(m.q.k.claims(), cut))
		return nil
	}); err != nil {
		errs = append(errs, err)
	}
	return st, errors.Join(errs...)
}

// batchSize and adapt implement the AIMD batch size.
func (m *Monitor) batchSize() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.batch
}

func (m *Monitor) adapt(ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ok {
		m.batch = min(m.batch+100, 10_000)
	} else {
		m.batch = max(m.batch*3/4, 1)
	}
}

// shrinkForRetry counts a failed attempt of a sweep transaction and
// returns the smaller batch to retry it with. The store's retry loop
// retries transaction_too_old itself, so without this a batch too big to
// finish in time would fail the same way on every retry.
func (m *Monitor) shrinkForRetry() int {
	m.adapt(false)
	return m.batchSize()
}

// recycle makes running jobs past their activity deadline pending again
// (counting the attempt), or failed when out of attempts.
func (m *Monitor) recycle(ctx context.Context, typ string, s TypeSettings, st *SweepStats) error {
	q := m.q
	counts, err := m.sweepIndex(ctx, typ, q.k.activeType(typ), func() int64 { return q.nowMs() - 1 }, Running,
		func(r *record) int64 { return r.ExpiresAt },
		func(tx kv.Tx, id string, rec *record) (string, error) {
			next := *rec
			next.Error = "activity timeout: no heartbeat for " + s.ActivityTimeout.String()
			next.LastLock = rec.Lock + ":recycle"
			q.retryOrFail(&next, s)
			if err := q.put(tx, typ, id, rec, &next); err != nil {
				return "", err
			}
			return string(next.State), nil
		})
	st.add(typ, counts[string(Pending)]+counts[string(Finished)], counts[string(Finished)], 0)
	return err
}

// expire removes finished jobs older than the retention.
func (m *Monitor) expire(ctx context.Context, typ string, retention time.Duration, st *SweepStats) error {
	q := m.q
	counts, err := m.sweepIndex(ctx, typ, q.k.finishedType(typ), func() int64 { return q.nowMs() - retention.Milliseconds() }, Finished,
		func(r *record) int64 { return r.FinishedAt },
		func(tx kv.Tx, id string, rec *record) (string, error) {
			q.drop(tx, typ, id, rec)
			return "removed", nil
		})
	st.add(typ, 0, 0, counts["removed"])
	return err
}

// sweepIndex works through the entries (time_ms, id) of one of a type's
// time-ordered indexes, up to upTo(), in batches of the AIMD size, one
// transaction each. For every entry whose job is still in state with the
// same time (stamp), act changes the job and names what it did; sweepIndex
// returns how often each name came up in batches that committed.
//
// Entries are read without conflicts; each one acted on gets a read
// conflict, so monitors in several processes conflict only on the jobs
// both took, and the retry finds them done.
func (m *Monitor) sweepIndex(ctx context.Context, typ string, sub tuple.Subspace, upTo func() int64, state State,
	stamp func(*record) int64, act func(tx kv.Tx, id string, rec *record) (string, error)) (map[string]int, error) {
	q := m.q
	total := map[string]int{}
	for {
		limit := upTo()
		n := m.batchSize()
		more := false
		attempts := 0
		var counts map[string]int
		err := q.db.Transact(ctx, func(tx kv.Tx) error {
			if attempts++; attempts > 1 {
				n = m.shrinkForRetry()
			}
			counts = map[string]int{}
			kvs, err := tx.Snapshot().GetRange(rangeUpTo(sub, limit), kv.RangeOptions{Limit: n})
			if err != nil {
				return err
			}
			more = len(kvs) == n
			for _, e := range kvs {
				t, err := sub.Unpack(e.Key)
				if err != nil {
					return err
				}
				at, _ := t[0].(int64)
				id, _ := t[1].(string)
				tx.AddReadConflictKey(e.Key)
				rec, err := q.load(tx, typ, id)
				if err != nil {
					return err
				}
				if rec == nil || rec.State != state || stamp(rec) != at {
					continue
				}
				what, err := act(tx, id, rec)
				if err != nil {
					return err
				}
				counts[what]++
			}
			return nil
		})
		m.adapt(err == nil)
		if err != nil {
			if n > 1 && errors.Is(err, kv.ErrTransactionTooLarge) {
				continue // a smaller batch next time round
			}
			return total, err
		}
		for k, v := range counts {
			total[k] += v
		}
		if !more {
			return total, nil
		}
	}
}
