package fdbq_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// A monitor that is only ever swept by hand (Sweep, no Start) takes back a
// dead job whose own activity timeout is longer than its type's (the
// type's was shortened while it ran), after its own timeout: the job's
// group says its timeout, and the monitor keeps samples for it.
func TestMonitorJobKeepsLongerOwnTimeout(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	addJob(t, q, fdbq.NewJob{ID: "dead"})
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{}); len(ls) != 1 { // own timeout: 30 s
		t.Fatal("accept")
	}
	s := fdbq.DefaultTypeSettings()
	s.Retry.Base = time.Second
	s.ActivityTimeout = time.Second
	if err := q.SetType(ctx, q.DB(), "email", s); err != nil {
		t.Fatal(err)
	}
	// A monitor (restarted after the change, or a cron calling Sweep)
	// sweeping every second of its clock for five minutes.
	m := fdbq.NewMonitor(q, fdbq.MonitorOptions{Logger: quietLog, Clock: c.Now})
	for i := 0; i < 300; i++ {
		sweep(t, m)
		if stateOf(t, q, "dead") != fdbq.Running {
			return
		}
		c.Advance(time.Second)
	}
	t.Fatalf("a job dead for 5 min, its own timeout 30 s (its type's now 1 s), is still running")
}

// A type's ActivityTimeout lengthened while a job runs: the job's record
// and entry say its timeout is 30 s, and the dead job is taken back after
// those 30 s, not after the type's new hour.
func TestMonitorJobKeepsShorterOwnTimeout(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	addJob(t, q, fdbq.NewJob{ID: "dead"})
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{}); len(ls) != 1 { // own timeout: 30 s
		t.Fatal("accept")
	}
	m := fdbq.NewMonitor(q, fdbq.MonitorOptions{Logger: quietLog, Clock: c.Now})
	sweep(t, m)
	s := fdbq.DefaultTypeSettings()
	s.Retry.Base = time.Second
	s.ActivityTimeout = time.Hour
	if err := q.SetType(ctx, q.DB(), "email", s); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 120; i++ { // two minutes, a sweep a second
		c.Advance(time.Second)
		sweep(t, m)
		if stateOf(t, q, "dead") == fdbq.Pending {
			return
		}
	}
	t.Fatalf("a job whose own timeout is 30 s still running 2 min after its last heartbeat (its type's timeout was lengthened to 1 h)")
}
