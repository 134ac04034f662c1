package jobstage_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/jobstagetest"
)

// Heartbeat is a periodic kind.
type Heartbeat struct {
	Source string `json:"source"`
}

func (Heartbeat) Kind() string { return "heartbeat" }

// TestPeriodic: a schedule registered with Periodic is declared at Start
// and ticks in the client's scheduler; each tick's job reaches the
// client's handler with the schedule's args, its id naming the tick.
func TestPeriodic(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	got := make(chan *jobstage.Job[Heartbeat], 8)
	if err := jobstage.Work(c, func(_ context.Context, j *jobstage.Job[Heartbeat]) error {
		got <- j
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := jobstage.Periodic(c, jobstage.Schedule[Heartbeat]{Name: "beat", Every: time.Second, Args: Heartbeat{Source: "test"}}); err != nil {
		t.Fatal(err)
	}
	if err := jobstage.Periodic(c, jobstage.Schedule[Heartbeat]{Name: "beat", Every: time.Second}); err == nil {
		t.Fatal("a second schedule of the same name was taken")
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	var prev string
	for range 2 {
		select {
		case j := <-got:
			if j.Data.Source != "test" || !strings.HasPrefix(j.ID, "beat@") || j.ID <= prev {
				t.Fatalf("tick job %s with %+v (previous %s)", j.ID, j.Data, prev)
			}
			prev = j.ID
		case <-ctx.Done():
			t.Fatal("no tick's job was worked")
		}
	}
	info, err := c.Queue().GetSchedule(ctx, c.DB(), "beat")
	if err != nil || info.Fired < 2 || info.Job.Type != "heartbeat" {
		t.Fatalf("schedule: %+v %v", info, err)
	}
	if err := jobstage.Periodic(c, jobstage.Schedule[Heartbeat]{Name: "late", Every: time.Second}); err == nil {
		t.Fatal("Periodic after Start was taken")
	}
}

func TestPeriodicRefused(t *testing.T) {
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	for _, s := range []jobstage.Schedule[Heartbeat]{
		{Name: "a", Cron: "not cron"},
		{Name: "b", Every: time.Second, Options: &jobstage.EnqueueOptions{ID: "x"}},
		{Name: "c", Every: time.Second, Timezone: "Europe/Paris"},
		{Name: "bad name", Every: time.Second},
	} {
		if err := jobstage.Periodic(c, s); err == nil {
			t.Errorf("schedule %+v was taken", s)
		}
	}
	if err := jobstage.Periodic(c, jobstage.Schedule[Heartbeat]{Name: "ok", Cron: "0 9 * * MON-FRI", Timezone: "Europe/Paris",
		Missed: fdbq.MissedSkip}); err != nil {
		t.Fatal(err)
	}
}
