// Command jobstage runs jobstage from a YAML file and talks to a running
// server.
//
//	jobstage serve --config jobstage.yaml      run the store, pipelines, HTTP API and metrics
//	jobstage enqueue TYPE [DATA]               add a job (DATA is JSON; - reads stdin)
//	jobstage enqueue TYPE --file jobs.jsonl    add many, one JSON job per line
//	jobstage get TYPE ID                       show a job
//	jobstage list TYPE [--state S] [--key K]   list jobs (--id-prefix, --since, --until filter them)
//	jobstage keys TYPE [--after K]             list a type's fairness keys
//	jobstage history TYPE [--minutes N]        a type's ended attempts per minute
//	jobstage wait TYPE ID                      wait until a job finishes
//	jobstage cancel|requeue|delete TYPE ID     change a job
//	jobstage types                             list job types with their counts
//	jobstage pause|resume TYPE                 stop or restart accepting a type's jobs
//	jobstage config lint FILE                  check a config file
//	jobstage config docs                       print the config reference
//	jobstage bench                             measure jobstage on this machine
//	jobstage version                           print the version
//
// Client commands reach the server at --server (default $JOBSTAGE_SERVER,
// else http://127.0.0.1:8080) with the bearer token in $JOBSTAGE_TOKEN,
// give up on a request not answered within --request-timeout (default
// 30s; a long poll gets its wait more), and print JSON with --json.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
)

// errUsage marks errors in how the command was called; they exit with
// status 2, other errors with 1.
var errUsage = errors.New("usage")

type usageError struct{ msg string }

func (e *usageError) Error() string   { return e.msg }
func (e *usageError) Is(t error) bool { return t == errUsage }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

const usage = `usage: jobstage <command> [flags] [args]

commands:
  serve --config FILE        run jobstage from a config file
  enqueue TYPE [DATA|-]      add a job; --file FILE adds one job per JSON line
  get TYPE ID                show a job
  list TYPE                  list jobs (--state, --limit, --cursor, --all; filters:
                             --key, --id-prefix, --since, --until)
  keys TYPE                  list a type's fairness keys: policy, ready zones, running, rate (--limit, --after, --all)
  history TYPE               a type's jobs finished and attempts retried, per minute (--minutes, --until, --every-minute)
  wait TYPE ID               wait until a job is finished (--timeout)
  cancel TYPE ID             cancel a pending or running job
  requeue TYPE ID            run a failed or canceled job again
  delete TYPE ID             remove a job
  types                      list job types
  pause TYPE | resume TYPE   stop or restart accepting a type's jobs
  workflow add FILE|-        add a workflow (JSON: {"jobs": [{name, type, data, depends_on}]})
  workflow get|wait|cancel ID
                             show, wait for (exit 0 when every job succeeded) or cancel it
  schedules                  list periodic schedules
  schedules pause|resume|delete NAME
                             stop, restart or remove a schedule's ticks
  events [TYPE...]           follow the changes of jobs as they happen (--cursor C resumes)
  config lint FILE           check a config file
  config docs                print the config reference (markdown)
  bench                      measure throughput and latency on this machine
  version                    print the version

Client commands take --server URL (default $JOBSTAGE_SERVER or
http://127.0.0.1:8080), --request-timeout (default 30s) and --json; the
token comes from $JOBSTAGE_TOKEN. A first SIGINT or SIGTERM stops serve
after draining; a second stops it at once.
Run 'jobstage <command> -h' for a command's flags.
`

func main() {
	debug.SetGCPercent(gcPercent(os.Getenv("GOGC"), debug.SetGCPercent(-1)))
	ctx, force := signalContexts()
	os.Exit(run(ctx, force, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// defaultGCPercent is the garbage collector's target the binary runs at
// unless GOGC is set. jobstage's live heap is a few megabytes (the store's
// block cache is not on it), so at Go's default of 100 a busy pipeline
// collected every few milliseconds, scanning every handler's stack each
// time: a burn-down ran about 45% faster at 400.
const defaultGCPercent = 400

// gcPercent is the GC target to run at: defaultGCPercent when GOGC
// (env) is unset, else the runtime's own reading of it (current).
func gcPercent(env string, current int) int {
	if env == "" {
		return defaultGCPercent
	}
	return current
}

// signalContexts returns a context that the first SIGINT or SIGTERM ends
// (a command stops, `serve` drains) and one that the second ends (`serve`
// stops at once).
func signalContexts() (ctx, force context.Context) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, stop := context.WithCancel(context.Background())
	force, stopNow := context.WithCancel(context.Background())
	go func() {
		<-sigs
		stop()
		<-sigs
		stopNow()
	}()
	return ctx, force
}

// run runs one command and returns the process's exit status. ctx ending
// asks the command to stop; force ending asks serve to stop at once (nil:
// never).
func run(ctx, force context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		io.WriteString(stderr, usage)
		return 2
	}
	if force == nil {
		force = context.Background()
	}
	env := &cli{ctx: ctx, force: force, stdin: stdin, stdout: stdout, stderr: stderr}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		err = env.serve(rest)
	case "enqueue":
		err = env.enqueue(rest)
	case "get", "cancel", "requeue", "delete":
		err = env.jobCommand(cmd, rest)
	case "list":
		err = env.list(rest)
	case "keys":
		err = env.keys(rest)
	case "history":
		err = env.history(rest)
	case "wait":
		err = env.wait(rest)
	case "types":
		err = env.types(rest)
	case "pause", "resume":
		err = env.pauseResume(cmd, rest)
	case "schedules":
		err = env.schedules(rest)
	case "events":
		err = env.events(rest)
	case "workflow":
		err = env.workflow(rest)
	case "config":
		err = env.config(rest)
	case "bench":
		err = env.bench(rest)
	case "version":
		err = env.version(rest)
	case "help", "-h", "--help":
		io.WriteString(stdout, usage)
		return 0
	default:
		printf(stderr, "jobstage: unknown command \"%s\"\n\n", cmd)
		io.WriteString(stderr, usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errHelp):
		return 0
	case errors.Is(err, errUsage):
		printf(stderr, "jobstage %s: %v\n", args[0], err)
		return 2
	case errors.Is(err, errReported):
		return 1
	case errors.Is(err, errBadFlags):
		return 2
	default:
		var context []string
		var ce *contextError
		if errors.As(err, &ce) {
			context, err = append(context, ce.context), ce.err
		}
		if timedOut(err) && env.requestTimeout != nil {
			context = append(context, fmt.Sprintf("the server did not answer within --request-timeout (%s; a long poll gets its wait more)", env.requestTimeout))
		}
		if wantsJSON(args) {
			printJSONError(stderr, err, strings.Join(context, ": "))
		} else {
			printf(stderr, "jobstage %s: %s\n", args[0], strings.Join(append(context, apiError(err)), ": "))
		}
		return 1
	}
}

// errReported is returned by commands that printed their own failure
// (config lint prints every problem); the exit status is 1.
var errReported = errors.New("reported")

// errBadFlags is returned for flags the flag package refused, having
// printed why; the exit status is 2.
var errBadFlags = errors.New("bad flags")

// errHelp is returned when -h asked for a command's flags.
var errHelp = errors.New("help")

type cli struct {
	ctx            context.Context
	force          context.Context // serve: stop at once
	stdin          io.Reader
	stdout, stderr io.Writer
	// requestTimeout is a client command's --request-timeout, once its
	// flags are made.
	requestTimeout *positiveDuration
}
