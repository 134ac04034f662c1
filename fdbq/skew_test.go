package fdbq_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
)

// skewRun is a worker's process and a monitor's process over one store,
// each with its own wall clock; time passes for both at the same rate.
type skewRun struct {
	t      *testing.T
	ctx    context.Context
	wq     *fdbq.Queue // the worker's
	wc, mc *clock      // the worker's and the monitor's wall clocks
	m      *fdbq.Monitor
}

// newSkewRun starts the monitor's clock skew ahead of the worker's
// (behind, when negative). monitorClock, if set, is the monitor's own
// clock for timeouts; else it is its wall clock, which here does not jump.
func newSkewRun(t *testing.T, skew time.Duration, monitorClock func() time.Time) *skewRun {
	wq, wc := newQueue(t)
	mc := &clock{now: wc.Now().Add(skew)}
	if monitorClock == nil {
		monitorClock = mc.Now
	}
	mq := fdbq.New(kv.NewDB(wq.DB().Backend(), kv.Options{}), fdbq.Options{Now: mc.Now})
	return &skewRun{
		t: t, ctx: context.Background(), wq: wq, wc: wc, mc: mc,
		m: fdbq.NewMonitor(mq, fdbq.MonitorOptions{Clock: monitorClock}),
	}
}

func (r *skewRun) pass(d time.Duration) {
	r.wc.Advance(d)
	r.mc.Advance(d)
}

// A monitor whose clock is ahead of the worker's must not take back a job
// whose worker heartbeats on time (its side effects would run twice), and
// one whose clock is behind must not leave a dead job running past its
// timeout plus the monitor's period. Neither clock decides: the monitor
// measures the timeout from its own transactions, on its own clock.
func TestMonitorClockSkew(t *testing.T) {
	const (
		step    = 10 * time.Second // the worker heartbeats every step: a third of the timeout
		timeout = fdbq.DefaultActivityTimeout
		steps   = 30
	)
	for _, skew := range []time.Duration{11 * time.Second, 25 * time.Second, time.Hour, -30 * time.Second, -time.Hour} {
		t.Run(fmt.Sprint("monitor ", skew), func(t *testing.T) {
			r := newSkewRun(t, skew, nil)
			addJob(t, r.wq, fdbq.NewJob{ID: "live"})
			addJob(t, r.wq, fdbq.NewJob{ID: "dead"})
			leases := map[string]*fdbq.Lease{}
			for _, l := range acceptNoWait(t, r.wq, fdbq.AcceptOptions{Max: 2}) {
				leases[l.ID] = l
			}
			if len(leases) != 2 {
				t.Fatalf("accepted %v", leases)
			}
			// The monitor sweeps every step, after the worker's heartbeat.
			deadAt := -1
			for i := 1; i <= steps; i++ {
				if _, err := r.m.Sweep(r.ctx); err != nil {
					t.Fatal(err)
				}
				r.pass(step)
				if err := r.wq.Heartbeat(r.ctx, r.wq.DB(), leases["live"], fdbq.HeartbeatOptions{}); err != nil {
					t.Fatalf("step %d (%v after the accept): the live job's heartbeat: %v", i, time.Duration(i)*step, err)
				}
				if deadAt < 0 && stateOf(t, r.wq, "dead") == fdbq.Pending {
					deadAt = i
				}
			}
			stateIs(t, r.wq, "live", fdbq.Running)
			// The dead job's last activity is its accept: it is taken back
			// after its timeout, by the sweep of the step after the first
			// sweep that was a timeout or more after the one that saw the
			// accept.
			if deadAt < 0 {
				t.Fatalf("the dead job is still running %v after its accept", steps*step)
			}
			if got, lo, hi := time.Duration(deadAt)*step, timeout, timeout+2*step; got < lo || got > hi {
				t.Fatalf("the dead job was taken back %v after its accept, want between %v and %v", got, lo, hi)
			}
		})
	}
}

// The monitor's own clock is all that counts: its wall clock jumping
// (stepped by an operator, corrected by NTP) changes nothing.
func TestMonitorWallClockJumps(t *testing.T) {
	own := newClock()
	r := newSkewRun(t, 0, own.Now)
	addJob(t, r.wq, fdbq.NewJob{ID: "live"})
	l := acceptNoWait(t, r.wq, fdbq.AcceptOptions{})[0]
	jumps := []time.Duration{time.Hour, -2 * time.Hour, 24 * time.Hour, -time.Minute}
	for i := range 20 {
		if _, err := r.m.Sweep(r.ctx); err != nil {
			t.Fatal(err)
		}
		r.mc.Advance(jumps[i%len(jumps)])
		r.pass(10 * time.Second)
		own.Advance(10 * time.Second)
		if err := r.wq.Heartbeat(r.ctx, r.wq.DB(), l, fdbq.HeartbeatOptions{}); err != nil {
			t.Fatalf("step %d: heartbeat: %v", i, err)
		}
	}
	// Once the worker stops, the job is taken back a timeout after the
	// monitor saw its last heartbeat.
	if _, err := r.m.Sweep(r.ctx); err != nil {
		t.Fatal(err)
	}
	own.Advance(fdbq.DefaultActivityTimeout - time.Millisecond)
	r.mc.Advance(-time.Hour)
	if st, err := r.m.Sweep(r.ctx); err != nil || st.Recycled != 0 {
		t.Fatalf("before the timeout: %+v %v", st, err)
	}
	own.Advance(time.Millisecond)
	if st, err := r.m.Sweep(r.ctx); err != nil || st.Recycled != 1 {
		t.Fatalf("at the timeout: %+v %v", st, err)
	}
	if err := r.wq.Heartbeat(r.ctx, r.wq.DB(), l, fdbq.HeartbeatOptions{}); !errors.Is(err, fdbq.ErrHalt) {
		t.Fatalf("heartbeat after the recycle: %v", err)
	}
}

// Two monitors whose clocks disagree by far more than the timeout take a
// dead job back once, and leave a live one alone.
func TestMonitorsDisagree(t *testing.T) {
	r := newSkewRun(t, time.Hour, nil)
	behind := fdbq.NewMonitor(fdbq.New(kv.NewDB(r.wq.DB().Backend(), kv.Options{}), fdbq.Options{Now: r.wc.Now}),
		fdbq.MonitorOptions{Clock: func() time.Time { return r.wc.Now().Add(-time.Hour) }})
	addJob(t, r.wq, fdbq.NewJob{ID: "live"})
	addJob(t, r.wq, fdbq.NewJob{ID: "dead"})
	var live *fdbq.Lease
	for _, l := range acceptNoWait(t, r.wq, fdbq.AcceptOptions{Max: 2}) {
		if l.ID == "live" {
			live = l
		}
	}
	recycled := 0
	for i := range 12 {
		for _, m := range []*fdbq.Monitor{r.m, behind} {
			st, err := m.Sweep(r.ctx)
			if err != nil {
				t.Fatal(err)
			}
			recycled += st.Recycled
		}
		r.pass(10 * time.Second)
		if err := r.wq.Heartbeat(r.ctx, r.wq.DB(), live, fdbq.HeartbeatOptions{}); err != nil {
			t.Fatalf("step %d: heartbeat: %v", i, err)
		}
	}
	if recycled != 1 {
		t.Fatalf("the monitors recycled %d jobs, want the dead one once", recycled)
	}
	stateIs(t, r.wq, "dead", fdbq.Pending)
	stateIs(t, r.wq, "live", fdbq.Running)
}

func stateOf(t *testing.T, q *fdbq.Queue, id string) fdbq.State {
	t.Helper()
	j, err := q.Get(context.Background(), q.DB(), "email", id)
	if err != nil {
		t.Fatal(err)
	}
	return j.State
}
