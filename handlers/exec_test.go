package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/handlers"
	"github.com/jobstage/jobstage/internal/proctest"
)

// waitLimit bounds every wait of these tests: a wait that takes longer
// fails the test instead of hanging it.
const waitLimit = 20 * time.Second

func job(data string) *consumer.Job[json.RawMessage] {
	return &consumer.Job[json.RawMessage]{ID: "job-1", Type: "resize", Attempt: 2, Data: json.RawMessage(data)}
}

func mustExec(t *testing.T, o handlers.ExecOptions) consumer.Handler[json.RawMessage, json.RawMessage] {
	t.Helper()
	h, err := handlers.Exec(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func TestExecDataOnStdinJSONResult(t *testing.T) {
	h := mustExec(t, handlers.ExecOptions{Command: []string{"cat"}})
	got, err := h(context.Background(), job(`{"width": 640}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"width": 640}` {
		t.Fatalf("result %s, want the data back", got)
	}
}

func TestExecResults(t *testing.T) {
	for _, c := range []struct{ name, script, want string }{
		{"text becomes a string", `echo 'resized to 640'`, `"resized to 640"`},
		{"number", `echo 42`, `42`},
		{"no output is null", `true`, `null`},
		{"blank output is null", `printf '\n  \n'`, `null`},
		{"invalid utf-8 is still valid JSON", `printf '\377ok'`, `"\ufffdok"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := mustExec(t, handlers.ExecOptions{Command: sh(c.script)})(context.Background(), job(`null`))
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(got) || string(got) != c.want {
				t.Fatalf("result %s, want %s", got, c.want)
			}
		})
	}
}

func TestExecEnvironment(t *testing.T) {
	t.Setenv("JOBSTAGE_TEST_PARENT", "from-parent")
	h := mustExec(t, handlers.ExecOptions{
		Command: sh(`printf '{"id":"%s","type":"%s","attempt":"%s","extra":"%s","parent":"%s","pwd":"%s"}' "$JOBSTAGE_JOB_ID" "$JOBSTAGE_JOB_TYPE" "$JOBSTAGE_JOB_ATTEMPT" "$EXTRA" "$JOBSTAGE_TEST_PARENT" "$(pwd)"`),
		Env:     map[string]string{"EXTRA": "configured", "JOBSTAGE_TEST_PARENT": "overridden"},
		Dir:     t.TempDir(),
	})
	got, err := h(context.Background(), job(`null`))
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]string
	if err := json.Unmarshal(got, &env); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	want := map[string]string{"id": "job-1", "type": "resize", "attempt": "2", "extra": "configured", "parent": "overridden"}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if env["pwd"] == "" || filepath.Base(env["pwd"]) == filepath.Base(mustGetwd(t)) {
		t.Errorf("pwd %q: the command did not run in Dir", env["pwd"])
	}
}

func mustGetwd(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

func TestExecJobCannotOverrideJobVariables(t *testing.T) {
	h := mustExec(t, handlers.ExecOptions{Command: sh(`printf '%s' "$JOBSTAGE_JOB_ID"`), Env: map[string]string{"JOBSTAGE_JOB_ID": "forged"}})
	got, err := h(context.Background(), job(`null`))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `"job-1"` {
		t.Fatalf("JOBSTAGE_JOB_ID seen as %s, want the job's id", got)
	}
}

func TestExecFailureCarriesExitStatusAndStderr(t *testing.T) {
	h := mustExec(t, handlers.ExecOptions{Command: sh(`echo partial; echo 'disk full' >&2; exit 3`)})
	_, err := h(context.Background(), job(`null`))
	if err == nil || err.Error() != "exit status 3: disk full" {
		t.Fatalf("error %v, want %q", err, "exit status 3: disk full")
	}
}

func TestExecStderrTailIsBounded(t *testing.T) {
	// 10,000 lines of stderr, then the line that explains the failure.
	h := mustExec(t, handlers.ExecOptions{Command: sh(`i=0; while [ $i -lt 10000 ]; do echo "noise $i" >&2; i=$((i+1)); done; echo 'the real reason' >&2; exit 1`), StderrTail: 64})
	_, err := h(context.Background(), job(`null`))
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "exit status 1: …") || !strings.HasSuffix(msg, "the real reason") {
		t.Fatalf("error %q: want the exit status and the end of stderr", msg)
	}
	if len(msg) > len("exit status 1: …")+64 {
		t.Fatalf("error is %d bytes, more than the tail of 64 allows", len(msg))
	}
}

func TestExecOutputLimit(t *testing.T) {
	h := mustExec(t, handlers.ExecOptions{Command: sh(`printf '"0123456789"'`), MaxOutput: 12})
	if got, err := h(context.Background(), job(`null`)); err != nil || string(got) != `"0123456789"` {
		t.Fatalf("output at the limit: %s, %v", got, err)
	}
	h = mustExec(t, handlers.ExecOptions{Command: sh(`head -c 100000 /dev/zero`), MaxOutput: 12})
	_, err := h(context.Background(), job(`null`))
	if !errors.Is(err, handlers.ErrOutputTooLarge) || !strings.Contains(err.Error(), "100000 bytes") {
		t.Fatalf("error %v, want ErrOutputTooLarge naming the size", err)
	}
}

func TestExecStdinNotReadIsFine(t *testing.T) {
	big := `"` + strings.Repeat("x", 1<<20) + `"`
	got, err := mustExec(t, handlers.ExecOptions{Command: sh(`echo done`)})(context.Background(), job(big))
	if err != nil || string(got) != `"done"` {
		t.Fatalf("%s, %v", got, err)
	}
}

// TestExecKillsProcessGroupOnCancel runs a script that starts a child of
// its own, cancels the job, and checks that both are dead when the handler
// returns.
func TestExecKillsProcessGroupOnCancel(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pids")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	h := mustExec(t, handlers.ExecOptions{Command: sh(`sleep 1000 & echo "$$ $!" > ` + fifo + `; wait`)})
	ctx, cancel := context.WithCancelCause(context.Background())
	halted := errors.New("halted by the test")
	done := make(chan error, 1)
	go func() {
		_, err := h(ctx, job(`null`))
		done <- err
	}()
	// Opening the fifo blocks until the script opens it to write.
	b, err := os.ReadFile(fifo)
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		t.Fatalf("script wrote %q, want two pids", b)
	}
	shell, _ := strconv.Atoi(fields[0])
	child, _ := strconv.Atoi(fields[1])
	childFD, err := unix.PidfdOpen(child, 0)
	if err != nil {
		t.Fatalf("the script's child %d: %v", child, err)
	}
	defer unix.Close(childFD)
	cancel(halted)
	select {
	case err = <-done:
	case <-time.After(waitLimit):
		t.Fatal("the handler did not return after its context ended")
	}
	if !errors.Is(err, halted) || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("error %v, want it to say the command was killed, with the cause", err)
	}
	if err := syscall.Kill(shell, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the command (pid %d) still exists: kill(pid, 0) = %v", shell, err)
	}
	// The grandchild is not ours to reap: its pidfd becomes readable when
	// it exits. The handler sent its group SIGKILL before returning.
	if !exited(t, childFD) {
		t.Errorf("the command's child (pid %d) is still alive", child)
	}
}

// exited waits, up to waitLimit, for the process behind a pidfd to exit.
func exited(t *testing.T, fd int) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(waitLimit/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
}

func TestExecLeftoverProcessesDieWithTheCommand(t *testing.T) {
	// The command exits at once, leaving a child in its group that holds
	// no pipe of ours.
	h := mustExec(t, handlers.ExecOptions{Command: sh(`sleep 1000 >/dev/null 2>&1 </dev/null & echo $!`)})
	got, err := h(context.Background(), job(`null`))
	if err != nil {
		t.Fatal(err)
	}
	var child int
	if err := json.Unmarshal(got, &child); err != nil || child <= 0 {
		t.Fatalf("result %s: %v", got, err)
	}
	fd, err := unix.PidfdOpen(child, 0)
	if errors.Is(err, unix.ESRCH) {
		return // already gone and reaped
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if !exited(t, fd) {
		t.Errorf("the command's leftover child (pid %d) is still alive", child)
	}
}

func TestExecBadOptions(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		o    handlers.ExecOptions
		want string
	}{
		{"no command", handlers.ExecOptions{}, "command is empty"},
		{"empty program", handlers.ExecOptions{Command: []string{""}}, "command is empty"},
		{"unknown program", handlers.ExecOptions{Command: []string{"no-such-program-jobstage"}}, `command "no-such-program-jobstage"`},
		{"negative max output", handlers.ExecOptions{Command: []string{"cat"}, MaxOutput: -1}, "max output -1 is negative"},
		{"max output over the result limit", handlers.ExecOptions{Command: []string{"cat"}, MaxOutput: 1 << 20}, "above a job result's limit"},
		{"negative stderr tail", handlers.ExecOptions{Command: []string{"cat"}, StderrTail: -1}, "stderr tail -1 is negative"},
		{"missing dir", handlers.ExecOptions{Command: []string{"cat"}, Dir: filepath.Join(file, "x")}, "dir:"},
		{"dir is a file", handlers.ExecOptions{Command: []string{"cat"}, Dir: file}, "is not a directory"},
		{"bad env name", handlers.ExecOptions{Command: []string{"cat"}, Env: map[string]string{"A=B": "x"}}, `bad variable name "A=B"`},
		{"bad pass env name", handlers.ExecOptions{Command: []string{"cat"}, PassEnv: []string{"1X"}}, `pass env: bad variable name "1X"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := handlers.Exec(c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestExecStartFailure(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := mustExec(t, handlers.ExecOptions{Command: []string{prog}})
	if err := os.Remove(prog); err != nil {
		t.Fatal(err)
	}
	_, err := h(context.Background(), job(`null`))
	if err == nil || !strings.Contains(err.Error(), "start "+prog) {
		t.Fatalf("error %v, want one naming the program it could not start", err)
	}
}

// TestExecEnvironmentIsMinimal: the command gets the base variables, those
// PassEnv names, Env and the job's; nothing else of this process's
// environment, and nothing Withhold names even when listed.
func TestExecEnvironmentIsMinimal(t *testing.T) {
	t.Setenv("JOBSTAGE_TEST_SECRET", "s3cret-not-named")
	t.Setenv("JOBSTAGE_TEST_WITHHELD", "s3cret-named")
	t.Setenv("JOBSTAGE_TEST_PASSED", "passed")
	t.Setenv("LC_TIME", "C")
	t.Setenv("TZ", "s3cret-in-base")
	h := mustExec(t, handlers.ExecOptions{
		Command:  []string{"env"},
		PassEnv:  []string{"JOBSTAGE_TEST_PASSED", "JOBSTAGE_TEST_WITHHELD", "JOBSTAGE_TEST_UNSET"},
		Withhold: []string{"JOBSTAGE_TEST_WITHHELD", "TZ"},
		Env:      map[string]string{"EXTRA": "configured"},
	})
	got, err := h(context.Background(), job(`null`))
	if err != nil {
		t.Fatal(err)
	}
	var out string
	if err := json.Unmarshal(got, &out); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("a withheld or unnamed variable reached the command:\n%s", out)
	}
	env := proctest.Env(out)
	want := map[string]string{
		"JOBSTAGE_TEST_PASSED": "passed", "LC_TIME": "C", "EXTRA": "configured",
		"JOBSTAGE_JOB_ID": "job-1", "JOBSTAGE_JOB_TYPE": "resize", "JOBSTAGE_JOB_ATTEMPT": "2",
	}
	for _, k := range []string{"PATH", "HOME", "LANG", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			want[k] = v
		}
	}
	proctest.CheckEnv(t, env, want, "it was not asked for")
}

// BenchmarkExecTrue is the cost of a job whose command does nothing: the
// process starts (on Linux the supervisor's and the command's) and the
// plumbing around them.
func BenchmarkExecTrue(b *testing.B) {
	h, err := handlers.Exec(handlers.ExecOptions{Command: []string{"true"}})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := h(context.Background(), job(`null`)); err != nil {
			b.Fatal(err)
		}
	}
}
