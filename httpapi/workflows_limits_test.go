package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/httpapi"
)

// A workflow within every documented limit, in a body under the default
// 1 MiB: a fan-in of 999 jobs (names of 64 bytes) into one with 89 KB of
// data. The answer must be 201 or a 4xx naming a limit, never a 500.
func TestWorkflowFanInNode500(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	var nw httpapi.NewWorkflow
	var deps []string
	for i := range 999 {
		name := fmt.Sprintf("%064d", i)
		deps = append(deps, name)
		nw.Jobs = append(nw.Jobs, httpapi.WorkflowJob{Name: name, Type: "email"})
	}
	nw.Jobs = append(nw.Jobs, httpapi.WorkflowJob{Name: "sink", Type: "email", DependsOn: deps,
		Data: json.RawMessage(`"` + strings.Repeat("x", 89_000) + `"`)})
	body, _ := json.Marshal(nw)
	t.Logf("body of %d bytes", len(body))
	req := httptest.NewRequest(http.MethodPost, "/v1/workflows", bytes.NewReader(body))
	req.RemoteAddr = "127.0.0.1:1"
	rec := httptest.NewRecorder()
	e.srv.ServeHTTP(rec, req)
	if rec.Code >= 500 {
		t.Fatalf("POST /v1/workflows: %d %s", rec.Code, rec.Body)
	}
}
