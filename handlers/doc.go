// Package handlers holds jobstage's built-in handlers, the ones a YAML
// configuration names without any Go: Exec runs a command per job and HTTP
// posts each job to a URL. Both are ordinary consumer handlers over the
// job's raw JSON data, so they plug into consumer.New, take middleware and
// run in a pipeline like any handler written in Go:
//
//	h, err := handlers.Exec(handlers.ExecOptions{Command: []string{"./resize", "--fast"}})
//	c, err := consumer.New(h, consumer.Options{Concurrency: 4, JobTimeout: time.Minute})
//
// # Results
//
// A job's result is JSON. What a command writes on stdout, or a server
// answers, less leading and trailing white space, is stored as is when it
// is valid JSON and as a JSON string otherwise; blank output is null. Output is bounded (MaxOutput,
// MaxResponse): output past the bound fails the attempt rather than being
// cut, since a cut JSON document is no longer the document the worker
// meant, and a cut string would pass silently for a whole one.
//
// # Stopping
//
// A handler's context ends when the job's lock is gone, its timeout passes
// or the pipeline stops. Exec then kills the command and everything it
// started (SIGKILL); HTTP abandons the request.
//
// On Linux a command runs under a supervisor: this same executable
// (/proc/self/exe) started again in a special mode, which the package's
// init function recognises, so any program importing this package can run
// commands. The supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER):
// whatever the command starts stays below it, even a process that calls
// setsid or is orphaned by a double fork. It kills every process below it
// when the command exits, when the handler asks (the job's context ended),
// and when the handler's process dies however it dies, kill -9 included: it
// holds the read end of a pipe whose write end only that process holds,
// and the kernel closes it when that process dies. Should the supervisor
// itself be killed (SIGKILL), only the command dies with it (Pdeathsig).
//
// What still escapes is what is not a descendant: work handed to another
// process (a service manager, a container daemon, another host). Elsewhere
// than Linux the command leads a process group of its own, which is killed
// when the context ends and when the command exits; a process that leaves
// the group escapes, and nothing is killed when this process dies.
//
// # Examples
//
// The Example runs Exec on a job, ExampleHTTP posts one to a server.
package handlers
