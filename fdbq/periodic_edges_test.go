package fdbq_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// TestGraceBoundary: the doc says a tick is missed when handled
// MORE than Grace after its time, and "Ticks handled within Grace always
// get their job". A tick handled exactly Grace after its time is within
// Grace; with MissedSkip it must still get its job.
func TestGraceBoundary(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	setClock(c, minuteOf(c, 0, 30*time.Second))
	s := everyMinute("report")
	s.Missed, s.Grace = fdbq.MissedSkip, 10*time.Second
	if err := q.DeclareSchedule(ctx, q.DB(), s); err != nil {
		t.Fatal(err)
	}
	tickAt := minuteOf(c, 1, 0)
	setClock(c, tickAt.Add(10*time.Second)) // exactly Grace late
	r := tick(t, q, "report")
	if len(r.Jobs) != 1 || r.Jobs[0] != fdbq.TickID("report", tickAt) || r.Skipped != 0 {
		t.Fatalf("tick handled exactly Grace late: jobs %v skipped %d; want its job", r.Jobs, r.Skipped)
	}
}

// TestSchedulerSpinsOnFailingTick: a schedule whose tick keeps
// failing (its type is not registered) must be retried after Retry, not
// in a tight loop: the loop must not wake again and again at once.
func TestSchedulerSpinsOnFailingTick(t *testing.T) {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	defer db.Close()
	q := fdbq.New(db, fdbq.Options{})
	ctx := context.Background()
	s := everyMinute("orphan")
	s.Every = time.Second
	s.Job.Type = "nosuchtype"
	if err := q.DeclareSchedule(ctx, db, s); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // a tick is due
	var wakes, zero atomic.Int64
	sc := fdbq.NewScheduler(q, fdbq.SchedulerOptions{Logger: slog.New(slog.DiscardHandler), Retry: time.Second,
		After: func(d time.Duration) <-chan time.Time {
			wakes.Add(1)
			if d <= 0 {
				zero.Add(1)
			}
			return time.After(d)
		}})
	if err := sc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := sc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Retry is 1s: in half a second the loop should have slept once or
	// twice, not spun.
	if n := wakes.Load(); n > 5 {
		t.Fatalf("the scheduler woke %d times in 500ms (%d with a zero wait) for a schedule whose tick fails", n, zero.Load())
	}
}

// TestCorruptLast: records whose state is out of range (a Last
// far in the future or past) must not crash, hang or spin the scheduler.
func TestCorruptLast(t *testing.T) {
	for _, rec := range []string{
		`{"def":{"type":"email","every":60000000000,"missed":0,"missed_limit":100,"grace":60000000000},"timing":"every 1m0s","last":9223372036854775807}`,
		`{"def":{"type":"email","every":60000000000,"missed":0,"missed_limit":100,"grace":60000000000},"timing":"every 1m0s","last":9223372036854775000}`,
		`{"def":{"type":"email","cron":"* * * * *","missed":0,"missed_limit":100,"grace":60000000000},"timing":"* * * * * in ","last":9223372036854775807}`,
		`{"def":{"type":"email","cron":"* * * * *","missed":0,"missed_limit":100,"grace":60000000000},"timing":"* * * * * in ","last":-9223372036854775808}`,
		`{"def":{"type":"email","every":1000000000,"missed":2,"missed_limit":10000,"grace":60000000000},"timing":"every 1s","last":-9223372036854775808}`,
	} {
		t.Run(rec[30:60], func(t *testing.T) {
			q, c := newQueue(t)
			ctx := context.Background()
			if err := q.DeclareSchedule(ctx, q.DB(), everyMinute("bad")); err != nil {
				t.Fatal(err)
			}
			fdbq.PutScheduleRecord(t, q, "bad", []byte(rec))
			done := make(chan string, 1)
			go func() {
				var msg string
				defer func() {
					if p := recover(); p != nil {
						msg = "panic: " + fmtAny(p)
					}
					done <- msg
				}()
				if _, err := q.GetSchedule(ctx, q.DB(), "bad"); err != nil {
					t.Log("get:", err)
				}
				if _, err := q.TickSchedule(ctx, q.DB(), "bad"); err != nil {
					t.Log("tick:", err)
				}
				sc := fdbq.NewScheduler(q, fdbq.SchedulerOptions{Logger: slog.New(slog.DiscardHandler)})
				for i := range 3 {
					wake, w, err := sc.RunDue(ctx)
					if w != nil {
						w.Cancel()
					}
					if i == 2 && err == nil && !wake.IsZero() && !wake.After(c.Now()) {
						msg = "RunDue returned wake at or before now: the loop would spin (pass " + fmtAny(i) + ")"
						return
					}
				}
			}()
			select {
			case m := <-done:
				if m != "" {
					t.Fatal(m)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("hung")
			}
		})
	}
}

func fmtAny(v any) string { return fmt.Sprint(v) }

// TestUniqueRefuseStallsSchedule: a schedule whose job is unique
// with OnDuplicate refuse ("no new run while one is pending"). After a
// short outage one tick transaction has two ticks to add (the latest
// missed one, MissedOnce, and the on-time one): the second is a
// duplicate of the first, added in the same transaction, so the whole
// tick fails, and it fails the same way at every later try: the schedule
// never ticks again.
func TestUniqueRefuseStallsSchedule(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	setClock(c, minuteOf(c, 0, 30*time.Second))
	s := everyMinute("report")
	s.Job.Unique = &fdbq.Unique{OnDuplicate: fdbq.DuplicateRefuse}
	if err := q.DeclareSchedule(ctx, q.DB(), s); err != nil {
		t.Fatal(err)
	}
	// Down from 00:30 to 05:30: ticks 01..04 are missed, 05 is on time.
	var err error
	for m := 5; m < 10; m++ {
		setClock(c, minuteOf(c, m, 30*time.Second))
		if _, err = q.TickSchedule(ctx, q.DB(), "report"); err == nil {
			break
		}
	}
	if err != nil {
		info, _ := q.GetSchedule(ctx, q.DB(), "report")
		t.Fatalf("the schedule is stuck: every tick from 05:30 to 09:30 failed (%v); fired %d", err, info.Fired)
	}
}

// TestSecondsCronDiesAtFallBack: a 30-second cron in New York
// stops for good when the clocks go back: after its 01:59:30 EDT tick
// the next tick is never found, so no job is added at 02:00 EST, an hour
// later, or a day later, and the schedule shows no next tick.
func TestSecondsCronDiesAtFallBack(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	setClock(c, time.Date(2026, 11, 1, 5, 59, 0, 0, time.UTC)) // 01:59:00 EDT
	s := everyMinute("beat")
	s.Every, s.Cron, s.Timezone = 0, "*/30 * * * * *", "America/New_York"
	if err := q.DeclareSchedule(ctx, q.DB(), s); err != nil {
		t.Fatal(err)
	}
	setClock(c, time.Date(2026, 11, 1, 5, 59, 30, 0, time.UTC)) // 01:59:30 EDT
	if r := tick(t, q, "beat"); len(r.Jobs) != 1 {
		t.Fatalf("tick at 01:59:30 EDT: %v", r.Jobs)
	}
	sc := fdbq.NewScheduler(q, fdbq.SchedulerOptions{Logger: slog.New(slog.DiscardHandler)})
	for _, at := range []time.Time{
		time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC), // 02:00:00 EST
		time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC),
	} {
		setClock(c, at)
		wake, w, err := sc.RunDue(ctx)
		if w != nil {
			w.Cancel()
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Get(ctx, q.DB(), "email", fdbq.TickID("beat", at)); err != nil {
			info, _ := q.GetSchedule(ctx, q.DB(), "beat")
			t.Fatalf("at %s the scheduler added no job (%v; RunDue wake %v, schedule next %v, last job %s): the schedule is dead", at, err, wake, info.Next, info.LastJob)
		}
	}
}
