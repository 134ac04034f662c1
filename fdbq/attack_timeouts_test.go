package fdbq_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// A monitor that is only ever swept by hand (Sweep, no Start) never takes
// back a dead job whose own activity timeout is longer than its type's
// (the type's was shortened while it ran): the samples are pruned to the
// longest timeout the monitor has seen, and Sweep learns only the types'
// timeouts (only the idle loop's activityDue reads the jobs' own), so no
// sample is ever the job's timeout old. The job stays running for good.
func TestAttackManualSweepsNeverRecycleJobWithLongerOwnTimeout(t *testing.T) {
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
// and entry say its timeout is 30 s (its Job.ExpiresAt says so too), but
// the sweep's range stops at the versions a *type's* timeout (1 h) old,
// so the dead job is taken back only an hour after its last heartbeat.
// The deadline scheme took it back after its own 30 s.
func TestAttackLengthenedTypeTimeoutDelaysRunningJob(t *testing.T) {
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
