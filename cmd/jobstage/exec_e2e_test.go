package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/internal/proctest"
)

const treeConfig = `
store:
  path: %s
types:
  tree: {}
pipelines:
  tree:
    type: tree
    handler:
      exec:
        command: [%q, %q]
`

// treeSize is how many pids handlers/testdata/tree.sh writes.
const treeSize = 13

// TestKillNineKillsExecProcessTree: every process an exec command started,
// four deep, some in sessions of their own or orphaned by a double fork,
// dies when the server is killed with SIGKILL.
func TestKillNineKillsExecProcessTree(t *testing.T) {
	dir := t.TempDir()
	script, err := filepath.Abs("../../handlers/testdata/tree.sh")
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "pids")
	cfg := filepath.Join(dir, "jobstage.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, treeConfig, filepath.Join(dir, "data"), script, pidFile), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cfg)
	cl := httpapi.NewClient(s.url, "", nil)
	if _, err := cl.Enqueue(context.Background(), "tree", httpapi.NewJob{ID: "t"}); err != nil {
		t.Fatal(err)
	}
	fds := treePidfds(t, pidFile)
	s.kill()
	allExit(t, fds, 10*time.Second)
}

// treePidfds waits, up to waitLimit, for all of the tree's pids to be
// written, and opens a pidfd on each still running.
func treePidfds(t *testing.T, file string) map[int]int {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	var lines []string
	for {
		b, _ := os.ReadFile(file)
		if lines = strings.Fields(string(b)); len(lines) >= treeSize {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command's process tree was not up within %v: %q", waitLimit, lines)
		}
		time.Sleep(10 * time.Millisecond)
	}
	fds := map[int]int{}
	for _, l := range lines {
		pid, err := strconv.Atoi(l)
		if err != nil {
			t.Fatalf("pid file line %q", l)
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if errors.Is(err, unix.ESRCH) {
			continue // one of the tree's parents that exit at once
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		fds[fd] = pid
	}
	return fds
}

// allExit waits, up to limit, for the processes behind the pidfds to end,
// and fails naming those that live on, killing them.
func allExit(t *testing.T, fds map[int]int, limit time.Duration) {
	t.Helper()
	names := map[int]string{}
	for fd, pid := range fds {
		names[fd] = strconv.Itoa(pid)
	}
	alive, err := proctest.WaitExit(names, limit)
	if err != nil {
		t.Fatal(err)
	}
	if len(alive) > 0 {
		t.Fatalf("%d of the command's processes outlived the server: %v", len(alive), alive)
	}
}

const envConfig = `
store:
  path: %s
types:
  env: {}
http:
  tokens:
    - {name: admin, role: admin, value_env: JOBSTAGE_TEST_ADMIN_TOKEN}
    - {name: tzadmin, role: admin, value_env: TZ}
pipelines:
  env:
    type: env
    handler:
      exec:
        command: [env]
        pass_env: [JOBSTAGE_TEST_PASSED]
        env: {EXTRA: configured}
`

// TestExecEnvironmentHasNoSecrets: a command run by the server sees the
// base variables, those its config names, and none of the server's
// secrets or other variables, even one whose name is in the base set.
func TestExecEnvironmentHasNoSecrets(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jobstage.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, envConfig, filepath.Join(dir, "data")), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cfg,
		"JOBSTAGE_TEST_ADMIN_TOKEN=admin-s3cret", "TZ=tz-s3cret", "JOBSTAGE_TEST_OTHER=other-s3cret",
		"JOBSTAGE_TEST_PASSED=passed", "LC_ALL=C", "PATH=/usr/bin:/bin")
	cl := httpapi.NewClient(s.url, "admin-s3cret", nil)
	ctx := context.Background()
	if _, err := cl.Enqueue(ctx, "env", httpapi.NewJob{ID: "e"}); err != nil {
		t.Fatal(err)
	}
	j, err := cl.Wait(ctx, "env", "e", fdbq.Finished, waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	if j.Outcome != fdbq.Succeeded || json.Unmarshal(j.Result, &out) != nil {
		t.Fatalf("job %+v", j)
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("a secret reached the command:\n%s", out)
	}
	env := proctest.Env(out)
	want := map[string]string{
		"PATH": "/usr/bin:/bin", "LC_ALL": "C", "JOBSTAGE_TEST_PASSED": "passed", "EXTRA": "configured",
		"JOBSTAGE_JOB_ID": "e", "JOBSTAGE_JOB_TYPE": "env", "JOBSTAGE_JOB_ATTEMPT": "1",
	}
	for _, k := range []string{"HOME", "LANG", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			want[k] = v
		}
	}
	// The attempt's trace context, never a secret: the job's trace (one
	// of its own, the server having no tracing section) and the attempt's
	// span, not sampled.
	if tp := env["TRACEPARENT"]; !regexp.MustCompile(`^00-`+j.TraceID+`-[0-9a-f]{16}-00$`).MatchString(tp) || j.TraceID == "" {
		t.Errorf("TRACEPARENT %q, want the job's trace %q", tp, j.TraceID)
	}
	want["TRACEPARENT"] = env["TRACEPARENT"]
	proctest.CheckEnv(t, env, want, "the config did not ask for it")
	s.stop()
}
