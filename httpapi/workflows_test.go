package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

// TestWorkflows: a workflow added over HTTP runs its jobs in dependency
// order through external workers, who read their dependencies' results;
// it is inspected, waited on, and a second one canceled; bad workflows
// answer 400 naming the problem, an id used twice 409, a large one 413.
func TestWorkflows(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens})
	ctx := context.Background()
	producer, worker := e.client("producer-secret"), e.client("worker-secret")
	w, err := producer.AddWorkflow(ctx, httpapi.NewWorkflow{ID: "order-42", Jobs: []httpapi.WorkflowJob{
		{Name: "charge", Type: "email", Data: json.RawMessage(`{"order":42}`)},
		{Name: "ship", Type: "email", DependsOn: []string{"charge"}},
	}})
	if err != nil || w.ID != "order-42" || w.Policy != "cancel" || len(w.Jobs) != 2 || w.Jobs[0].State != fdbq.NodeAdded || w.Jobs[1].State != fdbq.NodeWaiting {
		t.Fatalf("add: %+v %v", w, err)
	}
	if _, err := worker.AddWorkflow(ctx, httpapi.NewWorkflow{Jobs: []httpapi.WorkflowJob{{Name: "a", Type: "email"}}}); !isCode(err, httpapi.CodeForbidden) {
		t.Fatalf("a worker added a workflow: %v", err)
	}
	finish := func(want string) {
		t.Helper()
		ls, err := worker.Accept(ctx, "email", httpapi.AcceptRequest{Max: 1})
		if err != nil || len(ls) != 1 || ls[0].ID != "order-42:"+want || ls[0].Workflow != "order-42" || ls[0].Node != want {
			t.Fatalf("accept %s: %+v %v", want, ls, err)
		}
		if err := worker.Finish(ctx, ls[0], json.RawMessage(`"`+want+` done"`)); err != nil {
			t.Fatal(err)
		}
	}
	finish("charge")
	ps, err := worker.Parents(ctx, "email", "order-42:ship")
	if err != nil || len(ps) != 1 || string(ps["charge"].Result) != `"charge done"` {
		t.Fatalf("parents: %+v %v", ps, err)
	}
	finish("ship")
	w, err = producer.WaitWorkflow(ctx, "order-42", 5*time.Second)
	if err != nil || !w.Done || w.Jobs[1].Outcome != fdbq.Succeeded || w.Jobs[1].Job == nil {
		t.Fatalf("wait: %+v %v", w, err)
	}
	if _, err := producer.AddWorkflow(ctx, httpapi.NewWorkflow{ID: "order-42", Jobs: []httpapi.WorkflowJob{{Name: "a", Type: "email"}}}); !isCode(err, httpapi.CodeWorkflowExists) {
		t.Fatalf("the same id again: %v", err)
	}

	if _, err := producer.AddWorkflow(ctx, httpapi.NewWorkflow{ID: "o2", Policy: "run", Jobs: []httpapi.WorkflowJob{
		{Name: "a", Type: "email"}, {Name: "b", Type: "email", DependsOn: []string{"a"}}}}); err != nil {
		t.Fatal(err)
	}
	c, err := producer.CancelWorkflow(ctx, "o2")
	if err != nil || !c.Canceled || !c.Done || c.Jobs[0].Outcome != fdbq.Canceled || c.Jobs[1].State != fdbq.NodeSkipped {
		t.Fatalf("cancel: %+v %v", c, err)
	}
	if w, err := producer.WaitWorkflow(ctx, "o2", time.Second); err != nil || !w.Done {
		t.Fatalf("wait on a canceled workflow: %+v %v", w, err)
	}

	for _, c := range []struct {
		body   string
		status int
		code   string
		words  []string
	}{
		{`{"jobs":[{"name":"a","type":"email","depends_on":["b"]},{"name":"b","type":"email","depends_on":["a"]}]}`, 400, httpapi.CodeInvalid, []string{"cycle"}},
		{`{"jobs":[{"name":"a","type":"email","depends_on":["x"]}]}`, 400, httpapi.CodeInvalid, []string{`"x"`}},
		{`{"jobs":[{"name":"a"}]}`, 400, httpapi.CodeInvalid, []string{"jobs[0].type"}},
		{`{"jobs":[{"name":"a","type":"email","scheduled_at":"soon"}]}`, 400, httpapi.CodeInvalid, []string{"jobs[0].scheduled_at"}},
		{`{"jobs":[{"name":"a","type":"email","key":"\udc00"}]}`, 400, httpapi.CodeInvalid, []string{"jobs[0].key"}},
		{`{"jobs":[{"name":"a","type":"email","max_attempts":-1}]}`, 400, httpapi.CodeInvalid, []string{"jobs[0].max_attempts"}},
		{`{"policy":"sometimes","jobs":[{"name":"a","type":"email"}]}`, 400, httpapi.CodeInvalid, []string{"policy"}},
		{`{"jobs":[]}`, 400, httpapi.CodeInvalid, []string{"no job"}},
		{`{"jobs":[{"name":"a","type":"sms"}]}`, 404, httpapi.CodeUnknownType, []string{"sms"}},
		{`{"jobs":[{"name":"a","type":"email","extra":1}]}`, 400, httpapi.CodeInvalidJSON, []string{"extra"}},
	} {
		wantError(t, e.do("POST", "/v1/workflows", "producer-secret", c.body), c.status, c.code, c.words...)
	}
	var big bytes.Buffer
	big.WriteString(`{"jobs":[`)
	for i := range 1001 {
		if i > 0 {
			big.WriteString(",")
		}
		big.WriteString(`{"name":"j` + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + `","type":"email"}`)
	}
	big.WriteString("]}")
	wantError(t, e.do("POST", "/v1/workflows", "producer-secret", big.String()), http.StatusRequestEntityTooLarge, httpapi.CodeTooLarge, "at most 1000")
	wantError(t, e.do("GET", "/v1/workflows/nope", "producer-secret", ""), http.StatusNotFound, httpapi.CodeUnknownWorkflow, "nope")
	wantError(t, e.do("GET", "/v1/workflows/-x", "producer-secret", ""), http.StatusBadRequest, httpapi.CodeInvalid, "workflow id")
	wantError(t, e.do("GET", "/v1/workflows/order-42/wait?timeout=2m", "producer-secret", ""), http.StatusBadRequest, httpapi.CodeInvalid)
}

// FuzzDecodeWorkflow: the decoder of POST /v1/workflows answers every body
// with a workflow fdbq accepts or a 4xx error, never a panic.
func FuzzDecodeWorkflow(f *testing.F) {
	for _, s := range []string{
		`{"id":"w","policy":"run","jobs":[{"name":"a","type":"t","data":{"x":1},"priority":3,"key":"k","max_attempts":2,"scheduled_at":"2030-01-01T00:00:00Z"},{"name":"b","type":"t","depends_on":["a"]}]}`,
		`{"jobs":[{"name":"a","type":"t","depends_on":["a"]}]}`,
		`{"jobs":[{"name":"a","type":"t","key":"\ud800"}]}`,
		`{"jobs":null}`, `[]`, `{"jobs":[{}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		w, err := httpapi.DecodeWorkflow(bytes.NewReader(body))
		if err != nil {
			var ae *httpapi.APIError
			var fe *fdbq.Error
			if !errorsAs(err, &ae) && !errorsAs(err, &fe) {
				t.Fatalf("%q: error %T %v is neither an API error nor fdbq's", body, err, err)
			}
			if ae != nil && (ae.Status < 400 || ae.Status >= 500) {
				t.Fatalf("%q: status %d", body, ae.Status)
			}
			return
		}
		if err := fdbq.ValidateWorkflow(w); err != nil {
			t.Fatalf("%q decoded to a workflow fdbq refuses: %v", body, err)
		}
	})
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }
