package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/handlers"
)

// Exec runs a command per job, the job's data on its stdin; what it
// writes on stdout is the job's result, stored as JSON when it is JSON. A
// handler is an ordinary consumer handler: given to consumer.New it runs
// in a pipeline; here it runs on a job consumer.NewJob makes.
func Example() {
	h, err := handlers.Exec(handlers.ExecOptions{
		Command: []string{"tr", "a-z", "A-Z"}, // run as is, never through a shell
	})
	if err != nil {
		log.Fatal(err)
	}
	job := consumer.NewJob(json.RawMessage(`{"name":"ann"}`), consumer.JobOptions{ID: "shout-1", Type: "shout"})
	result, err := h(context.Background(), job)
	fmt.Println(string(result), err)

	// Another exit status fails the attempt with the end of stderr.
	h, err = handlers.Exec(handlers.ExecOptions{
		Command: []string{"sh", "-c", `echo "no luck for $JOBSTAGE_JOB_ID" >&2; exit 3`},
	})
	if err != nil {
		log.Fatal(err)
	}
	_, err = h(context.Background(), job)
	fmt.Println(err)
	// Output:
	// {"NAME":"ANN"} <nil>
	// exit status 3: no luck for shout-1
}

// HTTP posts each attempt to a URL (here a server on 127.0.0.1) as an HTTPRequest, with an
// Idempotency-Key the server can recognize a repeated attempt by; a 2xx
// answer is the job's result.
func ExampleHTTP() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req handlers.HTTPRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if string(req.Data) == "null" {
			http.Error(w, "no data", http.StatusUnprocessableEntity)
			return
		}
		fmt.Printf("server: %s %s key %s data %s\n", r.Method, req.Type, r.Header.Get("Idempotency-Key"), req.Data)
		io.WriteString(w, `{"delivered":true}`)
	}))
	defer srv.Close()

	h, err := handlers.HTTP(handlers.HTTPOptions{URL: srv.URL + "/hooks"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	job := consumer.NewJob(json.RawMessage(`{"event":"signup"}`), consumer.JobOptions{ID: "hook-7", Type: "webhook", Attempt: 2})
	result, err := h(ctx, job)
	fmt.Println("result:", string(result), err)

	_, err = h(ctx, consumer.NewJob(json.RawMessage(nil), consumer.JobOptions{ID: "hook-8", Type: "webhook"}))
	fmt.Println("error:", strings.ReplaceAll(fmt.Sprint(err), srv.URL, "<server>"))
	// Output:
	// server: POST webhook key hook-7/2 data {"event":"signup"}
	// result: {"delivered":true} <nil>
	// error: handlers: http: POST <server>/hooks: 422 Unprocessable Entity: no data
}

// A command whose output is past ExecOptions.MaxOutput fails its attempt
// with ErrOutputTooLarge, rather than storing a cut result.
func ExampleExecOptions_maxOutput() {
	h, err := handlers.Exec(handlers.ExecOptions{
		Command:   []string{"echo", "a longer answer than allowed"},
		MaxOutput: 8,
	})
	if err != nil {
		log.Fatal(err)
	}
	_, err = h(context.Background(), consumer.NewJob(json.RawMessage(`{}`), consumer.JobOptions{ID: "j", Type: "t"}))
	fmt.Println(errors.Is(err, handlers.ErrOutputTooLarge))
	// Output:
	// true
}
