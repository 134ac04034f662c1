package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
)

// Defaults of ExecOptions.
const (
	DefaultMaxOutput  = 64 << 10
	DefaultStderrTail = 4 << 10
)

// execWaitDelay bounds how long Exec waits, after the command exited or was
// killed, for its output pipes to close: a process that left the command's
// group could otherwise hold them open, and the job, forever.
const execWaitDelay = 5 * time.Second

// Environment variables Exec sets for the command.
const (
	EnvJobID      = "JOBSTAGE_JOB_ID"
	EnvJobType    = "JOBSTAGE_JOB_TYPE"
	EnvJobAttempt = "JOBSTAGE_JOB_ATTEMPT"
)

// ErrOutputTooLarge: a command's stdout, or a server's response body, was
// longer than the handler's bound. The attempt fails.
var ErrOutputTooLarge = errors.New("handlers: output too large")

// ExecOptions configure Exec.
type ExecOptions struct {
	// Command is the program and its arguments. It runs as is, never
	// through a shell, so job data can never become part of a command
	// line. A program name without a slash is looked up in PATH when the
	// handler is made.
	Command []string
	// Dir is the command's working directory; empty: the process's.
	Dir string
	// Env is set on top of the process's environment; the JOBSTAGE_JOB_*
	// variables are set on top of both.
	Env map[string]string
	// MaxOutput bounds stdout, the job's result (default
	// DefaultMaxOutput, at most fdbq.MaxDataSize). A command that writes
	// more fails its attempt with ErrOutputTooLarge.
	MaxOutput int
	// StderrTail is how much of the end of stderr a failed attempt's error
	// carries (default DefaultStderrTail).
	StderrTail int
}

// Exec returns a handler that runs a command for each job:
//
//   - the job's data is the command's stdin, as JSON;
//   - its id, type and attempt number are in EnvJobID, EnvJobType and
//     EnvJobAttempt;
//   - exit status 0 succeeds, with stdout as the result (see the package
//     documentation);
//   - another exit status fails the attempt with the error
//     "exit status N: <end of stderr>";
//   - when the job's context ends (halt, timeout, stop) the command's whole
//     process group is killed and the attempt fails with the context's
//     cause.
//
// Processes the command left behind in its group are killed when it exits.
func Exec(o ExecOptions) (consumer.Handler[json.RawMessage, json.RawMessage], error) {
	if len(o.Command) == 0 || o.Command[0] == "" {
		return nil, errors.New("handlers: exec: command is empty")
	}
	switch {
	case o.MaxOutput < 0:
		return nil, fmt.Errorf("handlers: exec: max output %d is negative", o.MaxOutput)
	case o.MaxOutput > fdbq.MaxDataSize:
		return nil, fmt.Errorf("handlers: exec: max output %d is above a job result's limit of %d bytes", o.MaxOutput, fdbq.MaxDataSize)
	case o.MaxOutput == 0:
		o.MaxOutput = DefaultMaxOutput
	}
	switch {
	case o.StderrTail < 0:
		return nil, fmt.Errorf("handlers: exec: stderr tail %d is negative", o.StderrTail)
	case o.StderrTail == 0:
		o.StderrTail = DefaultStderrTail
	}
	if o.Dir != "" {
		if fi, err := os.Stat(o.Dir); err != nil {
			return nil, fmt.Errorf("handlers: exec: dir: %w", err)
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("handlers: exec: dir %s is not a directory", o.Dir)
		}
	}
	prog := o.Command[0]
	if !strings.Contains(prog, "/") {
		p, err := exec.LookPath(prog)
		if err != nil {
			return nil, fmt.Errorf("handlers: exec: command %q: %w", prog, err)
		}
		prog = p
	}
	env, err := execEnv(o.Env)
	if err != nil {
		return nil, err
	}
	r := &execRunner{prog: prog, args: slices.Clone(o.Command[1:]), name: o.Command[0], dir: o.Dir, env: env, maxOutput: o.MaxOutput, stderrTail: o.StderrTail}
	return r.run, nil
}

// execEnv returns the configured variables as KEY=value, in key order.
func execEnv(m map[string]string) ([]string, error) {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("handlers: exec: env: bad variable name %q", k)
		}
		if strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("handlers: exec: env: value of %s contains a NUL byte", k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k + "=" + m[k]
	}
	return out, nil
}

type execRunner struct {
	prog, name string
	args       []string
	dir        string
	env        []string
	maxOutput  int
	stderrTail int
}

func (r *execRunner) run(ctx context.Context, job *consumer.Job[json.RawMessage]) (json.RawMessage, error) {
	cmd := exec.CommandContext(ctx, r.prog, r.args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), r.env...)
	cmd.Env = append(cmd.Env,
		EnvJobID+"="+job.ID,
		EnvJobType+"="+job.Type,
		EnvJobAttempt+"="+strconv.Itoa(job.Attempt),
	)
	data := []byte(job.Data)
	if len(data) == 0 {
		data = []byte("null")
	}
	cmd.Stdin = bytes.NewReader(data)
	stdout := &limitBuffer{max: r.maxOutput}
	stderr := &tailBuffer{max: r.stderrTail}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// The command leads a process group of its own, and cancellation kills
	// the group: a shell script's children die with it. Where the system
	// can, the command is also killed when this process dies (kill -9
	// included), so that a recycled job is not worked twice at once.
	cmd.SysProcAttr = procAttr()
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = execWaitDelay

	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("handlers: exec: start %s: %w", r.name, err)
	}
	err := cmd.Wait()
	// Whatever the command left running in its group goes with it. While
	// one of them lives the group's id is not given to a new process; when
	// none does, the kill finds no group.
	_ = killGroup(cmd.Process.Pid)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("handlers: exec: %s killed: %w%s", r.name, context.Cause(ctx), tailSuffix(stderr))
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return nil, fmt.Errorf("%s%s", exitText(exit), tailSuffix(stderr))
	case err != nil:
		return nil, fmt.Errorf("handlers: exec: %s: %w%s", r.name, err, tailSuffix(stderr))
	case stdout.over():
		return nil, fmt.Errorf("%w: %s wrote %d bytes to stdout, more than the %d allowed", ErrOutputTooLarge, r.name, stdout.total, r.maxOutput)
	}
	return asResult(stdout.buf), nil
}

// exitText says how the command ended: "exit status N" or "signal: S".
func exitText(e *exec.ExitError) string {
	if ws, ok := e.Sys().(syscall.WaitStatus); ok && ws.Exited() {
		return "exit status " + strconv.Itoa(ws.ExitStatus())
	}
	return e.String()
}

func tailSuffix(t *tailBuffer) string {
	s := strings.TrimSpace(t.String())
	if s == "" {
		return ""
	}
	return ": " + s
}

// killGroup kills the process group led by pid; a group already gone is
// not an error.
func killGroup(pid int) error {
	err := syscall.Kill(-pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
