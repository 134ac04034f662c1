package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/internal/proctest"
)

const killLoopConfig = `
store:
  path: %s
types:
  kill9:
    activity_timeout: 500ms
    retry: {max_attempts: 1000, backoff: constant, base: 10ms}
pipelines:
  kill9:
    type: kill9
    concurrency: 4
    handler:
      exec:
        command: [%q, %q]
`

// TestKillNineLoop kills `jobstage serve` with SIGKILL again and again
// while jobs are enqueued over HTTP (one at a time and in batches) and
// worked by an exec command that starts a process tree
// (testdata/killjob.sh), restarting it on the same store each time. After
// each kill every process of every run of that server must be gone. At the
// end every acknowledged job must be finished, succeeded, with the result
// of a run that completed and the attempt of that run, no run may have
// completed after it or alongside it, and the type's counts must be the
// jobs enqueued, all finished.
//
// JOBSTAGE_KILL_CYCLES=n runs n cycles instead of 20; JOBSTAGE_KILL_SEED=s
// replays the random choices of seed s (cycle lengths, batch sizes, job
// durations; the scheduling of the processes is not replayed).
func TestKillNineLoop(t *testing.T) {
	cycles := 20
	if v := os.Getenv("JOBSTAGE_KILL_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("JOBSTAGE_KILL_CYCLES=%q: want a positive integer", v)
		}
		cycles = n
	}
	seed := killSeed(t)
	t.Logf("seed %d (JOBSTAGE_KILL_SEED=%d replays), %d cycles", seed, seed, cycles)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed with seed %d: JOBSTAGE_KILL_SEED=%d go test -race ./cmd/jobstage -run 'TestKillNineLoop$' -v", seed, seed)
		}
	})
	rng := rand.New(rand.NewPCG(seed, 0))

	dir := t.TempDir()
	script, err := filepath.Abs("testdata/killjob.sh")
	if err != nil {
		t.Fatal(err)
	}
	pidsDir := filepath.Join(dir, "pids")
	if err := os.Mkdir(pidsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "jobstage.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, killLoopConfig, filepath.Join(dir, "data"), script, dir), 0o600); err != nil {
		t.Fatal(err)
	}

	acked := map[string]bool{}   // enqueue acknowledged
	inDoubt := map[string]bool{} // enqueue sent, answer lost to the kill
	done := map[string]bool{}    // pid files whose processes are all gone
	start := time.Now()
	for c := range cycles {
		s := startServer(t, cfg)
		ctx, cancel := context.WithCancel(context.Background())
		var res enqueueResult
		var wg sync.WaitGroup
		wg.Add(1)
		loadSeed := rng.Uint64()
		go func() {
			defer wg.Done()
			res = enqueueLoad(ctx, httpapi.NewClient(s.url, "", nil), c, loadSeed, 40)
		}()
		// The server lives a random time under the load, then is killed.
		life := time.Duration(200+rng.IntN(800)) * time.Millisecond
		time.Sleep(life) // how long the load runs: no condition to wait for
		s.kill()
		cancel()
		wg.Wait()
		for _, id := range res.acked {
			acked[id] = true
		}
		for _, id := range res.inDoubt {
			inDoubt[id] = true
		}
		if err := pidsGone(pidsDir, done, 10*time.Second); err != nil {
			t.Fatalf("cycle %d, after the kill: %v", c, err)
		}
		t.Logf("cycle %d: killed after %v; %d enqueues acknowledged, %d in doubt; %d runs so far", c, life, len(res.acked), len(res.inDoubt), len(done))
	}

	// A last server works what is left.
	s := startServer(t, cfg)
	cl := httpapi.NewClient(s.url, "", nil)
	ctx := context.Background()
	// The last server works off what the cycles left, a few hundred jobs
	// of process trees at concurrency 4: under -race beside the other
	// packages' tests that took up to about a minute and a half, so its
	// bound (a hang's, not a speed's) is longer than waitLimit.
	const lastLimit = 5 * time.Minute
	lastStart := time.Now()
	deadline := lastStart.Add(lastLimit)
	jobs := map[string]*httpapi.Job{}
	// wait long-polls until the job is finished or the deadline passes,
	// in waits of at most the API's 60 s.
	wait := func(id string) (*httpapi.Job, error) {
		for {
			j, err := cl.Wait(ctx, "kill9", id, fdbq.Finished, min(max(time.Until(deadline), time.Millisecond), waitLimit))
			if err != nil || j.State == fdbq.Finished || time.Now().After(deadline) {
				return j, err
			}
		}
	}
	for id := range acked {
		j, err := wait(id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if j.State != fdbq.Finished {
			counts := "unknown"
			if types, err := cl.Types(ctx); err == nil && len(types) > 0 {
				counts = fmt.Sprintf("%d pending, %d running, %d finished", types[0].Pending, types[0].Running, types[0].Finished)
			}
			var warnings []string
			for _, line := range strings.Split(s.logs.String(), "\n") {
				if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
					warnings = append(warnings, line)
				}
			}
			t.Fatalf("acknowledged job %s not finished within %v of the last start (jobs: %s): %+v\nthe last server's warnings and errors:\n%s",
				id, lastLimit, counts, j, strings.Join(warnings, "\n"))
		}
		jobs[id] = j
	}
	t.Logf("last server: every acknowledged job finished %v after its start", time.Since(lastStart).Round(time.Millisecond))
	for id := range inDoubt {
		j, err := wait(id)
		var ae *httpapi.APIError
		if errors.As(err, &ae) && ae.Status == 404 {
			continue // the enqueue did not commit
		}
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if j.State != fdbq.Finished {
			t.Fatalf("job %s (enqueue in doubt) not finished within %v of the last start: %+v", id, lastLimit, j)
		}
		jobs[id] = j
	}
	types, err := cl.Types(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(types) != 1 || types[0].Name != "kill9" || types[0].Finished != int64(len(jobs)) || types[0].Pending != 0 || types[0].Running != 0 {
		t.Errorf("types: %+v; want kill9 with %d finished, none pending or running", types[0], len(jobs))
	}
	s.stop()
	if err := pidsGone(pidsDir, done, 10*time.Second); err != nil {
		t.Fatalf("after the last stop: %v", err)
	}

	// Runs that completed, by job: what the results log says.
	b, err := os.ReadFile(filepath.Join(dir, "results"))
	if err != nil {
		t.Fatal(err)
	}
	completed := map[string][]string{}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for _, l := range lines {
		id, tok, ok := strings.Cut(l, " ")
		if !ok {
			t.Fatalf("results log line %q", l)
		}
		completed[id] = append(completed[id], tok)
	}
	for id := range completed {
		if jobs[id] == nil {
			t.Errorf("a run of job %s completed, but the store has no such job", id)
		}
	}
	for id, j := range jobs {
		var tok string
		if j.Outcome != fdbq.Succeeded || json.Unmarshal(j.Result, &tok) != nil {
			t.Errorf("%s: %s with result %s (error %q), want succeeded with a run's token", id, j.Outcome, j.Result, j.Error)
			continue
		}
		tok = strings.TrimSpace(tok)
		if !slices.Contains(completed[id], tok) {
			t.Errorf("%s: finished with the result of run %s, which did not complete (completed: %v)", id, tok, completed[id])
			continue
		}
		att := runAttempt(tok)
		if att != j.Attempts {
			t.Errorf("%s: finished with the result of run %s (attempt %d) but records %d attempts", id, tok, att, j.Attempts)
		}
		// A run that completed and was not the one recorded must be of an
		// earlier attempt, whose finish a kill lost: one of the same or a
		// later attempt ran alongside or after the recorded one.
		for _, other := range completed[id] {
			if other != tok && runAttempt(other) >= att {
				t.Errorf("%s: run %s completed besides run %s, recorded as its finish", id, other, tok)
			}
		}
	}
	t.Logf("%d cycles in %v: %d jobs acknowledged (%d more in doubt, %d of them stored), all finished once; %d runs, %d of them cut short by a kill, %d completed; every run's process tree gone",
		cycles, time.Since(start).Round(time.Millisecond), len(acked), len(inDoubt), len(jobs)-len(acked), len(done), len(done)-len(lines), len(lines))
}

// runAttempt is the attempt a run's token ATTEMPT.PID.START names; -1 if
// it names none.
func runAttempt(tok string) int {
	a, _, _ := strings.Cut(tok, ".")
	n, err := strconv.Atoi(a)
	if err != nil {
		return -1
	}
	return n
}

type enqueueResult struct{ acked, inDoubt []string }

// enqueueLoad enqueues jobs of kill9 until ctx ends or at least limit are
// acknowledged: one at a time or in batches of up to 10, with pauses of up
// to 20 ms between requests, each job's data the milliseconds its run
// sleeps (1 to 50). An enqueue that fails is in doubt: it may have
// committed before the server died.
func enqueueLoad(ctx context.Context, cl *httpapi.Client, cycle int, seed uint64, limit int) enqueueResult {
	rng := rand.New(rand.NewPCG(seed, uint64(cycle)))
	var res enqueueResult
	for n := 0; len(res.acked) < limit; {
		var batch []httpapi.NewJob
		size := 1
		if rng.IntN(2) == 0 {
			size = 2 + rng.IntN(9)
		}
		for range size {
			batch = append(batch, httpapi.NewJob{ID: fmt.Sprintf("c%d-%d", cycle, n), Data: json.RawMessage(strconv.Itoa(1 + rng.IntN(50)))})
			n++
		}
		var err error
		if size == 1 {
			_, err = cl.Enqueue(ctx, "kill9", batch[0])
		} else {
			_, err = cl.EnqueueBatch(ctx, "kill9", batch)
		}
		for _, j := range batch {
			if err != nil {
				res.inDoubt = append(res.inDoubt, j.ID)
			} else {
				res.acked = append(res.acked, j.ID)
			}
		}
		if err != nil {
			return res // the server is gone
		}
		select {
		case <-ctx.Done():
			return res
		case <-time.After(time.Duration(rng.IntN(20)) * time.Millisecond):
		}
	}
	return res
}

// pidsGone checks that every process listed in the pid files of pidsDir
// (lines "PID START") that are not in done has ended, waiting up to limit,
// and adds the files to done. A process counts as ended when /proc/PID is
// gone, is a zombie, or started at another time (its pid was reused). It
// looks again at the files once those running have ended, for a process
// that wrote its line late. Processes that outlive limit are killed and
// named in the error.
func pidsGone(pidsDir string, done map[string]bool, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		ents, err := os.ReadDir(pidsDir)
		if err != nil {
			return err
		}
		fds := map[int]string{} // pidfd: which process of which run
		for _, e := range ents {
			if done[e.Name()] {
				continue
			}
			b, err := os.ReadFile(filepath.Join(pidsDir, e.Name()))
			if err != nil {
				return err
			}
			for _, l := range strings.Split(string(b), "\n") {
				if l == "" {
					// The end of the file, or all of it: a process killed
					// between creating the file and writing its line.
					continue
				}
				var pid int
				var st string
				if _, err := fmt.Sscan(l, &pid, &st); err != nil {
					return fmt.Errorf("pid file %s: line %q", e.Name(), l)
				}
				fd, err := unix.PidfdOpen(pid, 0)
				if errors.Is(err, unix.ESRCH) {
					continue
				}
				if err != nil {
					return err
				}
				// The pidfd holds the process: if it is still the one the
				// line names now, it is the one the pidfd waits for.
				if !running(pid, st) {
					unix.Close(fd)
					continue
				}
				fds[fd] = fmt.Sprintf("pid %d of run %s", pid, e.Name())
			}
		}
		if len(fds) == 0 {
			for _, e := range ents {
				done[e.Name()] = true
			}
			return nil
		}
		alive, err := proctest.WaitExit(fds, time.Until(deadline))
		if err != nil {
			return err
		}
		for fd := range fds {
			unix.Close(fd)
		}
		if len(alive) > 0 {
			return fmt.Errorf("%d processes outlived their jobstage (killed now): %s", len(alive), strings.Join(alive, "; "))
		}
	}
}

// running reports whether process pid runs, not a zombie, with start time
// st (field 22 of /proc/PID/stat).
func running(pid int, st string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:])) // from field 3, the state
	return len(f) > 19 && f[0] != "Z" && f[0] != "X" && f[19] == st
}

// killSeed is the seed of a kill test's random choices:
// JOBSTAGE_KILL_SEED if set (to replay one), else a new one.
func killSeed(t *testing.T) uint64 {
	t.Helper()
	if v := os.Getenv("JOBSTAGE_KILL_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("JOBSTAGE_KILL_SEED=%q: want an unsigned integer", v)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}
