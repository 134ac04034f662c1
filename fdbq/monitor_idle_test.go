package fdbq_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/tuple"
)

// The idle monitor waits on watches and the next deadline; these tests
// make a deadline arrive in ways that no clock cutoff may hide.

func shortTimeout(t *testing.T, q *fdbq.Queue, typ string) {
	t.Helper()
	s := fdbq.DefaultTypeSettings()
	s.ActivityTimeout = 100 * time.Millisecond
	if err := q.SetType(context.Background(), q.DB(), typ, s); err != nil {
		t.Fatal(err)
	}
}

// sweepLog records a monitor's sweeps.
type sweepLog struct {
	recycled, expired, swept chan struct{}
}

func newSweepLog() *sweepLog {
	return &sweepLog{recycled: make(chan struct{}, 100), expired: make(chan struct{}, 100), swept: make(chan struct{}, 1000)}
}

func (l *sweepLog) on(st fdbq.SweepStats) {
	select {
	case l.swept <- struct{}{}:
	default:
	}
	if st.Recycled > 0 {
		l.recycled <- struct{}{}
	}
	if st.Expired > 0 {
		l.expired <- struct{}{}
	}
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// startMonitor starts a monitor of q (Interval 10 ms unless o says, no
// log output), stopped when the test ends, waits for its first sweep and
// returns the record of its sweeps.
func startMonitor(t *testing.T, q *fdbq.Queue, o fdbq.MonitorOptions) *sweepLog {
	t.Helper()
	l := newSweepLog()
	if o.Interval == 0 {
		o.Interval = 10 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = quietLog
	}
	o.OnSweep = l.on
	m := fdbq.NewMonitor(q, o)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	recvWithin(t, l.swept, "the monitor's first sweep")
	return l
}

// An accept whose attempt read the clock before a sweep began and
// committed after it writes a deadline earlier than that sweep: the
// monitor must still take the job back once its worker is gone.
func TestMonitorIdleSlowAcceptCommit(t *testing.T) {
	q := newRealClockQueue(t, embedded.Options{})
	ctx := context.Background()
	shortTimeout(t, q, "email")
	addJob(t, q, fdbq.NewJob{ID: "j"})
	hq, hb := hookedQueue(q, nil)
	inCommit, release := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	hb.setCommit(func(tx kv.Transaction) error {
		if once.CompareAndSwap(false, true) {
			close(inCommit)
			<-release // a slow commit (GC, fsync, a loaded cluster)
		}
		return tx.Commit()
	})
	out := acceptInBackground(ctx, hq, "email", fdbq.AcceptOptions{})
	<-inCommit
	<-time.After(150 * time.Millisecond) // the job's deadline passes before its accept commits
	l := startMonitor(t, q, fdbq.MonitorOptions{ClaimTTL: time.Hour})
	close(release)
	if got := recvWithin(t, out, "the accept"); got.err != nil || len(got.leases) != 1 {
		t.Fatalf("accept %v %v", leaseIDsOf(got.leases), got.err)
	}
	recvWithin(t, l.recycled, "the monitor taking back a job whose accept committed after a sweep began")
}

// A queue clock that steps back after a sweep: a job accepted then has a
// deadline by that clock before the sweep, and one that jumps forward
// makes every deadline look long past. Neither moves the monitor, which
// measures the timeout on its own clock (here the real, monotonic one):
// the job is taken back once, after its timeout, and not before.
func TestMonitorIdleClockSteps(t *testing.T) {
	for _, step := range []time.Duration{-10 * time.Minute, time.Hour} {
		t.Run(step.String(), func(t *testing.T) {
			q, c := newQueue(t)
			ctx := context.Background()
			s := fdbq.DefaultTypeSettings()
			s.ActivityTimeout = 300 * time.Millisecond
			if err := q.SetType(ctx, q.DB(), "email", s); err != nil {
				t.Fatal(err)
			}
			l := startMonitor(t, q, fdbq.MonitorOptions{ClaimTTL: time.Minute, Clock: time.Now})
			c.Advance(step)
			addJob(t, q, fdbq.NewJob{ID: "a"})
			ls := acceptNoWait(t, q, fdbq.AcceptOptions{})
			if len(ls) != 1 {
				t.Fatal("accept")
			}
			accepted := time.Now()
			c.Advance(step)
			addJob(t, q, fdbq.NewJob{ID: "wake"}) // a change: the monitor reads again
			recvWithin(t, l.recycled, "the monitor taking back a job accepted while the clock stepped")
			if waited := time.Since(accepted); waited < s.ActivityTimeout {
				t.Fatalf("recycled %v after its accept, before its timeout of %v", waited, s.ActivityTimeout)
			}
		})
	}
}

// Retention set on a type whose finished jobs are already older than it:
// they are removed, without waiting for a later finish.
func TestMonitorIdleRetentionShortened(t *testing.T) {
	q := newRealClockQueue(t, embedded.Options{})
	ctx := context.Background()
	s := fdbq.DefaultTypeSettings()
	s.Retention = 0
	if err := q.SetType(ctx, q.DB(), "email", s); err != nil {
		t.Fatal(err)
	}
	addJob(t, q, fdbq.NewJob{ID: "old"})
	ls := acceptNoWait(t, q, fdbq.AcceptOptions{})
	if err := q.Finish(ctx, q.DB(), ls[0], nil); err != nil {
		t.Fatal(err)
	}
	<-time.After(300 * time.Millisecond) // the job's age
	l := startMonitor(t, q, fdbq.MonitorOptions{})
	s.Retention = 200 * time.Millisecond
	if err := q.SetType(ctx, q.DB(), "email", s); err != nil {
		t.Fatal(err)
	}
	recvWithin(t, l.expired, "the monitor removing a finished job older than the new retention")
}

// One type with settings that do not decode does not slow the monitor
// for the others (it used to back off to 64 intervals).
func TestMonitorIdleCorruptTypeDoesNotSlowOthers(t *testing.T) {
	q := newRealClockQueue(t, embedded.Options{})
	ctx := context.Background()
	shortTimeout(t, q, "email")
	if err := q.SetType(ctx, q.DB(), "aaa", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	if err := q.DB().Transact(ctx, func(tx kv.Tx) error {
		tx.Set(tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{8, "aaa"}), []byte("garbage"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	const interval = 200 * time.Millisecond // backed off 64 times: 12.8 s
	l := startMonitor(t, q, fdbq.MonitorOptions{Interval: interval})
	// Long enough for a monitor that counted the corrupt type as a failed
	// round to have backed off several times.
	<-time.After(2 * time.Second)
	for i := range 2 {
		addJob(t, q, fdbq.NewJob{ID: fmt.Sprintf("k%d", i)})
		if ls := acceptNoWait(t, q, fdbq.AcceptOptions{}); len(ls) != 1 {
			t.Fatal("accept")
		}
		// Due 100 ms after the accept, swept a pause (at most 1.5
		// intervals) later; a backed-off monitor takes seconds.
		select {
		case <-l.recycled:
		case <-time.After(2 * time.Second):
			t.Fatal("a healthy type's job not taken back within 2 s while another type's settings are corrupt")
		}
	}
}

// An idle monitor leaves the store's watches to acceptors: one a type and
// one for the registry, so a waiting accept still gets one.
func TestMonitorIdleLeavesWatches(t *testing.T) {
	q := newRealClockQueue(t, embedded.Options{MaxWatches: 12})
	ctx := context.Background()
	for i := range 9 {
		if err := q.SetType(ctx, q.DB(), fmt.Sprintf("t%d", i), fdbq.DefaultTypeSettings()); err != nil {
			t.Fatal(err)
		}
	}
	startMonitor(t, q, fdbq.MonitorOptions{})
	quietTransactions(t, q.DB(), "idle monitor of 10 types")
	actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := q.Accept(actx, "email", fdbq.AcceptOptions{Timeout: -1}); err != context.DeadlineExceeded {
		t.Fatalf("waiting accept beside an idle monitor of 10 types, 12 watches allowed: %v", err)
	}
}

// A pending job that carries a cut error from its last attempt takes a
// re-add whose data fits: the old error is cut again, not the add refused.
func TestReAddAfterLongError(t *testing.T) {
	q := newRealClockQueue(t, embedded.Options{})
	ctx := context.Background()
	addJob(t, q, fdbq.NewJob{ID: "a"})
	ls := acceptNoWait(t, q, fdbq.AcceptOptions{})
	if err := q.Fail(ctx, q.DB(), ls[0], strings.Repeat("x", 20000)); err != nil {
		t.Fatal(err)
	}
	data := []byte(`"` + strings.Repeat("d", 80000) + `"`)
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{ID: "a", Type: "email", Data: data}); err != nil {
		t.Fatalf("re-add with %d bytes of data (limit %d): %v", len(data), fdbq.MaxDataSize, err)
	}
}
