package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

const scheduleKillConfig = `
store:
  path: %s
types:
  tick:
    retention: 0s
schedules:
  beat:
    type: tick
    every: 1s
    data: '{"from": "beat"}'
    missed: each
    missed_limit: 1000
    grace: 1s
`

// TestScheduleKillNine runs three `jobstage serve` processes over one
// embedded store, each restarted as a service manager would whenever it
// exits, and kills them with SIGKILL at random, sometimes all three at
// once so that ticks are missed. The embedded store opens in one process
// at a time: the others exit (the store is locked) and are restarted, so
// the scheduler moves from process to process. At the end every tick of
// the one-second schedule, from its first to the last handled, has
// exactly one job (the policy is each, with a bound above any outage
// here), with the schedule's data and the tick as its scheduled time, and
// the schedule counts exactly those jobs: no tick was handled twice.
// Schedulers running at once over one store are tested in fdbq
// (TestSchedulersConcurrent, with injected commit faults).
//
// JOBSTAGE_SCHEDULE_KILL_SECONDS=n runs the kills for n seconds instead
// of 12; JOBSTAGE_KILL_SEED=s replays the random delays of seed s.
func TestScheduleKillNine(t *testing.T) {
	run := 12 * time.Second
	if v := os.Getenv("JOBSTAGE_SCHEDULE_KILL_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("JOBSTAGE_SCHEDULE_KILL_SECONDS=%q: want a positive integer", v)
		}
		run = time.Duration(n) * time.Second
	}
	seed := killSeed(t)
	t.Logf("seed %d (JOBSTAGE_KILL_SEED=%d replays the delays)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	var rngMu sync.Mutex
	intn := func(n int) int {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.IntN(n)
	}

	dir := t.TempDir()
	cfg := filepath.Join(dir, "jobstage.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, scheduleKillConfig, filepath.Join(dir, "data")), 0o600); err != nil {
		t.Fatal(err)
	}

	// Three slots, each running `jobstage serve` again whenever it exits.
	type slot struct {
		mu   sync.Mutex
		cmd  *exec.Cmd
		runs int
	}
	slots := make([]*slot, 3)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var logs lockedBuffer
	// holdUntil keeps every slot down after a kill of all three, an
	// outage of the scheduler longer than the schedule's grace.
	var holdMu sync.Mutex
	holdUntil := time.Time{}
	for i := range slots {
		s := &slot{}
		slots[i] = s
		wg.Go(func() {
			for ctx.Err() == nil {
				cmd := exec.Command(binary, "serve", "--config", cfg)
				cmd.Env = append(os.Environ(), "JOBSTAGE_LOGGING__FORMAT=json", "JOBSTAGE_HTTP__LISTEN=127.0.0.1:0", "JOBSTAGE_LOGGING__LEVEL=warn")
				cmd.Stderr = &logs
				s.mu.Lock()
				if err := cmd.Start(); err != nil {
					s.mu.Unlock()
					t.Errorf("slot %d: %v", i, err)
					return
				}
				s.cmd, s.runs = cmd, s.runs+1
				s.mu.Unlock()
				_ = cmd.Wait()
				s.mu.Lock()
				s.cmd = nil
				s.mu.Unlock()
				holdMu.Lock()
				wait := max(time.Until(holdUntil), 0) + time.Duration(50+intn(250))*time.Millisecond
				holdMu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(wait):
				}
			}
		})
	}
	killAll := func() {
		for _, s := range slots {
			s.mu.Lock()
			if s.cmd != nil {
				_ = s.cmd.Process.Kill()
			}
			s.mu.Unlock()
		}
	}
	kills := 0
	for end := time.Now().Add(run); time.Now().Before(end); {
		// How long the processes run between kills: no condition to wait for.
		time.Sleep(time.Duration(200+intn(1300)) * time.Millisecond)
		if intn(4) == 0 {
			holdMu.Lock()
			holdUntil = time.Now().Add(time.Duration(1500+intn(1500)) * time.Millisecond)
			holdMu.Unlock()
			killAll()
		} else {
			s := slots[intn(len(slots))]
			s.mu.Lock()
			if s.cmd != nil {
				_ = s.cmd.Process.Kill()
			}
			s.mu.Unlock()
		}
		kills++
	}
	stop()
	killAll()
	wg.Wait()
	runs := 0
	for _, s := range slots {
		runs += s.runs
	}
	t.Logf("%d kills, %d process starts over %s", kills, runs, run)

	// One last server catches up and runs a little longer.
	srv := startServer(t, cfg)
	cl := httpapi.NewClient(srv.url, "", nil)
	bg := context.Background()
	until := time.Now().Add(2 * time.Second)
	deadline := time.Now().Add(waitLimit)
	var sched *httpapi.Schedule
	for {
		s, err := cl.Schedule(bg, "beat")
		if err != nil {
			t.Fatal(err)
		}
		if s.Last != nil && !s.Last.Before(until) {
			sched = s
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the schedule did not catch up: %+v\n%s", s, logs.String())
		}
		time.Sleep(100 * time.Millisecond) // the schedule's state has no change to wait on over the API
	}
	// The CLI lists it; paused, it adds no job while the jobs are read.
	out, errOut, code := jobstage(t, "", "schedules", "--server", srv.url)
	if code != 0 || !regexp.MustCompile(`(?m)^beat\s+tick\s+every 1s\s+each\s+false\s`).MatchString(out) {
		t.Fatalf("schedules: exit %d: %s%s", code, out, errOut)
	}
	out, errOut, code = jobstage(t, "", "schedules", "pause", "beat", "--json", "--server", srv.url)
	var final httpapi.Schedule
	if code != 0 || json.Unmarshal([]byte(out), &final) != nil || !final.Paused {
		t.Fatalf("schedules pause: exit %d: %s%s", code, out, errOut)
	}
	if _, errOut, code := jobstage(t, "", "schedules", "resume", "nope", "--server", srv.url); code != 1 || !strings.Contains(errOut, "unknown_schedule") {
		t.Fatalf("resume of an unknown schedule: exit %d: %s", code, errOut)
	}
	var ticks []time.Time
	for cursor := ""; ; {
		page, err := cl.List(bg, "tick", httpapi.ListOptions{State: fdbq.Pending, Limit: 1000, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			at, ok := strings.CutPrefix(j.ID, "beat@")
			tm, err := time.Parse("2006-01-02T15:04:05.000Z", at)
			if !ok || err != nil || !j.ScheduledAt.Equal(tm) || compact(t, j.Data) != `{"from":"beat"}` {
				t.Fatalf("job %+v is not a tick's job", j)
			}
			ticks = append(ticks, tm)
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	if len(ticks) == 0 {
		t.Fatal("no tick's job")
	}
	slices.SortFunc(ticks, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != time.Second {
			t.Errorf("ticks %s and %s are %s apart: missing or repeated ticks", ticks[i-1], ticks[i], d)
		}
	}
	if final.Skipped != 0 || sched.Fired > final.Fired {
		t.Fatalf("the schedule counts %d fired, %d skipped (earlier %d fired); %d jobs", final.Fired, final.Skipped, sched.Fired, len(ticks))
	}
	if final.Fired != int64(len(ticks)) {
		t.Fatalf("the schedule counts %d ticks fired and there are %d jobs: a tick was handled twice", final.Fired, len(ticks))
	}
	t.Logf("%d ticks from %s to %s, each with one job", len(ticks), ticks[0].Format(time.TimeOnly), ticks[len(ticks)-1].Format(time.TimeOnly))
}
