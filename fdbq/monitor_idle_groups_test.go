package fdbq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv/embedded"
)

// The idle monitor's timer reads the first activity entries of each
// timeout group: 64 dead jobs with a long timeout (their type's was
// shortened since) do not hide a later job whose timeout is short, which
// is taken back a few intervals after its 100 ms, not after the hour.
func TestMonitorIdleShortTimeoutBehindLongOnes(t *testing.T) {
	q := newRealClockQueue(t, embedded.Options{})
	ctx := context.Background()
	long := fdbq.DefaultTypeSettings()
	long.ActivityTimeout = time.Hour
	if err := q.SetType(ctx, q.DB(), "email", long); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 64; i++ {
		addJob(t, q, fdbq.NewJob{ID: fmt.Sprintf("long-%02d", i)})
	}
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 64}); len(ls) != 64 {
		t.Fatalf("accepted %d", len(ls))
	}
	shortTimeout(t, q, "email") // 100 ms from now on
	addJob(t, q, fdbq.NewJob{ID: "short"})
	l := startMonitor(t, q, fdbq.MonitorOptions{ClaimTTL: time.Hour})
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{}); len(ls) != 1 || ls[0].ID != "short" {
		t.Fatalf("accept of the short job: %v", leaseIDsOf(ls))
	}
	select {
	case <-l.recycled:
	case <-time.After(3 * time.Second):
		t.Fatalf("a job with a 100 ms timeout, dead, not taken back within 3 s (monitor interval 10 ms): the idle timer is set by the 64 hour-long entries before it")
	}
	stateIs(t, q, "short", fdbq.Pending)
}
