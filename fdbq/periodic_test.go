package fdbq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/kvtest"
)

// everyMinute is a schedule of type email every minute, which the tests
// change as they need.
func everyMinute(name string) fdbq.Schedule {
	return fdbq.Schedule{Name: name, Every: time.Minute, Job: fdbq.NewJob{Type: "email", Data: []byte(`{"report":"daily"}`)}}
}

func tick(t *testing.T, q *fdbq.Queue, name string) *fdbq.Tick {
	t.Helper()
	r, err := q.TickSchedule(context.Background(), q.DB(), name)
	if err != nil {
		t.Fatalf("tick %s: %v", name, err)
	}
	return r
}

// atMinute sets the clock to the given minute past the hour of the test's
// start hour, plus extra.
func minuteOf(c *clock, m int, extra time.Duration) time.Time {
	base := c.Now().Truncate(time.Hour)
	return base.Add(time.Duration(m)*time.Minute + extra)
}

func setClock(c *clock, at time.Time) {
	c.mu.Lock()
	c.now = at
	c.mu.Unlock()
}

func TestScheduleTicksOnce(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	setClock(c, minuteOf(c, 10, 30*time.Second))
	if err := q.DeclareSchedule(ctx, q.DB(), everyMinute("report")); err != nil {
		t.Fatal(err)
	}
	// Declared at 10:30: the first tick is 11:00, none before.
	if r := tick(t, q, "report"); len(r.Jobs) != 0 {
		t.Fatalf("tick before the first tick's time added %v", r.Jobs)
	}
	first := minuteOf(c, 11, 0)
	setClock(c, first.Add(5*time.Millisecond))
	r := tick(t, q, "report")
	want := fdbq.TickID("report", first)
	if len(r.Jobs) != 1 || r.Jobs[0] != want || r.Skipped != 0 {
		t.Fatalf("tick at 11:00.005 = %+v, want job %s", r, want)
	}
	job, err := q.Get(ctx, q.DB(), "email", want)
	if err != nil {
		t.Fatal(err)
	}
	if !job.ScheduledAt.Equal(first) || string(job.Data) != `{"report":"daily"}` || job.State != fdbq.Pending {
		t.Fatalf("tick's job = %+v, want pending at %s with the schedule's data", job, first)
	}
	// The same tick again, from this or another scheduler: nothing.
	if r := tick(t, q, "report"); len(r.Jobs) != 0 {
		t.Fatalf("second tick at the same time added %v", r.Jobs)
	}
	info, err := q.GetSchedule(ctx, q.DB(), "report")
	if err != nil {
		t.Fatal(err)
	}
	if info.LastJob != want || info.Fired != 1 || !info.Next.Equal(minuteOf(c, 12, 0)) {
		t.Fatalf("schedule after a tick: %+v", info)
	}
	if want := "report@" + first.UTC().Format("2006-01-02T15:04:05.000Z"); fdbq.TickID("report", first) != want {
		t.Fatalf("TickID = %q, want %q", fdbq.TickID("report", first), want)
	}
}

// TestScheduleMissedPolicies: after an outage, each policy adds what it
// says for the missed ticks, and the on-time ticks (within Grace) always
// get their job.
func TestScheduleMissedPolicies(t *testing.T) {
	for _, c := range []struct {
		missed  fdbq.Missed
		limit   int
		late    []int // minutes of the missed ticks that get a job
		skipped int64
	}{
		{fdbq.MissedSkip, 0, nil, 9},
		{fdbq.MissedOnce, 0, []int{9}, 8},
		{fdbq.MissedEach, 0, []int{1, 2, 3, 4, 5, 6, 7, 8, 9}, 0},
		{fdbq.MissedEach, 3, []int{7, 8, 9}, 6},
	} {
		t.Run(fmt.Sprintf("%s-%d", c.missed, c.limit), func(t *testing.T) {
			q, clk := newQueue(t)
			ctx := context.Background()
			setClock(clk, minuteOf(clk, 0, 30*time.Second))
			s := everyMinute("report")
			s.Missed, s.MissedLimit, s.Grace = c.missed, c.limit, 90*time.Second
			if err := q.DeclareSchedule(ctx, q.DB(), s); err != nil {
				t.Fatal(err)
			}
			// Down from 00:30 to 11:20: the ticks 01..09 are more than 90s
			// late, 10 and 11 are on time.
			setClock(clk, minuteOf(clk, 11, 20*time.Second))
			r := tick(t, q, "report")
			var want []string
			for _, m := range append(slices.Clone(c.late), 10, 11) {
				want = append(want, fdbq.TickID("report", minuteOf(clk, m, 0)))
			}
			if strings.Join(r.Jobs, " ") != strings.Join(want, " ") || r.Skipped != c.skipped {
				t.Fatalf("tick after the outage: jobs %v skipped %d\nwant jobs %v skipped %d", r.Jobs, r.Skipped, want, c.skipped)
			}
			n, err := q.Count(ctx, q.DB(), "email", fdbq.Pending)
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(len(want)) {
				t.Fatalf("%d jobs, want %d", n, len(want))
			}
			info, _ := q.GetSchedule(ctx, q.DB(), "report")
			if info.Fired != int64(len(want)) || info.Skipped != c.skipped {
				t.Fatalf("counts fired %d skipped %d", info.Fired, info.Skipped)
			}
		})
	}
}

// TestScheduleLongOutage: a schedule every second, down for 30 days,
// catches up in bounded work: the latest MissedLimit ticks, in
// transactions of at most 100 jobs, the rest counted as skipped.
func TestScheduleLongOutage(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	s := everyMinute("fast")
	s.Every, s.Missed, s.MissedLimit, s.Grace = time.Second, fdbq.MissedEach, 250, time.Second
	start := c.Now().Truncate(time.Second)
	setClock(c, start)
	if err := q.DeclareSchedule(ctx, q.DB(), s); err != nil {
		t.Fatal(err)
	}
	setClock(c, start.Add(30*24*time.Hour))
	var jobs []string
	var skipped int64
	txs := 0
	for {
		r := tick(t, q, "fast")
		txs++
		jobs, skipped = append(jobs, r.Jobs...), skipped+r.Skipped
		if !r.More {
			break
		}
		if txs > 10 {
			t.Fatal("catching up takes more than 10 transactions")
		}
	}
	total := int64(30 * 24 * 3600)
	// 250 missed ticks plus the two on time: the tick at now and the one a
	// second before, exactly Grace late.
	if len(jobs) != 252 || txs != 3 || skipped != total-252 {
		t.Fatalf("caught up with %d jobs in %d transactions, %d skipped; want 252 in 3, %d skipped", len(jobs), txs, skipped, total-252)
	}
	if last := fdbq.TickID("fast", start.Add(30*24*time.Hour)); jobs[len(jobs)-1] != last {
		t.Fatalf("last job %s, want %s", jobs[len(jobs)-1], last)
	}
}

func TestSchedulePauseResume(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	setClock(c, minuteOf(c, 0, 30*time.Second))
	if err := q.DeclareSchedule(ctx, q.DB(), everyMinute("report")); err != nil {
		t.Fatal(err)
	}
	if err := q.PauseSchedule(ctx, q.DB(), "report"); err != nil {
		t.Fatal(err)
	}
	setClock(c, minuteOf(c, 5, 0))
	if r := tick(t, q, "report"); len(r.Jobs) != 0 {
		t.Fatalf("a paused schedule added %v", r.Jobs)
	}
	// Declared again (a restart): the pause holds.
	if err := q.DeclareSchedule(ctx, q.DB(), everyMinute("report")); err != nil {
		t.Fatal(err)
	}
	if info, _ := q.GetSchedule(ctx, q.DB(), "report"); !info.Paused || !info.Next.IsZero() {
		t.Fatalf("after a declare, paused schedule is %+v", info)
	}
	if err := q.ResumeSchedule(ctx, q.DB(), "report"); err != nil {
		t.Fatal(err)
	}
	// Resumed at 05:00: ticks while paused get no job; the next is 06:00.
	if r := tick(t, q, "report"); len(r.Jobs) != 0 {
		t.Fatalf("resume caught up %v", r.Jobs)
	}
	setClock(c, minuteOf(c, 6, 0))
	if r := tick(t, q, "report"); len(r.Jobs) != 1 || r.Jobs[0] != fdbq.TickID("report", minuteOf(c, 6, 0)) {
		t.Fatalf("first tick after resume: %v", r.Jobs)
	}
	for _, op := range []func(context.Context, kv.Transactor, string) error{q.PauseSchedule, q.ResumeSchedule, q.DeleteSchedule} {
		if err := op(ctx, q.DB(), "nope"); !errors.Is(err, fdbq.ErrUnknownSchedule) {
			t.Fatalf("on an unknown schedule: %v", err)
		}
	}
	if err := q.DeleteSchedule(ctx, q.DB(), "report"); err != nil {
		t.Fatal(err)
	}
	setClock(c, minuteOf(c, 8, 0))
	if r := tick(t, q, "report"); len(r.Jobs) != 0 {
		t.Fatalf("a deleted schedule added %v", r.Jobs)
	}
	if _, err := q.GetSchedule(ctx, q.DB(), "report"); !errors.Is(err, fdbq.ErrUnknownSchedule) {
		t.Fatalf("get after delete: %v", err)
	}
}

// TestScheduleRedeclare: a new job template keeps the schedule's place; a
// new timing starts it afresh, with no catch-up of the old timing.
func TestScheduleRedeclare(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	setClock(c, minuteOf(c, 0, 30*time.Second))
	s := everyMinute("report")
	if err := q.DeclareSchedule(ctx, q.DB(), s); err != nil {
		t.Fatal(err)
	}
	setClock(c, minuteOf(c, 1, 10*time.Second))
	s.Job.Data = []byte(`{"report":"weekly"}`)
	if err := q.DeclareSchedule(ctx, q.DB(), s); err != nil {
		t.Fatal(err)
	}
	r := tick(t, q, "report")
	if len(r.Jobs) != 1 {
		t.Fatalf("after a new template, the due tick added %v", r.Jobs)
	}
	if j, _ := q.Get(ctx, q.DB(), "email", r.Jobs[0]); string(j.Data) != `{"report":"weekly"}` {
		t.Fatalf("tick job data %s", j.Data)
	}
	s.Every = 30 * time.Second
	setClock(c, minuteOf(c, 3, 10*time.Second))
	if err := q.DeclareSchedule(ctx, q.DB(), s); err != nil {
		t.Fatal(err)
	}
	if r := tick(t, q, "report"); len(r.Jobs) != 0 {
		t.Fatalf("a new timing caught up %v", r.Jobs)
	}
	if info, _ := q.GetSchedule(ctx, q.DB(), "report"); !info.Next.Equal(minuteOf(c, 3, 30*time.Second)) || info.Fired != 1 {
		t.Fatalf("after a new timing: %+v", info)
	}
}

// TestScheduleLeavesExistingJob: a tick whose job id exists (a schedule
// deleted and declared again while the job is kept) leaves that job as
// it is; a finished job is not run again.
func TestScheduleLeavesExistingJob(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	setClock(c, minuteOf(c, 0, 30*time.Second))
	if err := q.DeclareSchedule(ctx, q.DB(), everyMinute("report")); err != nil {
		t.Fatal(err)
	}
	setClock(c, minuteOf(c, 1, 0))
	id := tick(t, q, "report").Jobs[0]
	if j := finishOne(t, q, fdbq.AttemptSucceeded); j.ID != id {
		t.Fatalf("finished %s, want %s", j.ID, id)
	}
	if err := q.DeleteSchedule(ctx, q.DB(), "report"); err != nil {
		t.Fatal(err)
	}
	setClock(c, minuteOf(c, 0, 40*time.Second))
	if err := q.DeclareSchedule(ctx, q.DB(), everyMinute("report")); err != nil {
		t.Fatal(err)
	}
	setClock(c, minuteOf(c, 1, 0))
	r := tick(t, q, "report")
	if len(r.Jobs) != 1 || r.Jobs[0] != id {
		t.Fatalf("tick again: %v", r.Jobs)
	}
	if j, _ := q.Get(ctx, q.DB(), "email", id); j.State != fdbq.Finished {
		t.Fatalf("the finished tick job is %s", j.State)
	}
}

func TestScheduleRefused(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	for _, c := range []struct {
		s    fdbq.Schedule
		want string
	}{
		{fdbq.Schedule{Name: "", Every: time.Minute, Job: fdbq.NewJob{Type: "email"}}, "empty schedule name"},
		{fdbq.Schedule{Name: "a/b", Every: time.Minute, Job: fdbq.NewJob{Type: "email"}}, "schedule name"},
		{fdbq.Schedule{Name: strings.Repeat("a", 101), Every: time.Minute, Job: fdbq.NewJob{Type: "email"}}, "longer than 100"},
		{fdbq.Schedule{Name: "s", Job: fdbq.NewJob{Type: "email"}}, "needs a cron expression or an interval"},
		{fdbq.Schedule{Name: "s", Every: time.Minute, Job: fdbq.NewJob{Type: "email", ID: "x"}}, "each tick gives them"},
		{fdbq.Schedule{Name: "s", Every: time.Minute, Job: fdbq.NewJob{Type: "email", Data: []byte(`{`)}}, "not valid JSON"},
		{fdbq.Schedule{Name: "s", Every: time.Minute, Job: fdbq.NewJob{Type: "bad type"}}, "type name"},
		{fdbq.Schedule{Name: "s", Every: time.Minute, Job: fdbq.NewJob{Type: "email"}, Missed: 7}, "missed-tick policy"},
		{fdbq.Schedule{Name: "s", Every: time.Minute, Job: fdbq.NewJob{Type: "email"}, MissedLimit: 10_001}, "missed limit"},
		{fdbq.Schedule{Name: "s", Every: time.Minute, Job: fdbq.NewJob{Type: "email"}, Grace: -time.Second}, "grace"},
	} {
		err := q.DeclareSchedule(ctx, q.DB(), c.s)
		if !errors.Is(err, fdbq.ErrInvalidSchedule) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("declare %+v = %v, want ErrInvalidSchedule saying %q", c.s, err, c.want)
		}
	}
	if list, err := q.Schedules(ctx, q.DB()); err != nil || len(list) != 0 {
		t.Fatalf("refused schedules were stored: %v %v", list, err)
	}
	if _, err := fdbq.ParseMissed("sometimes"); !errors.Is(err, fdbq.ErrInvalidSchedule) {
		t.Fatalf("ParseMissed: %v", err)
	}
}

// TestScheduleUnknownType: a tick of a type not registered fails and
// handles nothing; once the type is, the tick is handled.
func TestScheduleUnknownType(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	setClock(c, minuteOf(c, 0, 30*time.Second))
	s := everyMinute("report")
	s.Job.Type = "reports"
	if err := q.DeclareSchedule(ctx, q.DB(), s); err != nil {
		t.Fatal(err)
	}
	setClock(c, minuteOf(c, 1, 0))
	if _, err := q.TickSchedule(ctx, q.DB(), "report"); !errors.Is(err, fdbq.ErrUnknownType) || !strings.Contains(err.Error(), "schedule report") {
		t.Fatalf("tick of an unknown type: %v", err)
	}
	if err := q.SetType(ctx, q.DB(), "reports", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	if r := tick(t, q, "report"); len(r.Jobs) != 1 {
		t.Fatalf("tick once the type exists: %v", r.Jobs)
	}
}

// TestScheduleCorruptRecord: a schedule record that does not decode is
// listed with its error, its tick fails with ErrCorrupt, and the others
// still tick.
func TestScheduleCorruptRecord(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	setClock(c, minuteOf(c, 0, 30*time.Second))
	for _, n := range []string{"a", "b", "c"} {
		if err := q.DeclareSchedule(ctx, q.DB(), everyMinute(n)); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range [][]byte{[]byte(`{"def":`), []byte(`{"def":{"type":"email","every":-5}}`), {0xff, 0}} {
		fdbq.PutScheduleRecord(t, q, "b", bad)
		list, err := q.Schedules(ctx, q.DB())
		if err != nil || len(list) != 3 {
			t.Fatalf("list: %v %v", list, err)
		}
		if list[1].Name != "b" || !errors.Is(list[1].Err, fdbq.ErrCorrupt) || list[0].Err != nil {
			t.Fatalf("list with a corrupt record: %+v %+v", list[0], list[1])
		}
		if _, err := q.TickSchedule(ctx, q.DB(), "b"); !errors.Is(err, fdbq.ErrCorrupt) {
			t.Fatalf("tick of a corrupt schedule: %v", err)
		}
	}
	setClock(c, minuteOf(c, 1, 0))
	s := fdbq.NewScheduler(q, fdbq.SchedulerOptions{Logger: slog.New(slog.DiscardHandler)})
	if _, _, err := s.RunDue(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "c"} {
		if _, err := q.Get(ctx, q.DB(), "email", fdbq.TickID(n, minuteOf(c, 1, 0))); err != nil {
			t.Fatalf("schedule %s beside a corrupt one: %v", n, err)
		}
	}
	// Declaring it again repairs it.
	if err := q.DeclareSchedule(ctx, q.DB(), everyMinute("b")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.GetSchedule(ctx, q.DB(), "b"); err != nil {
		t.Fatal(err)
	}
}

// TestSchedulersConcurrent: three schedulers over one durable store, on
// the fault-injecting store (conflicts, transaction_too_old,
// commit_unknown_result applied and not), run while the clock moves a
// tick at a time and sometimes skips ahead: every tick has exactly one
// job, and none is missing (MissedEach, with a limit above any gap).
// JOBSTAGE_SEED replays the faults and the clock's steps.
func TestSchedulersConcurrent(t *testing.T) {
	seed := int64(jobtest.Seed(t))
	t.Logf("seed %d (JOBSTAGE_SEED replays it)", seed)
	base := openDisk(t, t.TempDir())
	ctx := context.Background()
	c := newClock()
	start := c.Now().Truncate(time.Second)
	setClock(c, start)
	db, faults := kvtest.NewFaultyDB(base, kvtest.DefaultFaultOptions(seed))
	q := fdbq.New(db, fdbq.Options{Now: c.Now})
	if err := q.SetType(ctx, db, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	s := everyMinute("beat")
	s.Every, s.Missed, s.MissedLimit, s.Grace = time.Second, fdbq.MissedEach, 1000, time.Second
	if err := q.DeclareSchedule(ctx, db, s); err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(uint64(seed), 21))
	steps := 200
	if testing.Short() {
		steps = 60
	}
	var mu sync.Mutex
	seen := map[string]int{}
	scheds := make([]*fdbq.Scheduler, 3)
	for i := range scheds {
		scheds[i] = fdbq.NewScheduler(q, fdbq.SchedulerOptions{Logger: slog.New(slog.DiscardHandler), Retry: time.Millisecond,
			OnTick: func(t *fdbq.Tick, _ time.Duration) {
				mu.Lock()
				for _, id := range t.Jobs {
					seen[id]++
				}
				mu.Unlock()
			}})
	}
	for range steps {
		// Mostly one tick; sometimes a gap of up to 20 seconds.
		step := time.Second
		if rnd.IntN(10) == 0 {
			step = time.Duration(2+rnd.IntN(19)) * time.Second
		}
		c.Advance(step)
		var wg sync.WaitGroup
		for _, sc := range scheds {
			wg.Go(func() {
				for {
					_, w, err := sc.RunDue(ctx)
					if w != nil {
						w.Cancel()
					}
					if err == nil {
						return
					}
				}
			})
		}
		wg.Wait()
	}
	end := c.Now()
	var want []string
	for at := start.Add(time.Second); !at.After(end); at = at.Add(time.Second) {
		want = append(want, fdbq.TickID("beat", at))
	}
	var got []string
	for cursor := ""; ; {
		page, err := q.List(ctx, base, "email", fdbq.ListOptions{State: fdbq.Pending, Limit: 1000, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			got = append(got, j.ID)
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("seed %d: %d jobs, want %d (one per tick from %s to %s)\nmissing %v\nextra %v", seed, len(got), len(want),
			start, end, diff(want, got), diff(got, want))
	}
	info, err := q.GetSchedule(ctx, base, "beat")
	if err != nil {
		t.Fatal(err)
	}
	if info.Fired != int64(len(want)) || info.Skipped != 0 || info.LastJob != want[len(want)-1] {
		t.Fatalf("seed %d: schedule state %+v, want %d fired", seed, info, len(want))
	}
	counts := faults.Counts()
	if counts.Conflicts+counts.UnknownApplied+counts.UnknownNotApplied == 0 {
		t.Fatalf("seed %d: no fault injected: %+v", seed, counts)
	}
	t.Logf("%d ticks; faults %+v", len(want), counts)
}

func diff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// TestSchedulerLoop: a started scheduler sleeps until the next tick on
// the real clock, wakes for a schedule declared while it sleeps (the
// watch, not a poll: the first schedule ticks hourly), and stops.
func TestSchedulerLoop(t *testing.T) {
	st := openDisk(t, t.TempDir())
	q := fdbq.New(st, fdbq.Options{})
	ctx := context.Background()
	if err := q.SetType(ctx, st, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	hourly := everyMinute("hourly")
	hourly.Every = time.Hour
	if err := q.DeclareSchedule(ctx, st, hourly); err != nil {
		t.Fatal(err)
	}
	ticks := make(chan *fdbq.Tick, 16)
	s := fdbq.NewScheduler(q, fdbq.SchedulerOptions{OnTick: func(t *fdbq.Tick, lag time.Duration) {
		if lag < 0 {
			panic("negative lag")
		}
		ticks <- t
	}})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(ctx)
	fast := everyMinute("fast")
	fast.Every = time.Second
	if err := q.DeclareSchedule(ctx, st, fast); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 2 {
		select {
		case tk := <-ticks:
			if tk.Schedule == "hourly" {
				// Its ticks are on the hour: a run that begins just
				// before one sees it.
				continue
			}
			if tk.Schedule != "fast" {
				t.Fatalf("tick of %s", tk.Schedule)
			}
			got = append(got, tk.Jobs...)
		case <-time.After(20 * time.Second):
			t.Fatalf("the scheduler did not tick a schedule declared while it slept (got %v)", got)
		}
	}
	if err := q.PauseSchedule(ctx, st, "fast"); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range got {
		if _, err := q.Get(ctx, st, "email", id); err != nil {
			t.Fatalf("job %s: %v", id, err)
		}
	}
}

// TestSchedulerNoSpinOnFailure: a schedule whose tick keeps failing (its
// type is not registered) is tried again after the retry wait, not at
// once: RunDue's wake is in the future.
func TestSchedulerNoSpinOnFailure(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	setClock(c, minuteOf(c, 0, 30*time.Second))
	s := everyMinute("orphan")
	s.Job.Type = "nosuchtype"
	if err := q.DeclareSchedule(ctx, q.DB(), s); err != nil {
		t.Fatal(err)
	}
	setClock(c, minuteOf(c, 1, 0))
	sc := fdbq.NewScheduler(q, fdbq.SchedulerOptions{Logger: slog.New(slog.DiscardHandler), Retry: 5 * time.Second})
	for i := range 3 {
		wake, w, err := sc.RunDue(ctx)
		if w != nil {
			w.Cancel()
		}
		if err != nil {
			t.Fatal(err)
		}
		if !wake.After(c.Now()) {
			t.Fatalf("RunDue #%d after a failed tick wakes at %s, not after now %s: the loop spins", i, wake, c.Now())
		}
	}
}

// TestSchedulersSkewedClocks: two schedulers whose clocks are 30 seconds
// apart handle one schedule in turns, the slow one's clock sometimes
// stepping back: each tick has one job, none is missing, and the one
// ahead only adds a tick's job early, with the tick's id and time.
func TestSchedulersSkewedClocks(t *testing.T) {
	st := openDisk(t, t.TempDir())
	ctx := context.Background()
	slow := newClock()
	start := slow.Now().Truncate(time.Second)
	setClock(slow, start)
	fast := &clock{now: start.Add(30 * time.Second)}
	qs, qf := fdbq.New(st, fdbq.Options{Now: slow.Now}), fdbq.New(st, fdbq.Options{Now: fast.Now})
	if err := qs.SetType(ctx, st, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	s := everyMinute("beat")
	s.Every, s.Missed, s.MissedLimit = time.Second, fdbq.MissedEach, 1000
	if err := qs.DeclareSchedule(ctx, st, s); err != nil {
		t.Fatal(err)
	}
	for i := range 90 {
		slow.Advance(time.Second)
		fast.Advance(time.Second)
		if i%7 == 3 {
			slow.Advance(-3 * time.Second) // an NTP step back
		}
		for _, q := range []*fdbq.Queue{qs, qf} {
			if _, err := q.TickSchedule(ctx, st, "beat"); err != nil {
				t.Fatal(err)
			}
		}
	}
	info, err := qs.GetSchedule(ctx, st, "beat")
	if err != nil {
		t.Fatal(err)
	}
	// The fast clock reads start+120s: every tick up to it has its job.
	n, err := qs.Count(ctx, st, "email", fdbq.Pending)
	if err != nil {
		t.Fatal(err)
	}
	last := fast.Now()
	if want := int64(last.Sub(start) / time.Second); n != want || info.Fired != want || info.LastJob != fdbq.TickID("beat", last) {
		t.Fatalf("%d jobs, %d fired, last %s; want %d up to %s", n, info.Fired, info.LastJob, want, last)
	}
	for at := start.Add(time.Second); !at.After(last); at = at.Add(time.Second) {
		j, err := qs.Get(ctx, st, "email", fdbq.TickID("beat", at))
		if err != nil || !j.ScheduledAt.Equal(at) {
			t.Fatalf("tick %s: %+v %v", at, j, err)
		}
	}
}

// TestScheduleTickRunTwice: a tick transaction run again after its commit
// applied (a caller's retry loop after commit_unknown_result) finds the
// ticks handled and adds nothing more.
func TestScheduleTickRunTwice(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	setClock(c, minuteOf(c, 0, 30*time.Second))
	if err := q.DeclareSchedule(ctx, q.DB(), everyMinute("report")); err != nil {
		t.Fatal(err)
	}
	setClock(c, minuteOf(c, 3, 30*time.Second))
	if _, err := q.TickSchedule(ctx, rerun{q.DB()}, "report"); err != nil {
		t.Fatal(err)
	}
	info, _ := q.GetSchedule(ctx, q.DB(), "report")
	n, _ := q.Count(ctx, q.DB(), "email", fdbq.Pending)
	// Missed once: 01:00 and 02:00 are late (the latest gets a job), 03:00 on time.
	if n != 2 || info.Fired != 2 || info.Skipped != 1 {
		t.Fatalf("after a tick run twice: %d jobs, fired %d, skipped %d; want 2, 2, 1", n, info.Fired, info.Skipped)
	}
}
