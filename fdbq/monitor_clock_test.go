package fdbq_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// A monitor with default options measures timeouts on time.Now, not on the
// queue's Options.Now: that is the wall clock of schedules, which may step
// (NTP, an operator, time.Now().UTC(), which strips the monotonic
// reading). When it steps an hour ahead, a job whose worker heartbeats
// every 10 s stays with its worker.
func TestMonitorDefaultClockIsNotTheQueueClock(t *testing.T) {
	q, c := newQueue(t) // Options.Now: c.Now, a wall clock
	ctx := context.Background()
	addJob(t, q, fdbq.NewJob{ID: "live"})
	l := acceptNoWait(t, q, fdbq.AcceptOptions{})[0]
	m := fdbq.NewMonitor(q, fdbq.MonitorOptions{Logger: quietLog})
	for i := 0; i < 10; i++ {
		sweep(t, m)
		c.Advance(10 * time.Second)
		if i == 5 {
			c.Advance(time.Hour) // the wall clock is stepped
		}
		if st := sweep(t, m); st.Recycled != 0 {
			t.Fatalf("step %d: a job heartbeating every 10 s taken back after its queue's wall clock stepped: %+v", i, st)
		}
		if err := q.Heartbeat(ctx, q.DB(), l, fdbq.HeartbeatOptions{}); err != nil {
			t.Fatalf("step %d: heartbeat: %v", i, err)
		}
	}
}
