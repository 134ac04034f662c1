package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/httpapi"
)

// TestWorkflowCLI: a workflow added from stdin runs on the quickstart's
// echo pipeline in dependency order; wait exits 0 once every job
// succeeded; get shows each job; an unknown workflow exits 1.
func TestWorkflowCLI(t *testing.T) {
	cfg, data := copyQuickstart(t)
	s := startServer(t, cfg, "JOBSTAGE_STORE__PATH="+data)
	body := `{"id": "order-9", "jobs": [
		{"name": "charge", "type": "echo", "data": {"order": 9}},
		{"name": "ship", "type": "echo", "data": {"step": "ship"}, "depends_on": ["charge"]},
		{"name": "mail", "type": "echo", "data": {"step": "mail"}, "depends_on": ["charge", "ship"]}]}`
	out, errOut, code := jobstage(t, body, "workflow", "add", "-", "--server", s.url)
	if code != 0 || !strings.Contains(out, "workflow order-9 (running, policy cancel)") {
		t.Fatalf("workflow add: exit %d: %s%s", code, out, errOut)
	}
	out, errOut, code = jobstage(t, "", "workflow", "wait", "order-9", "--timeout", "30s", "--json", "--server", s.url)
	var w httpapi.Workflow
	if code != 0 || json.Unmarshal([]byte(out), &w) != nil || !w.Done {
		t.Fatalf("workflow wait: exit %d: %s%s", code, out, errOut)
	}
	mail := w.Jobs[2]
	if mail.Job == nil || mail.Job.StartedAt.Before(w.Jobs[1].Job.FinishedAt) || mail.Job.StartedAt.Before(w.Jobs[0].Job.FinishedAt) {
		t.Fatalf("mail ran before its dependencies finished: %+v", w.Jobs)
	}
	out, _, code = jobstage(t, "", "workflow", "get", "order-9", "--server", s.url)
	if code != 0 || strings.Count(out, "done (succeeded)") != 3 || !strings.Contains(out, "charge,ship") {
		t.Fatalf("workflow get: exit %d: %s", code, out)
	}
	if _, errOut, code := jobstage(t, "", "workflow", "get", "nope", "--server", s.url); code != 1 || !strings.Contains(errOut, "unknown_workflow") {
		t.Fatalf("get of an unknown workflow: exit %d: %s", code, errOut)
	}
	if _, errOut, code := jobstage(t, `{"jobs": [{"name": "a", "type": "echo", "depends_on": ["a"]}]}`, "workflow", "add", "-", "--server", s.url); code != 1 || !strings.Contains(errOut, "depends on itself") {
		t.Fatalf("add of a bad workflow: exit %d: %s", code, errOut)
	}
	if _, errOut, code := jobstage(t, `{"jobz": []}`, "workflow", "add", "-", "--server", s.url); code != 2 || !strings.Contains(errOut, "jobz") {
		t.Fatalf("add of a file that is not a workflow: exit %d: %s", code, errOut)
	}
}
