package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// NewWorkflow is the body of POST /v1/workflows: jobs with dependencies,
// added in one transaction (fdbq.NewWorkflow).
type NewWorkflow struct {
	// ID names the workflow; empty: the server makes one.
	ID string `json:"id,omitempty"`
	// Policy is what a job that does not succeed does to its dependents:
	// "cancel" (the default: they are skipped) or "run".
	Policy string        `json:"policy,omitempty"`
	Jobs   []WorkflowJob `json:"jobs"`
}

// WorkflowJob is one job of a NewWorkflow.
type WorkflowJob struct {
	Name        string          `json:"name"`
	Type        string          `json:"type"`
	Data        json.RawMessage `json:"data,omitempty"`
	Priority    int             `json:"priority,omitempty"`
	Key         string          `json:"key,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	// ScheduledAt holds the job back until then, once its dependencies
	// are done (RFC 3339).
	ScheduledAt string   `json:"scheduled_at,omitempty"`
	DependsOn   []string `json:"depends_on,omitempty"`
}

// Workflow is a workflow with the state of each of its jobs.
type Workflow struct {
	ID        string         `json:"id"`
	Policy    string         `json:"policy"`
	CreatedAt time.Time      `json:"created_at"`
	Canceled  bool           `json:"canceled"`
	Done      bool           `json:"done"`
	Jobs      []WorkflowNode `json:"jobs"`
}

// WorkflowNode is one job of a Workflow: State is waiting, added, done or
// skipped (fdbq.NodeWaiting…); Job is the job once added.
type WorkflowNode struct {
	Name      string       `json:"name"`
	Type      string       `json:"type,omitempty"`
	ID        string       `json:"id"`
	DependsOn []string     `json:"depends_on,omitempty"`
	State     string       `json:"state,omitempty"`
	Outcome   fdbq.Outcome `json:"outcome,omitempty"`
	Job       *Job         `json:"job,omitempty"`
	Error     string       `json:"error,omitempty"`
}

func toWorkflow(in *fdbq.WorkflowInfo) *Workflow {
	w := &Workflow{ID: in.ID, Policy: in.Policy.String(), CreatedAt: in.CreatedAt, Canceled: in.Canceled, Done: in.Done, Jobs: []WorkflowNode{}}
	for _, n := range in.Jobs {
		wn := WorkflowNode{Name: n.Name, Type: n.Type, ID: n.ID, DependsOn: n.DependsOn, State: n.State, Outcome: n.Outcome}
		if n.Job != nil {
			wn.Job = toJob(n.Job)
		}
		if n.Err != nil {
			wn.Error = fdbqDetail(n.Err)
		}
		w.Jobs = append(w.Jobs, wn)
	}
	return w
}

// workflowBody is NewWorkflow as decoded, with the keys checked for text
// encoding/json would change.
type workflowBody struct {
	ID     string            `json:"id"`
	Policy string            `json:"policy"`
	Jobs   []workflowJobBody `json:"jobs"`
}

type workflowJobBody struct {
	Name        string          `json:"name"`
	Type        string          `json:"type"`
	Data        json.RawMessage `json:"data"`
	Priority    int             `json:"priority"`
	Key         bodyID          `json:"key"`
	MaxAttempts int             `json:"max_attempts"`
	ScheduledAt string          `json:"scheduled_at"`
	DependsOn   []string        `json:"depends_on"`
}

// decodeWorkflow reads the body of POST /v1/workflows; each problem names
// its field (jobs[2].depends_on).
func decodeWorkflow(r io.Reader) (fdbq.NewWorkflow, error) {
	var b workflowBody
	if err := decodeStrict(r, &b); err != nil {
		return fdbq.NewWorkflow{}, err
	}
	p, err := fdbq.ParseWorkflowPolicy(b.Policy)
	if err != nil {
		return fdbq.NewWorkflow{}, invalid("policy: %q: use cancel or run", b.Policy)
	}
	w := fdbq.NewWorkflow{ID: b.ID, Policy: p}
	if len(b.Jobs) > fdbq.MaxWorkflowJobs {
		return fdbq.NewWorkflow{}, &APIError{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge,
			Message: fmt.Sprintf("jobs: %d jobs; a workflow has at most %d", len(b.Jobs), fdbq.MaxWorkflowJobs)}
	}
	for i, j := range b.Jobs {
		where := fmt.Sprintf("jobs[%d].", i)
		if j.Type == "" {
			return fdbq.NewWorkflow{}, invalid("%stype: missing", where)
		}
		if err := fdbq.ValidateTypeName(j.Type); err != nil {
			return fdbq.NewWorkflow{}, nameInvalid(where+"type", err)
		}
		if j.Key.problem != "" {
			return fdbq.NewWorkflow{}, invalid("%skey: fairness key %s", where, j.Key.problem)
		}
		if j.Key.id != "" {
			if err := fdbq.ValidateKey(j.Key.id); err != nil {
				return fdbq.NewWorkflow{}, nameInvalid(where+"key", err)
			}
		}
		if j.MaxAttempts < 0 {
			return fdbq.NewWorkflow{}, invalid("%smax_attempts: %d is negative", where, j.MaxAttempts)
		}
		nj := fdbq.NewJob{Type: j.Type, Data: j.Data, Priority: j.Priority, Key: j.Key.id, MaxAttempts: j.MaxAttempts}
		if j.ScheduledAt != "" {
			t, err := time.Parse(time.RFC3339Nano, j.ScheduledAt)
			if err != nil {
				return fdbq.NewWorkflow{}, invalid("%sscheduled_at: %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", where, j.ScheduledAt)
			}
			nj.ScheduledAt = t
		}
		w.Jobs = append(w.Jobs, fdbq.WorkflowJob{Name: j.Name, Job: nj, DependsOn: j.DependsOn})
	}
	if err := fdbq.ValidateWorkflow(w); err != nil {
		return fdbq.NewWorkflow{}, err
	}
	return w, nil
}

func pathWorkflow(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if err := fdbq.ValidateWorkflowID(id); err != nil {
		return "", invalid("%s", fdbqDetail(err))
	}
	return id, nil
}

// addWorkflow: POST /v1/workflows → 201 the workflow.
func (s *Server) addWorkflow(w http.ResponseWriter, r *http.Request) error {
	nw, err := decodeWorkflow(r.Body)
	if err != nil {
		return err
	}
	in, err := s.q.AddWorkflow(r.Context(), s.db, nw)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, toWorkflow(in))
	return nil
}

// getWorkflow: GET /v1/workflows/{id}.
func (s *Server) getWorkflow(w http.ResponseWriter, r *http.Request) error {
	id, err := pathWorkflow(r)
	if err != nil {
		return err
	}
	in, err := s.q.GetWorkflow(r.Context(), s.db, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toWorkflow(in))
	return nil
}

// cancelWorkflow: POST /v1/workflows/{id}/cancel → the workflow.
func (s *Server) cancelWorkflow(w http.ResponseWriter, r *http.Request) error {
	id, err := pathWorkflow(r)
	if err != nil {
		return err
	}
	in, err := s.q.CancelWorkflow(r.Context(), s.db, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toWorkflow(in))
	return nil
}

// waitWorkflow: GET /v1/workflows/{id}/wait?timeout=30s, a long poll
// until the workflow is done; at the timeout it answers the workflow as
// it is (done false).
func (s *Server) waitWorkflow(w http.ResponseWriter, r *http.Request) error {
	id, err := pathWorkflow(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	if err := onlyParams(q, "timeout"); err != nil {
		return err
	}
	timeout := DefaultWait
	if v := q.Get("timeout"); v != "" {
		if timeout, err = parseWait("timeout", v); err != nil {
			return err
		}
	}
	in, err := s.q.WaitWorkflow(r.Context(), id, timeout)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toWorkflow(in))
	return nil
}

// parentsAnswer is the answer of GET …/jobs/{id}/parents.
type parentsAnswer struct {
	Parents map[string]*Job `json:"parents"`
}

// parents: GET /v1/types/{type}/jobs/{id}/parents, the jobs a workflow's
// job depends on, by name, with their results.
func (s *Server) parents(w http.ResponseWriter, r *http.Request) error {
	typ, id, err := pathJob(r)
	if err != nil {
		return err
	}
	ps, err := s.q.Parents(r.Context(), s.db, typ, id)
	if err != nil {
		return err
	}
	out := parentsAnswer{Parents: map[string]*Job{}}
	for name, j := range ps {
		out.Parents[name] = toJob(j)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// AddWorkflow adds a workflow.
func (c *Client) AddWorkflow(ctx context.Context, w NewWorkflow) (*Workflow, error) {
	var out Workflow
	if err := c.do(ctx, http.MethodPost, "/v1/workflows", nil, w, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Workflow returns a workflow with its jobs' states.
func (c *Client) Workflow(ctx context.Context, id string) (*Workflow, error) {
	var out Workflow
	if err := c.do(ctx, http.MethodGet, workflowPath(id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelWorkflow cancels a workflow's jobs that are not finished.
func (c *Client) CancelWorkflow(ctx context.Context, id string) (*Workflow, error) {
	var out Workflow
	if err := c.do(ctx, http.MethodPost, workflowPath(id)+"/cancel", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WaitWorkflow waits until the workflow is done, or timeout (0: the
// server's DefaultWait; at most MaxWait) passes: compare Done.
func (c *Client) WaitWorkflow(ctx context.Context, id string, timeout time.Duration) (*Workflow, error) {
	q := url.Values{}
	if timeout > 0 {
		q.Set("timeout", timeout.String())
	}
	var out Workflow
	if err := c.do(ctx, http.MethodGet, workflowPath(id)+"/wait", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Parents returns the jobs a workflow's job depends on, by name.
func (c *Client) Parents(ctx context.Context, typ, id string) (map[string]*Job, error) {
	var out parentsAnswer
	if err := c.do(ctx, http.MethodGet, jobPath(typ, id)+"/parents", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Parents, nil
}

func workflowPath(id string) string { return "/v1/workflows/" + url.PathEscape(id) }
