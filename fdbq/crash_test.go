package fdbq_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// The crash test runs this test binary again as a worker process that
// accepts jobs from an on-disk store, reports its leases on stdout and
// hangs; the parent kills it with SIGKILL, and the activity monitor must
// give its jobs to the parent's workers while the dead worker's locks are
// refused.
const (
	crashChildEnv = "JOBSTAGE_FDBQ_CRASH_CHILD"
	crashDirEnv   = "JOBSTAGE_FDBQ_CRASH_DIR"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) == "accept" {
		crashChildAccept(os.Getenv(crashDirEnv))
		return
	}
	goleak.VerifyTestMain(m)
}

const (
	crashType     = "crash"
	crashJobs     = 20
	crashFinished = 5 // of those, finished by the worker before it dies
	// crashTimeout is the activity timeout. The processes share no fake
	// clock, so the test waits this long of real time once; it is long
	// enough to check that a sweep before it recycles nothing.
	crashTimeout = time.Second
)

// crashChildAccept is the worker process: it accepts every job in one
// transaction, finishes the first crashFinished of them, prints each
// lease ("finished" or "lease", id, lock) and "ready", and waits to be
// killed. Every line is printed after the commit it reports returned, so
// the parent may rely on it being durable.
func crashChildAccept(dir string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	st, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		fail(err)
	}
	db := kv.NewDB(st, kv.Options{})
	q := fdbq.New(db, fdbq.Options{})
	ctx := context.Background()
	leases, err := q.Accept(ctx, crashType, fdbq.AcceptOptions{Max: crashJobs, Window: crashJobs})
	if err != nil {
		fail(err)
	}
	out := bufio.NewWriter(os.Stdout)
	for i, l := range leases {
		what := "lease"
		if i < crashFinished {
			if err := q.Finish(ctx, db, l, json.RawMessage(`"child"`)); err != nil {
				fail(err)
			}
			what = "finished"
		}
		fmt.Fprintf(out, "%s %s %s\n", what, l.ID, l.Lock)
	}
	fmt.Fprintln(out, "ready")
	if err := out.Flush(); err != nil {
		fail(err)
	}
	select {}
}

// crashSetup registers the type and adds the jobs, then closes the store
// so that the child can open it (the directory lock admits one process).
func crashSetup(t *testing.T, dir string) {
	st, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	defer db.Close()
	ctx := context.Background()
	q := fdbq.New(db, fdbq.Options{})
	s := fdbq.DefaultTypeSettings()
	s.ActivityTimeout = crashTimeout
	// Recycled jobs are due again at once: the test waits for the
	// activity timeout and nothing else.
	s.Retry = fdbq.RetryPolicy{MaxAttempts: 3, Backoff: fdbq.Constant}
	if err := q.SetType(ctx, db, crashType, s); err != nil {
		t.Fatal(err)
	}
	jobs := make([]fdbq.NewJob, crashJobs)
	for i := range jobs {
		jobs[i] = fdbq.NewJob{Type: crashType, ID: fmt.Sprintf("crash-%02d", i)}
	}
	if _, err := q.AddBatch(ctx, db, jobs); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// crashRunChild starts the worker process, reads its report and kills it
// with SIGKILL once it is ready. It returns the leases the worker held
// and the ones it finished.
func crashRunChild(t *testing.T, dir string) (held, finished []*fdbq.Lease) {
	cmd, lines := jobtest.StartChild(t, crashChildEnv+"=accept", crashDirEnv+"="+dir)
	ready := false
	for !ready && lines.Scan() {
		f := strings.Fields(lines.Text())
		switch {
		case len(f) == 1 && f[0] == "ready":
			ready = true
		case len(f) == 3 && (f[0] == "lease" || f[0] == "finished"):
			// A Lease needs only the job's type and id and the lock: that
			// is all Finish, Fail and Heartbeat check.
			l := &fdbq.Lease{Job: fdbq.Job{Type: crashType, ID: f[1]}, Lock: f[2]}
			if f[0] == "lease" {
				held = append(held, l)
			} else {
				finished = append(finished, l)
			}
		default:
			t.Fatalf("child wrote %q", lines.Text())
		}
	}
	if !ready {
		t.Fatalf("child stopped before it was ready (%d leases reported)", len(held)+len(finished))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v", err)
	}
	return held, finished
}

// TestCrashedWorkerJobsRecycled: a worker process dies (SIGKILL) holding
// jobs. Its finishes survive; its running jobs stay running until their
// activity deadline, then the monitor makes them pending again, another
// worker runs them, and the dead worker's locks are refused with ErrHalt.
func TestCrashedWorkerJobsRecycled(t *testing.T) {
	dir := t.TempDir()
	crashSetup(t, dir)
	held, finished := crashRunChild(t, dir)
	if len(held) != crashJobs-crashFinished || len(finished) != crashFinished {
		t.Fatalf("child held %d and finished %d jobs, want %d and %d", len(held), len(finished), crashJobs-crashFinished, crashFinished)
	}

	db := openDisk(t, dir)
	q := fdbq.New(db, fdbq.Options{})
	ctx := context.Background()
	wantCounts := func(what string, pending, running, done int64) {
		t.Helper()
		for _, c := range []struct {
			st   fdbq.State
			want int64
		}{{fdbq.Pending, pending}, {fdbq.Running, running}, {fdbq.Finished, done}} {
			if n, err := q.Count(ctx, db, crashType, c.st); err != nil || n != c.want {
				t.Fatalf("%s: %d %s (%v), want %d", what, n, c.st, err, c.want)
			}
		}
	}
	n := len(held)
	wantCounts("after the crash", 0, int64(n), crashFinished)
	for _, l := range finished {
		j, err := q.Get(ctx, db, crashType, l.ID)
		if err != nil || j.State != fdbq.Finished || j.Outcome != fdbq.Succeeded || string(j.Result) != `"child"` {
			t.Fatalf("%s, finished by the dead worker: %+v %v", l.ID, j, err)
		}
	}
	// The deadline of each held job is its last heartbeat plus the
	// activity timeout, as the store records it.
	var first, last time.Time
	for _, l := range held {
		j, err := q.Get(ctx, db, crashType, l.ID)
		if err != nil || j.State != fdbq.Running || j.Attempts != 1 {
			t.Fatalf("%s, held by the dead worker: %+v %v", l.ID, j, err)
		}
		exp := j.HeartbeatAt.Add(crashTimeout)
		if first.IsZero() || exp.Before(first) {
			first = exp
		}
		if exp.After(last) {
			last = exp
		}
	}

	m := fdbq.NewMonitor(q, fdbq.MonitorOptions{})
	// Before the deadline the dead worker's jobs are left alone: the
	// monitor cannot tell a dead worker from a slow one. Checked only when
	// the reopen left time enough for the answer to mean something.
	if left := time.Until(first); left > 200*time.Millisecond {
		st, err := m.Sweep(ctx)
		if err != nil || st.Recycled != 0 {
			t.Fatalf("sweep before the activity deadline: %+v %v", st, err)
		}
		t.Logf("a sweep %v before the deadline recycled nothing", left.Round(time.Millisecond))
	} else {
		t.Logf("reopen took until %v before the deadline; skipped the early sweep", time.Until(first))
	}

	// The one real-time wait: until the last deadline has passed. Then
	// sweep until the monitor has taken back every job; more than one
	// sweep is needed only if the clock is coarser than the store's ms.
	time.Sleep(time.Until(last) + 2*time.Millisecond)
	recycled, failed := 0, 0
	for deadline := time.Now().Add(10 * time.Second); recycled < n; {
		st, err := m.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		recycled += st.Recycled
		failed += st.Failed
		if recycled < n {
			if time.Now().After(deadline) {
				t.Fatalf("monitor recycled %d of %d jobs of the dead worker", recycled, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if recycled != n || failed != 0 {
		t.Fatalf("monitor recycled %d (failed %d), want %d (0)", recycled, failed, n)
	}
	wantCounts("after the sweep", int64(n), 0, crashFinished)

	// The dead worker's locks are gone: nothing it might still send is
	// accepted.
	halt := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, fdbq.ErrHalt) {
			t.Fatalf("%s with a dead worker's lock: %v, want ErrHalt", what, err)
		}
	}
	for _, l := range held {
		halt("heartbeat", q.Heartbeat(ctx, db, l, fdbq.HeartbeatOptions{}))
		halt("finish", q.Finish(ctx, db, l, nil))
		halt("fail", q.Fail(ctx, db, l, "late"))
		halt("resubmit", q.Resubmit(ctx, db, l, time.Time{}))
	}
	for _, l := range finished {
		// Its own finish is recorded, so repeating it is a no-op; any
		// other use of the lock is refused.
		if err := q.Finish(ctx, db, l, nil); err != nil {
			t.Fatalf("repeated finish of %s by the lease that finished it: %v", l.ID, err)
		}
		halt("heartbeat of a finished job", q.Heartbeat(ctx, db, l, fdbq.HeartbeatOptions{}))
	}

	// The living workers accept and finish every recycled job, each once.
	ctxW, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	var mu sync.Mutex
	ranBy := map[string]string{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctxW.Err() == nil {
				ls, err := q.Accept(ctxW, crashType, fdbq.AcceptOptions{Max: 2, Timeout: 250 * time.Millisecond})
				if err != nil {
					if ctxW.Err() == nil {
						t.Errorf("accept: %v", err)
					}
					return
				}
				for _, l := range ls {
					if err := q.Finish(ctx, db, l, json.RawMessage(`"parent"`)); err != nil {
						t.Errorf("finish %s: %v", l.ID, err)
						return
					}
					mu.Lock()
					if prev, ok := ranBy[l.ID]; ok {
						t.Errorf("%s accepted twice, by %s and %s", l.ID, prev, l.Lock)
					}
					ranBy[l.ID] = l.Lock
					if len(ranBy) == n {
						stop()
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(ranBy) != n {
		t.Fatalf("the living workers finished %d of %d recycled jobs", len(ranBy), n)
	}
	wantCounts("at the end", 0, 0, crashJobs)
	for _, l := range held {
		j, err := q.Get(ctx, db, crashType, l.ID)
		if err != nil || j.State != fdbq.Finished || j.Outcome != fdbq.Succeeded || j.Attempts != 2 || string(j.Result) != `"parent"` {
			t.Fatalf("%s: %+v %v, want finished by a living worker on attempt 2", l.ID, j, err)
		}
		if _, ok := ranBy[l.ID]; !ok {
			t.Fatalf("%s finished but not by a living worker", l.ID)
		}
		halt("finish after another worker finished the job", q.Finish(ctx, db, l, nil))
	}
}
