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
// or the pipeline stops. Exec then kills the command's whole process group
// (the command runs in a group of its own), so that neither the command
// nor anything it started outlives the job; HTTP abandons the request.
package handlers
