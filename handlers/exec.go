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
	"github.com/jobstage/jobstage/tracing"
)

// Defaults of ExecOptions.
const (
	DefaultMaxOutput  = 64 << 10
	DefaultStderrTail = 4 << 10
)

// execWaitDelay bounds how long Exec waits, after the command exited or was
// killed, for its output pipes to close: a process that escaped the kill
// (elsewhere than Linux, one that left the command's group) could otherwise
// hold them open, and the job, forever. On Linux it also bounds the wait for
// the supervisor to exit once asked to, before it is killed.
const execWaitDelay = 5 * time.Second

// Environment variables Exec sets for the command.
const (
	EnvJobID      = "JOBSTAGE_JOB_ID"
	EnvJobType    = "JOBSTAGE_JOB_TYPE"
	EnvJobAttempt = "JOBSTAGE_JOB_ATTEMPT"
	// EnvTraceparent and EnvTracestate hold the W3C trace context of the
	// job's attempt (its handle span, package tracing) when it has one:
	// what OpenTelemetry's SDKs read to continue a trace in a process.
	EnvTraceparent = "TRACEPARENT"
	EnvTracestate  = "TRACESTATE"
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
	// Env is set in the command's environment, on top of the variables
	// passed on from this process's (see Exec); the JOBSTAGE_JOB_*
	// variables are set on top of both.
	Env map[string]string
	// PassEnv names more variables of this process's environment that the
	// command gets, besides those of BaseEnv. A name must be letters,
	// digits and underscores, not starting with a digit.
	PassEnv []string
	// Withhold names variables of this process's environment that are
	// never passed on, even when BaseEnv or PassEnv has them: a server
	// lists those that hold its secrets.
	Withhold []string
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
//     EnvJobAttempt, and the trace context of the attempt's span in
//     EnvTraceparent and EnvTracestate, so that the command's own spans
//     continue the job's trace;
//   - exit status 0 succeeds, with stdout as the result (see the package
//     documentation);
//   - another exit status fails the attempt with the error
//     "exit status N: <end of stderr>";
//   - its environment is not this process's: only the variables of
//     BaseEnv and PassEnv are passed on (less Withhold), then Env and the
//     job's variables are set;
//   - when the job's context ends (halt, timeout, stop) the command and
//     everything it started are killed and the attempt fails with the
//     context's cause.
//
// Processes the command left behind are killed when it exits. On Linux the
// command runs under a supervisor process that kills its whole process
// tree, setsid and double forks included, when the command exits, when the
// job's context ends and when this process dies, kill -9 included (see the
// package documentation). Elsewhere the command leads a process group of
// its own, which is killed in the first two cases.
func Exec(o ExecOptions) (consumer.Handler[json.RawMessage, json.RawMessage], error) {
	if len(o.Command) == 0 || o.Command[0] == "" {
		return nil, badOptions("exec", "command is empty")
	}
	switch {
	case o.MaxOutput < 0:
		return nil, badOptions("exec", "max output %d is negative", o.MaxOutput)
	case o.MaxOutput > fdbq.MaxDataSize:
		return nil, badOptions("exec", "max output %d is above a job result's limit of %d bytes", o.MaxOutput, fdbq.MaxDataSize)
	case o.MaxOutput == 0:
		o.MaxOutput = DefaultMaxOutput
	}
	switch {
	case o.StderrTail < 0:
		return nil, badOptions("exec", "stderr tail %d is negative", o.StderrTail)
	case o.StderrTail == 0:
		o.StderrTail = DefaultStderrTail
	}
	if o.Dir != "" {
		if fi, err := os.Stat(o.Dir); err != nil {
			return nil, badOptions("exec", "dir: %w", err)
		} else if !fi.IsDir() {
			return nil, badOptions("exec", "dir %s is not a directory", o.Dir)
		}
	}
	prog := o.Command[0]
	if !strings.Contains(prog, "/") {
		p, err := exec.LookPath(prog)
		if err != nil {
			return nil, badOptions("exec", "command %q: %w", prog, err)
		}
		prog = p
	}
	if err := supervised(); err != nil {
		return nil, badOptions("exec", "%w", err)
	}
	env, err := execEnv(os.Environ(), o)
	if err != nil {
		return nil, err
	}
	r := &execRunner{prog: prog, args: slices.Clone(o.Command[1:]), name: o.Command[0], dir: o.Dir, env: env, maxOutput: o.MaxOutput, stderrTail: o.StderrTail}
	return r.run, nil
}

// BaseEnv names the variables of this process's environment that every
// command gets, when set: the search path, the home directory, the locale
// (LANG and every LC_* variable), the time zone and the temporary
// directory.
var BaseEnv = []string{"PATH", "HOME", "LANG", "LC_*", "TZ", "TMPDIR"}

// ValidEnvName reports whether name is a portable environment variable
// name: letters, digits and underscores, not starting with a digit.
func ValidEnvName(name string) bool {
	if name == "" || name[0] >= '0' && name[0] <= '9' {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// execEnv returns the command's environment less the job's variables, as
// KEY=value: what environ passes on under o.PassEnv and BaseEnv, less
// o.Withhold, in environ's order, then o.Env in key order.
func execEnv(environ []string, o ExecOptions) ([]string, error) {
	pass := map[string]bool{}
	for _, k := range o.PassEnv {
		if !ValidEnvName(k) {
			return nil, badOptions("exec", "pass env: bad variable name %q", k)
		}
		pass[k] = true
	}
	for _, k := range BaseEnv {
		pass[k] = true
	}
	var out []string
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || slices.Contains(o.Withhold, k) {
			continue
		}
		if pass[k] || strings.HasPrefix(k, "LC_") && ValidEnvName(k) {
			out = append(out, kv)
		}
	}
	m := o.Env
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, badOptions("exec", "env: bad variable name %q", k)
		}
		if strings.ContainsRune(v, 0) {
			return nil, badOptions("exec", "env: value of %s contains a NUL byte", k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, k+"="+m[k])
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
	env := append(slices.Clip(r.env),
		EnvJobID+"="+job.ID,
		EnvJobType+"="+job.Type,
		EnvJobAttempt+"="+strconv.Itoa(job.Attempt),
	)
	env = append(env, tracing.Env(ctx)...)
	data := []byte(job.Data)
	if len(data) == 0 {
		data = []byte("null")
	}
	stdout := &limitBuffer{max: r.maxOutput}
	stderr := &tailBuffer{max: r.stderrTail}
	ws, err := r.runCommand(ctx, env, bytes.NewReader(data), stdout, stderr)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("handlers: exec: %s killed: %w%s", r.name, context.Cause(ctx), tailSuffix(stderr))
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w%s", err, tailSuffix(stderr))
	case !ws.Exited() || ws.ExitStatus() != 0:
		return nil, fmt.Errorf("%s%s", exitText(ws), tailSuffix(stderr))
	case stdout.over():
		return nil, fmt.Errorf("%w: %s wrote %d bytes to stdout, more than the %d allowed", ErrOutputTooLarge, r.name, stdout.total, r.maxOutput)
	}
	return asResult(stdout.buf), nil
}

// exitText says how the command ended: "exit status N" or "signal: S".
func exitText(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled() && ws.CoreDump():
		return "signal: " + ws.Signal().String() + " (core dumped)"
	case ws.Signaled():
		return "signal: " + ws.Signal().String()
	}
	return "wait status " + strconv.Itoa(int(ws))
}

func tailSuffix(t *tailBuffer) string {
	s := strings.TrimSpace(t.String())
	if s == "" {
		return ""
	}
	return ": " + s
}
