package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/tuple"
)

// binary is the jobstage command built for these tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "jobstage-cmd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "jobstage")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building jobstage: %v\n%s", err, out)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// waitLimit bounds every wait of these tests.
const waitLimit = 60 * time.Second

// serverProc is a `jobstage serve` process.
type serverProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	url  string
	logs *lockedBuffer
	done chan error

	mu     sync.Mutex
	logged map[string]chan struct{} // by message: closed once logged
}

// loggedMsg returns a channel closed once the server has logged a line
// with message msg.
func (s *serverProc) loggedMsg(msg string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.logged[msg]
	if !ok {
		ch = make(chan struct{})
		s.logged[msg] = ch
	}
	return ch
}

func (s *serverProc) markLogged(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.logged[msg]
	if !ok {
		ch = make(chan struct{})
		s.logged[msg] = ch
	}
	select {
	case <-ch:
	default:
		close(ch)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServer runs `jobstage serve --config cfg` with env added to the
// environment, logging JSON to a pipe, and returns once it listens.
func startServer(t *testing.T, cfg string, env ...string) *serverProc {
	t.Helper()
	cmd := exec.Command(binary, "serve", "--config", cfg)
	cmd.Env = append(append(os.Environ(), "JOBSTAGE_LOGGING__FORMAT=json", "JOBSTAGE_HTTP__LISTEN=127.0.0.1:0"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &serverProc{t: t, cmd: cmd, logs: &lockedBuffer{}, done: make(chan error, 1), logged: map[string]chan struct{}{}}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Bytes()
			s.logs.Write(append(line, '\n'))
			var rec struct{ Msg, URL string }
			if json.Unmarshal(line, &rec) == nil {
				if rec.Msg == "listening" {
					urls <- rec.URL
				}
				s.markLogged(rec.Msg)
			}
		}
		s.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			if t.Failed() {
				// SIGQUIT has the Go runtime print every goroutine's
				// stack: where the server was when the test failed.
				cmd.Process.Signal(syscall.SIGQUIT)
				select {
				case <-s.done:
				case <-time.After(5 * time.Second):
				}
			}
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				<-s.done
			}
		}
		if t.Failed() {
			s.saveLogs()
		}
	})
	select {
	case s.url = <-urls:
	case err := <-s.done:
		t.Fatalf("jobstage serve exited before listening: %v\n%s", err, s.logs)
	case <-time.After(waitLimit):
		t.Fatalf("jobstage serve did not listen\n%s", s.logs)
	}
	return s
}

// saveLogs writes the server's whole log to a file that outlives the
// test and logs its path and its last lines.
func (s *serverProc) saveLogs() {
	logs := s.logs.String()
	f, err := os.CreateTemp("", "jobstage-serve-*.log")
	if err == nil {
		_, err = f.WriteString(logs)
		f.Close()
	}
	if len(logs) > 16<<10 {
		logs = "…" + logs[len(logs)-16<<10:]
	}
	if err != nil {
		s.t.Logf("the server's log (not saved: %v), its end:\n%s", err, logs)
		return
	}
	s.t.Logf("the server's log is in %s; its end:\n%s", f.Name(), logs)
}

// stop sends SIGTERM and checks the server drains and exits cleanly.
func (s *serverProc) stop() {
	s.t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			s.t.Fatalf("jobstage serve exited with %v\n%s", err, s.logs)
		}
	case <-time.After(waitLimit):
		s.t.Fatalf("jobstage serve did not stop\n%s", s.logs)
	}
}

// kill kills the server with SIGKILL: nothing runs on its way out.
func (s *serverProc) kill() {
	s.t.Helper()
	s.cmd.Process.Kill()
	<-s.done
}

// jobstage runs a client command and returns its stdout, stderr and exit
// status.
func jobstage(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func copyQuickstart(t *testing.T) (cfg, data string) {
	t.Helper()
	b, err := os.ReadFile("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg = filepath.Join(dir, "quickstart.yaml")
	if err := os.WriteFile(cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, filepath.Join(dir, "data")
}

// TestQuickstart runs the README's quickstart: serve the example config,
// enqueue a job with the CLI, see the exec handler finish it, and find it
// in the metrics.
func TestQuickstart(t *testing.T) {
	cfg, data := copyQuickstart(t)
	s := startServer(t, cfg, "JOBSTAGE_STORE__PATH="+data)

	out, errOut, code := jobstage(t, "", "enqueue", "echo", `{"hello":"world"}`, "--id", "first", "--wait", "30s", "--json", "--server", s.url)
	if code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, errOut)
	}
	var j httpapi.Job
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("enqueue --json: %v: %s", err, out)
	}
	if j.State != fdbq.Finished || j.Outcome != fdbq.Succeeded || compact(t, j.Result) != `{"hello":"world"}` {
		t.Fatalf("job: %+v", j)
	}

	// The human output of get, and types with counts.
	out, errOut, code = jobstage(t, "", "get", "echo", "first", "--server", s.url)
	if code != 0 || !strings.Contains(out, "finished (succeeded)") || !strings.Contains(out, `{"hello":"world"}`) {
		t.Fatalf("get: exit %d: %s%s", code, out, errOut)
	}
	out, _, code = jobstage(t, "", "types", "--json", "--server", s.url)
	var types struct{ Types []httpapi.TypeInfo }
	if code != 0 || json.Unmarshal([]byte(out), &types) != nil || len(types.Types) != 2 || types.Types[1].Name != "echo" || types.Types[1].Finished != 1 {
		t.Fatalf("types: exit %d: %s", code, out)
	}

	// The metrics count the job as finished, with its type and outcome.
	body := httpGet(t, s.url+"/metrics")
	for _, want := range []string{
		`jobstage_jobs_finished_total{outcome="succeeded",type="echo"} 1`,
		`jobstage_jobs_enqueued_total{type="echo"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// A job's fairness key, from --key and from a bulk file.
	out, errOut, code = jobstage(t, "", "enqueue", "echo", `{}`, "--id", "keyed", "--key", "tenant-7", "--wait", "30s", "--server", s.url)
	if code != 0 || !regexp.MustCompile(`(?m)^key:\s+tenant-7$`).MatchString(out) {
		t.Fatalf("enqueue --key: exit %d: %s%s", code, out, errOut)
	}
	keyed := filepath.Join(t.TempDir(), "keyed.jsonl")
	os.WriteFile(keyed, []byte(`{"id":"keyed-2","key":"tenant-8"}`+"\n"), 0o600)
	if _, errOut, code := jobstage(t, "", "enqueue", "echo", "--file", keyed, "--server", s.url); code != 0 {
		t.Fatalf("enqueue --file with a key: exit %d: %s", code, errOut)
	}
	out, errOut, code = jobstage(t, "", "get", "echo", "keyed-2", "--json", "--server", s.url)
	if err := json.Unmarshal([]byte(out), &j); code != 0 || err != nil || j.Key != "tenant-8" {
		t.Fatalf("get keyed-2: exit %d: %s%s", code, out, errOut)
	}
	if _, errOut, code := jobstage(t, "", "enqueue", "echo", `{}`, "--key", "a\tb", "--server", s.url); code != 1 || !strings.Contains(errOut, "fairness key") {
		t.Fatalf("enqueue with a bad --key: exit %d: %s", code, errOut)
	}

	// Unique jobs: the second enqueue of one customer's month prints the
	// job that is there; with --on-duplicate refuse it exits 1 naming it.
	out, errOut, code = jobstage(t, "", "enqueue", "echo", `{"customer":"acme","month":"2026-11"}`, "--id", "bill-1",
		"--unique-fields", "customer, month", "--unique-states", "pending,running,finished", "--server", s.url)
	if code != 0 || !regexp.MustCompile(`(?m)^enqueue:\s+added$`).MatchString(out) {
		t.Fatalf("enqueue --unique-fields: exit %d: %s%s", code, out, errOut)
	}
	out, errOut, code = jobstage(t, "", "enqueue", "echo", `{"month":"2026-11","customer":"acme","note":"again"}`,
		"--unique-fields", "customer,month", "--unique-states", "pending,running,finished", "--json", "--server", s.url)
	if err := json.Unmarshal([]byte(out), &j); code != 0 || err != nil || j.ID != "bill-1" || j.Added != fdbq.AddedDuplicate {
		t.Fatalf("enqueue a duplicate: exit %d: %s%s", code, out, errOut)
	}
	_, errOut, code = jobstage(t, "", "enqueue", "echo", `{"customer":"acme","month":"2026-11"}`,
		"--unique-fields", "customer,month", "--unique-states", "pending,running,finished", "--on-duplicate", "refuse", "--server", s.url)
	if code != 1 || !strings.Contains(errOut, "bill-1") || !strings.Contains(errOut, "duplicate") {
		t.Fatalf("enqueue --on-duplicate refuse: exit %d: %s", code, errOut)
	}
	if _, errOut, code := jobstage(t, "", "enqueue", "echo", `{}`, "--unique-states", "done", "--server", s.url); code != 1 || !strings.Contains(errOut, "unique.states") {
		t.Fatalf("enqueue with a bad --unique-states: exit %d: %s", code, errOut)
	}
	s.stop()
}

func compact(t *testing.T, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return buf.String()
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

const crashConfig = `
store:
  path: %s
types:
  slow:
    activity_timeout: 2s
    retry: {max_attempts: 10, backoff: constant, base: 10ms}
pipelines:
  slow:
    type: slow
    concurrency: 8
    handler:
      exec:
        command: ["/bin/sh", "-c", "sleep 0.02; cat"]
`

// waitFinished waits for job id of typ to finish and returns it. An accept
// picks at random among the first due jobs (fdbq.DefaultWindow of them),
// so with many pending a job can wait long after those added before it
// have finished: the test fails only when the job is not finished and no
// job of the type finished for stall.
func waitFinished(t *testing.T, cl *httpapi.Client, typ, id string, stall time.Duration) *httpapi.Job {
	t.Helper()
	ctx := context.Background()
	last := finishedCount(t, cl, typ)
	for {
		j, err := cl.Wait(ctx, typ, id, fdbq.Finished, stall)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if j.State == fdbq.Finished {
			return j
		}
		n := finishedCount(t, cl, typ)
		if n == last {
			t.Fatalf("%s is %s, and no job of %s finished for %v: %+v", id, j.State, typ, stall, j)
		}
		last = n
	}
}

// finishedCount is how many jobs of typ are finished.
func finishedCount(t *testing.T, cl *httpapi.Client, typ string) int64 {
	t.Helper()
	types, err := cl.Types(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range types {
		if ti.Name == typ {
			return ti.Finished
		}
	}
	t.Fatalf("no type %s", typ)
	return 0
}

// TestKillNineLosesNothing kills the server with SIGKILL while jobs are
// being enqueued and worked, restarts it on the same store, and checks
// that every job whose enqueue was acknowledged is there and finishes: the
// ones running at the kill are taken back by the activity monitor.
func TestKillNineLosesNothing(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jobstage.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, crashConfig, filepath.Join(dir, "data")), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cfg)
	ctx := context.Background()
	cl := httpapi.NewClient(s.url, "", nil)

	// A bulk enqueue, acknowledged before the kill.
	var lines strings.Builder
	var acked []string
	for i := range 200 {
		fmt.Fprintf(&lines, "{\"id\":\"bulk-%d\",\"data\":{\"n\":%d}}\n", i, i)
		acked = append(acked, fmt.Sprint("bulk-", i))
	}
	jobsFile := filepath.Join(dir, "jobs.jsonl")
	if err := os.WriteFile(jobsFile, []byte(lines.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := jobstage(t, "", "enqueue", "slow", "--file", jobsFile, "--batch", "50", "--server", s.url); code != 0 {
		t.Fatalf("bulk enqueue: exit %d: %s", code, errOut)
	}

	// One at a time until the kill (or maxSingles, which bounds the
	// test's time): every acknowledged one counts.
	const maxSingles = 1500
	stop := make(chan struct{})
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range maxSingles {
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprint("single-", i)
			if _, err := cl.Enqueue(ctx, "slow", httpapi.NewJob{ID: id, Data: json.RawMessage(`{"single":true}`)}); err != nil {
				return // the server is gone
			}
			mu.Lock()
			acked = append(acked, id)
			mu.Unlock()
		}
	}()

	// Kill once some jobs have finished and others are surely running.
	waitFinished(t, cl, "slow", "bulk-40", 30*time.Second)
	s.kill()
	close(stop)
	wg.Wait()

	s = startServer(t, cfg)
	cl = httpapi.NewClient(s.url, "", nil)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range acked {
		j := waitFinished(t, cl, "slow", id, 30*time.Second)
		if j.Outcome != fdbq.Succeeded {
			t.Fatalf("%s lost or unfinished after restart: %+v", id, j)
		}
		want := `{"single":true}`
		if strings.HasPrefix(id, "bulk-") {
			want = fmt.Sprintf(`{"n":%s}`, strings.TrimPrefix(id, "bulk-"))
		}
		if string(j.Result) != want {
			t.Fatalf("%s: result %s, want %s", id, j.Result, want)
		}
	}
	t.Logf("%d acknowledged jobs all finished after kill -9 and restart", len(acked))
	s.stop()
}

// TestBadConfigRefused: serve and config lint refuse a bad config, naming
// each problem with its position, and start nothing.
func TestBadConfigRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bad.yaml")
	bad := "store:\n  path: " + filepath.Join(dir, "data") + "\ntypes:\n  echo:\n    activity_timeout: soon\npipelines:\n  p:\n    type: missing\n    handler:\n      exec: {command: [cat]}\n"
	if err := os.WriteFile(cfg, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"config", "lint", cfg}, {"serve", "--config", cfg}} {
		_, errOut, code := jobstage(t, "", args...)
		if code != 1 {
			t.Errorf("%v: exit %d, want 1: %s", args, code, errOut)
		}
		for _, want := range []string{cfg + ":5:23:", "soon", cfg + ":8:11:", "missing"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%v: output lacks %q:\n%s", args, want, errOut)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Errorf("serve created the store of a refused config: %v", err)
	}
	out, _, code := jobstage(t, "", "config", "lint", "../../examples/quickstart.yaml")
	if code != 0 || !strings.Contains(out, "ok") {
		t.Errorf("quickstart lint: exit %d: %s", code, out)
	}
	docs, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _ := jobstage(t, "", "config", "docs"); out != string(docs) {
		t.Error("jobstage config docs differs from docs/config.md")
	}
}

// TestClientErrors: client commands explain the server's refusals and bad
// input, with exit status 1 (refused) or 2 (bad usage).
func TestClientErrors(t *testing.T) {
	cfg, data := copyQuickstart(t)
	s := startServer(t, cfg, "JOBSTAGE_STORE__PATH="+data)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"enqueue", "nosuchtype", "{}"}, 1, "unknown_type"},
		{[]string{"enqueue", "echo", "{not json"}, 2, "not valid JSON"},
		{[]string{"get", "echo", "nosuchjob"}, 1, "not_found"},
		{[]string{"get", "echo"}, 2, "want 2 argument(s)"},
		{[]string{"list", "echo", "--state", "sleeping"}, 1, "invalid"},
		{[]string{"frobnicate"}, 2, "unknown command"},
	}
	for _, c := range cases {
		args := append(c.args, "--server", s.url)
		if c.args[0] == "frobnicate" {
			args = c.args
		}
		_, errOut, code := jobstage(t, "", args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errOut, c.code, c.want)
		}
	}
	// With --json, a refusal is the API's error object.
	_, errOut, code := jobstage(t, "", "get", "echo", "nosuchjob", "--json", "--server", s.url)
	var e struct {
		Error, Message string
		Status         int
	}
	if code != 1 || json.Unmarshal([]byte(errOut), &e) != nil || e.Error != "not_found" || e.Status != 404 || !strings.Contains(e.Message, "nosuchjob") {
		t.Errorf("--json refusal: exit %d: %s", code, errOut)
	}
	// A corrupt line in a bulk file enqueues nothing.
	file := filepath.Join(t.TempDir(), "jobs.jsonl")
	os.WriteFile(file, []byte("{\"id\":\"a\"}\n{\"id\":\"b\",}\n"), 0o600)
	_, errOut, code = jobstage(t, "", "enqueue", "echo", "--file", file, "--server", s.url)
	if code != 1 || !strings.Contains(errOut, "jobs.jsonl:2:") || !strings.Contains(errOut, "nothing was enqueued") {
		t.Errorf("corrupt bulk file: exit %d: %s", code, errOut)
	}
	if _, errOut, code := jobstage(t, "", "get", "echo", "a", "--server", s.url); code != 1 || !strings.Contains(errOut, "not_found") {
		t.Errorf("job a of a refused file exists: exit %d: %s", code, errOut)
	}
	// A batch the server refuses midway: what went in and what did not.
	big := strings.Repeat("y", fdbq.MaxDataSize+10)
	os.WriteFile(file, []byte("{\"id\":\"m1\"}\n\n{\"id\":\"m2\",\"data\":\""+big+"\"}\n{\"id\":\"m3\"}\n"), 0o600)
	_, errOut, code = jobstage(t, "", "enqueue", "echo", "--file", file, "--batch", "1", "--server", s.url)
	if code != 1 || !strings.Contains(errOut, "1 of 3 jobs enqueued; jobs 2–2 (lines 3–3) refused") || !strings.Contains(errOut, "too_large (HTTP 413)") {
		t.Errorf("refused batch: exit %d: %s", code, errOut)
	}
	// With --json, the server's code and status, and the batch's context
	// before its message.
	os.WriteFile(file, []byte("{\"id\":\"n2\",\"data\":\""+big+"\"}\n"), 0o600)
	_, errOut, code = jobstage(t, "", "enqueue", "echo", "--file", file, "--json", "--server", s.url)
	if code != 1 || json.Unmarshal([]byte(errOut), &e) != nil || e.Error != "too_large" || e.Status != 413 ||
		!strings.HasPrefix(e.Message, "0 of 1 jobs enqueued; jobs 1–1 (lines 1–1) refused") {
		t.Errorf("refused batch --json: exit %d: %s", code, errOut)
	}
	s.stop()
}

const twoTypesConfig = `
store: {path: %s}
types:
  ok: {}
  bad: {retry: {max_attempts: 1}}
pipelines:
  ok: {type: ok, handler: {exec: {command: ["cat"]}}}
  bad: {type: bad, handler: {exec: {command: ["/bin/sh", "-c", "echo no luck >&2; exit 3"]}}}
`

// TestWaitExitStatus: enqueue --wait and wait exit 0 only for a job that
// finished successfully.
func TestWaitExitStatus(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jobstage.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, twoTypesConfig, filepath.Join(dir, "data")), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cfg)
	if out, errOut, code := jobstage(t, "", "enqueue", "ok", "1", "--id", "a", "--wait", "30s", "--server", s.url); code != 0 {
		t.Errorf("succeeded job: exit %d: %s%s", code, out, errOut)
	}
	out, errOut, code := jobstage(t, "", "enqueue", "bad", "1", "--id", "b", "--wait", "30s", "--server", s.url)
	if code != 1 || !strings.Contains(out, "finished (failed)") || !strings.Contains(errOut, "bad b finished failed: exit status 3: no luck") {
		t.Errorf("failed job: exit %d: %s%s", code, out, errOut)
	}
	if _, errOut, code := jobstage(t, "", "wait", "bad", "b", "--server", s.url); code != 1 || !strings.Contains(errOut, "finished failed") {
		t.Errorf("wait for a failed job: exit %d: %s", code, errOut)
	}
	if _, errOut, code := jobstage(t, "", "pause", "ok", "--server", s.url); code != 0 {
		t.Fatalf("pause: exit %d: %s", code, errOut)
	}
	_, errOut, code = jobstage(t, "", "enqueue", "ok", "2", "--id", "c", "--wait", "1s", "--server", s.url)
	if code != 1 || !strings.Contains(errOut, "ok c not finished after 1s: pending") {
		t.Errorf("job of a paused type: exit %d: %s", code, errOut)
	}
	// --timeout 0s looks once, without the server's default wait (30s,
	// as long as the client gives the request).
	start := time.Now()
	_, errOut, code = jobstage(t, "", "wait", "ok", "c", "--timeout", "0s", "--server", s.url)
	if code != 1 || !strings.Contains(errOut, "ok c not finished after 0s: pending") || time.Since(start) > 20*time.Second {
		t.Errorf("wait --timeout 0s: exit %d after %s: %s", code, time.Since(start), errOut)
	}
	s.stop()
}

// TestEnqueueFileSplitsBySize: a bulk file whose default batches would be
// over the server's body limit goes in smaller requests.
func TestEnqueueFileSplitsBySize(t *testing.T) {
	cfg, data := copyQuickstart(t)
	s := startServer(t, cfg, "JOBSTAGE_STORE__PATH="+data, "JOBSTAGE_TYPES__ECHO__PAUSED=true")
	var lines strings.Builder
	pad := strings.Repeat("x", 3000)
	for i := range 600 {
		fmt.Fprintf(&lines, "{\"id\":\"big-%d\",\"data\":\"%s\"}\n", i, pad)
	}
	file := filepath.Join(t.TempDir(), "big.jsonl")
	if err := os.WriteFile(file, []byte(lines.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := jobstage(t, "", "enqueue", "echo", "--file", file, "--server", s.url)
	if code != 0 || !strings.Contains(out, "enqueued 600 echo jobs") || !strings.Contains(errOut, "enqueued 600/600") {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	s.stop()
}

const sleeperConfig = `
store: {path: %s}
types:
  sleepy: {}
pipelines:
  sleepy:
    type: sleepy
    handler:
      exec:
        command: ["/bin/sh", "-c", "echo $$ > %s; exec sleep 600"]
`

// TestKillNineKillsExecChildren: a command the exec handler runs dies with
// the server, so a job the monitor recycles is not also still running.
func TestKillNineKillsExecChildren(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	cfg := filepath.Join(dir, "jobstage.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, sleeperConfig, filepath.Join(dir, "data"), pidFile), 0o600); err != nil {
		t.Fatal(err)
	}
	// The command reports its pid through a FIFO: reading it waits for the
	// command to have started.
	if err := syscall.Mkfifo(pidFile, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cfg)
	cl := httpapi.NewClient(s.url, "", nil)
	ctx := context.Background()
	if _, err := cl.Enqueue(ctx, "sleepy", httpapi.NewJob{ID: "z"}); err != nil {
		t.Fatal(err)
	}
	pids := make(chan []byte, 1)
	go func() {
		b, _ := os.ReadFile(pidFile)
		pids <- b
	}()
	var pid int
	if _, err := fmt.Sscan(string(recvBytes(t, pids, "the command's pid")), &pid); err != nil || pid <= 0 {
		t.Fatalf("the command's pid: %v", err)
	}
	// A pidfd becomes readable when its process ends: the test waits on
	// that, not on a poll.
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("child %d not running before the kill: %v", pid, err)
	}
	defer unix.Close(pidfd)
	s.kill()
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		// The kernel kills it with its parent; 10 s is ample, and far
		// below the command's own 600 s.
		n, err := unix.Poll(fds, 10_000)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("child %d outlived the killed server", pid)
		}
		return
	}
}

func recvBytes(t *testing.T, ch <-chan []byte, what string) []byte {
	t.Helper()
	select {
	case b := <-ch:
		return b
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
		return nil
	}
}

// TestServeRefusesAnotherLayout: a store in a data layout this version
// does not read is refused at start with the layout named, not served.
func TestServeRefusesAnotherLayout(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	st, err := embedded.Open(data, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	layout := tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{14})
	if err := db.Transact(context.Background(), func(tx kv.Tx) error {
		tx.Set(layout, []byte{fdbq.Layout + 1, 0, 0, 0, 0, 0, 0, 0}) // uint64 LE
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	cfg := filepath.Join(dir, "serve.yaml")
	if err := os.WriteFile(cfg, []byte("store:\n  path: "+data+"\nhttp:\n  listen: 127.0.0.1:0\ntypes:\n  echo: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := jobstage(t, "", "serve", "--config", cfg)
	want := fmt.Sprintf("the store is in layout %d, written by a newer version of jobstage; this one reads layout %d", fdbq.Layout+1, fdbq.Layout)
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("serve of a layout-%d store: exit %d: %s", fdbq.Layout+1, code, errOut)
	}
}
