package pipeline_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// crashDirEnv, when set, makes TestCrashRecovery the child process: it
// runs a pipeline on the store in that directory until it is killed.
const crashDirEnv = "JOBSTAGE_TEST_CRASH_DIR"

const crashStarted = "STARTED "

func openQueue(t testing.TB, dir string) (*fdbq.Queue, *kv.DB) {
	t.Helper()
	st, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	return fdbq.New(db, fdbq.Options{}), db
}

// TestCrashRecovery kills a process in the middle of its jobs (SIGKILL:
// no drain, no release), then checks that the activity monitor recycles
// the jobs it held once their activity timeout passes, and that another
// pipeline finishes every job.
func TestCrashRecovery(t *testing.T) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		crashChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	ctx := context.Background()
	const n, childConcurrency = 8, 3
	all := jobIDs("c", n)
	{
		q, db := openQueue(t, dir)
		s := fdbq.DefaultTypeSettings()
		s.ActivityTimeout = 500 * time.Millisecond
		s.Retry = fdbq.RetryPolicy{MaxAttempts: 3, Backoff: fdbq.Constant, Base: time.Millisecond}
		if err := q.SetType(ctx, db, "t", s); err != nil {
			t.Fatal(err)
		}
		jobs := newJobs(all, `{"v":1}`)
		for i := range jobs {
			jobs[i].Type = "t"
		}
		if _, err := q.AddBatch(ctx, db, jobs); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashRecovery$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var crashed []string
	deadline := time.After(waitLimit)
	for len(crashed) < childConcurrency {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("child exited early; stderr:\n%s", stderr.String())
			}
			if id, found := strings.CutPrefix(l, crashStarted); found {
				crashed = append(crashed, id)
			}
		case <-deadline:
			t.Fatalf("child started %v; stderr:\n%s", crashed, stderr.String())
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed = true
	sort.Strings(crashed)

	q, db := openQueue(t, dir)
	defer db.Close()
	for _, id := range crashed {
		j, err := q.Get(ctx, db, "t", id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != fdbq.Running || j.Attempts != 1 {
			t.Fatalf("job %s after the crash: %s with %d attempts", id, j.State, j.Attempts)
		}
	}
	if n, _ := q.Count(ctx, db, "t", fdbq.Running); n != childConcurrency {
		t.Fatalf("%d jobs running after the crash, want %d", n, childConcurrency)
	}

	// Sweep until the dead process's jobs are recycled. The sweeps are
	// paced (a sweep is a scan of the store), not used as synchronisation:
	// each one's stats say whether the jobs came back.
	mon := fdbq.NewMonitor(q, fdbq.MonitorOptions{Logger: slog.New(slog.DiscardHandler)})
	recycled := 0
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline = time.After(waitLimit)
	for recycled < childConcurrency {
		st, err := mon.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		recycled += st.Recycled
		if recycled >= childConcurrency {
			break
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("recycled %d of %d", recycled, childConcurrency)
		}
	}
	if recycled != childConcurrency {
		t.Fatalf("recycled %d jobs, want %d", recycled, childConcurrency)
	}
	for _, id := range crashed {
		j, err := q.Get(ctx, db, "t", id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != fdbq.Pending || !strings.Contains(j.Error, "activity timeout") {
			t.Fatalf("recycled job %s: %s %q", id, j.State, j.Error)
		}
	}

	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[map[string]int]) (int, error) {
		return j.Data["v"] + j.Attempt, nil
	}, consumer.Options{Concurrency: 4})
	p, err := pipeline.From(producer.New(q, "t", producer.Options{})).To(c).Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(ctx)
	wctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	res, err := q.Wait(wctx, "t", all, fdbq.Finished)
	if err != nil {
		t.Fatal(err)
	}
	wasCrashed := map[string]bool{}
	for _, id := range crashed {
		wasCrashed[id] = true
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		want := 1
		if wasCrashed[all[i]] {
			want = 2
		}
		if j := r.Job; j.Outcome != fdbq.Succeeded || j.Attempts != want || string(j.Result) != fmt.Sprint(1+want) {
			t.Errorf("job %s: %s after %d attempts (want %d), result %s", j.ID, j.Outcome, j.Attempts, want, j.Result)
		}
	}
}

// crashChild is the process that gets killed: it runs a pipeline whose
// handlers report the jobs they start and then block.
func crashChild(dir string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	st, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		fail(err)
	}
	db := kv.NewDB(st, kv.Options{})
	q := fdbq.New(db, fdbq.Options{})
	c, err := consumer.New(func(ctx context.Context, j *consumer.Job[json.RawMessage]) (int, error) {
		fmt.Println(crashStarted + j.ID)
		// Blocks until the parent kills the process; the bound only keeps
		// an orphan from living forever if the parent died first.
		time.Sleep(time.Minute)
		os.Exit(3)
		return 0, nil
	}, consumer.Options{Concurrency: 3, MaxDemand: 3})
	if err != nil {
		fail(err)
	}
	p, err := pipeline.From(producer.New(q, "t", producer.Options{})).To(c).Build()
	if err != nil {
		fail(err)
	}
	if err := p.Start(context.Background()); err != nil {
		fail(err)
	}
	select {}
}
