package fdbq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// Errors of workflows.
var (
	// ErrInvalidWorkflow: a workflow's definition is wrong (a cycle, a
	// dependency on a job it does not have, a bad name); the detail says
	// what.
	ErrInvalidWorkflow = errors.New("fdbq: invalid workflow")
	// ErrUnknownWorkflow: no workflow of that id.
	ErrUnknownWorkflow = errors.New("fdbq: unknown workflow")
	// ErrWorkflowExists: a workflow of that id was added before.
	ErrWorkflowExists = errors.New("fdbq: workflow exists")
)

// Limits of a workflow, which is added in one transaction: FoundationDB
// takes at most 10 MB a transaction, and these keep a workflow well under
// it (each job's data is stored in its node until the job is added, and
// in the job then).
const (
	// MaxWorkflowJobs bounds a workflow's jobs.
	MaxWorkflowJobs = 1000
	// MaxWorkflowDependencies bounds the dependencies of all its jobs.
	MaxWorkflowDependencies = 10_000
	// MaxWorkflowBytes bounds the data of all its jobs.
	MaxWorkflowBytes = 4 << 20
	// MaxWorkflowIDSize bounds a workflow's id, and MaxNodeNameSize the
	// name of one of its jobs: the job's id is ID:NAME.
	MaxWorkflowIDSize = 64
	MaxNodeNameSize   = 64
)

// WorkflowPolicy is what a job of a workflow that does not succeed (it
// failed, was canceled or removed) does to the jobs that depend on it.
type WorkflowPolicy int

const (
	// CancelDependents (the default): the jobs that depend on it,
	// directly or not, are never added; they finish as skipped.
	CancelDependents WorkflowPolicy = iota
	// RunDependents: a dependency counts as done once it is finished,
	// whatever its outcome; the dependents run and may read its outcome.
	RunDependents
)

var policyNames = []string{"cancel", "run"}

func (p WorkflowPolicy) String() string { return enumName(policyNames, p, "WorkflowPolicy") }

// ParseWorkflowPolicy reads "cancel" or "run" ("" is cancel).
func ParseWorkflowPolicy(s string) (WorkflowPolicy, error) {
	return parseEnum[WorkflowPolicy](policyNames, s, ErrInvalidWorkflow, "policy")
}

// NewWorkflow is a set of jobs with dependencies (a DAG), added in one
// transaction by AddWorkflow.
type NewWorkflow struct {
	// ID names the workflow; empty: a random one. ASCII letters, digits,
	// '_', '-' and '.', at most MaxWorkflowIDSize bytes.
	ID     string
	Policy WorkflowPolicy
	Jobs   []WorkflowJob
}

// WorkflowJob is one job of a workflow.
type WorkflowJob struct {
	// Name names the job in the workflow (the rules of ID, at most
	// MaxNodeNameSize bytes); the job's id is WORKFLOW:NAME.
	Name string
	// Job is the job: its ID must be empty, and it cannot be unique.
	// A ScheduledAt holds it back until then, once its dependencies are
	// done.
	Job NewJob
	// DependsOn names the jobs of the workflow that must succeed (under
	// RunDependents: finish) before this one is added.
	DependsOn []string
}

// Node states, as WorkflowNode.State shows them.
const (
	// NodeWaiting: some dependency is not done; the job does not exist
	// yet.
	NodeWaiting = "waiting"
	// NodeAdded: the job was added; WorkflowNode.Job is it.
	NodeAdded = "added"
	// NodeDone: the job finished (WorkflowNode.Outcome; "removed" when
	// it was removed before it finished).
	NodeDone = "done"
	// NodeSkipped: the job was never added: a dependency did not
	// succeed under CancelDependents, or the workflow was canceled.
	NodeSkipped = "skipped"
)

// OutcomeRemoved is a node's outcome when its job was removed before it
// finished.
const OutcomeRemoved Outcome = "removed"

// WorkflowInfo is a workflow as stored: its jobs and their states.
type WorkflowInfo struct {
	ID        string
	Policy    WorkflowPolicy
	CreatedAt time.Time
	// Canceled: CancelWorkflow was called.
	Canceled bool
	// Done: every job is finished or skipped.
	Done bool
	// Jobs are the workflow's jobs in the order they were given.
	Jobs []*WorkflowNode
}

// WorkflowNode is one job of a workflow.
type WorkflowNode struct {
	Name      string
	Type      string
	ID        string // the job's id, WORKFLOW:NAME
	DependsOn []string
	// State is NodeWaiting, NodeAdded, NodeDone or NodeSkipped.
	State string
	// Outcome is the outcome of a done job.
	Outcome Outcome
	// Job is the job as it is now, for a node added or done (nil when the
	// job was removed since, or the node is waiting or skipped).
	Job *Job
	// Err is set when the node's record cannot be read.
	Err error
}

// workflowHeader is a workflow's record: (P, 23, id, 0).
type workflowHeader struct {
	Policy   WorkflowPolicy `json:"policy"`
	Created  int64          `json:"created"`
	Canceled bool           `json:"canceled,omitempty"`
	Names    []string       `json:"-"` // stored at (P, 23, id, 4): a step reads the header, not the names
	// Token is the AddWorkflow call's, so that the call run again after
	// its commit applied answers the workflow, not that it exists.
	Token string `json:"token"`
}

// workflowNode is a node's record: (P, 23, id, 1, name).
type workflowNode struct {
	Type        string          `json:"type"`
	Data        json.RawMessage `json:"data,omitempty"`
	Priority    int             `json:"priority,omitempty"`
	Key         string          `json:"key,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	Retry       *RetryPolicy    `json:"retry,omitempty"`
	ScheduledAt int64           `json:"scheduled_at,omitempty"`
	DependsOn   []string        `json:"depends_on,omitempty"`
	// Remaining counts the dependencies not done yet.
	Remaining int     `json:"remaining"`
	State     string  `json:"state"`
	Outcome   Outcome `json:"outcome,omitempty"`
	// Given: the job's first finish was given to its dependents; a later
	// one (after Requeue or an Add of its id) is not given again.
	Given bool `json:"given,omitempty"`
}

// Keys: (P, 23, id, 0) the header; (P, 23, id, 1, name) a node;
// (P, 23, id, 2, parent, child) an edge, so that a finishing job reads
// its dependents' names by a range; (P, 23, id, 3) an int64 counter of
// the nodes done or skipped, which waits watch.
const (
	wfHeader  = 0
	wfNode    = 1
	wfEdge    = 2
	wfCounter = 3
	wfNames   = 4
)

func (k keys) workflow(id string) tuple.Subspace { return k.root.Sub(tagWorkflows, id) }

// WorkflowJobID is the id of the job named name in workflow id.
func WorkflowJobID(id, name string) string { return id + ":" + name }

func checkWorkflowName(what, s string, limit int) error {
	return validateName(ErrInvalidWorkflow, what, s, limit)
}

// ValidateWorkflowID reports what is wrong with a workflow id.
func ValidateWorkflowID(id string) error {
	return checkWorkflowName("workflow id", id, MaxWorkflowIDSize)
}

// prepareWorkflow checks w and returns its jobs prepared, in order.
func prepareWorkflow(w *NewWorkflow) ([]NewJob, error) {
	if w.ID == "" {
		w.ID = newToken()
	}
	if err := ValidateWorkflowID(w.ID); err != nil {
		return nil, err
	}
	if w.Policy != CancelDependents && w.Policy != RunDependents {
		return nil, errorf(ErrInvalidWorkflow, "workflow %s: unknown policy %d", w.ID, w.Policy)
	}
	switch n := len(w.Jobs); {
	case n == 0:
		return nil, errorf(ErrInvalidWorkflow, "workflow %s has no job", w.ID)
	case n > MaxWorkflowJobs:
		return nil, errorf(ErrDataTooLarge, "workflow %s has %d jobs; at most %d fit in the one transaction that adds it", w.ID, n, MaxWorkflowJobs)
	}
	index := map[string]int{}
	deps, bytes := 0, 0
	jobs := make([]NewJob, len(w.Jobs))
	for i, j := range w.Jobs {
		if err := checkWorkflowName("job name", j.Name, MaxNodeNameSize); err != nil {
			return nil, fmt.Errorf("workflow %s, job %d: %w", w.ID, i, err)
		}
		if _, dup := index[j.Name]; dup {
			return nil, errorf(ErrInvalidWorkflow, "workflow %s names two jobs %s", w.ID, j.Name)
		}
		index[j.Name] = i
		if j.Job.ID != "" {
			return nil, errorf(ErrInvalidWorkflow, "workflow %s, job %s: its id is the workflow's (%s); leave Job.ID empty", w.ID, j.Name, WorkflowJobID(w.ID, j.Name))
		}
		if j.Job.Unique != nil {
			return nil, errorf(ErrInvalidWorkflow, "workflow %s, job %s: a workflow's job cannot be unique", w.ID, j.Name)
		}
		nj := j.Job
		nj.ID = WorkflowJobID(w.ID, j.Name)
		if err := prepareJob(&nj); err != nil {
			return nil, fmt.Errorf("workflow %s, job %s: %w", w.ID, j.Name, err)
		}
		nj.workflow = true
		jobs[i] = nj
		if b, err := json.Marshal(workflowNode{Type: nj.Type, Data: nj.Data, Priority: nj.Priority, Key: nj.Key, MaxAttempts: nj.MaxAttempts,
			Retry: nj.Retry, ScheduledAt: toMs(nj.ScheduledAt), DependsOn: j.DependsOn, Remaining: len(j.DependsOn), State: NodeWaiting}); err != nil {
			return nil, err
		} else if len(b) > kv.MaxValueSize {
			return nil, errorf(ErrDataTooLarge, "workflow %s, job %s: its data and dependencies take %d bytes, more than a record's %d", w.ID, j.Name, len(b), kv.MaxValueSize)
		}
		deps += len(j.DependsOn)
		bytes += len(nj.Data)
	}
	if deps > MaxWorkflowDependencies {
		return nil, errorf(ErrDataTooLarge, "workflow %s has %d dependencies; at most %d fit in the one transaction that adds it", w.ID, deps, MaxWorkflowDependencies)
	}
	if bytes > MaxWorkflowBytes {
		return nil, errorf(ErrDataTooLarge, "the jobs of workflow %s have %d bytes of data; at most %d fit in the one transaction that adds it", w.ID, bytes, MaxWorkflowBytes)
	}
	// Dependencies name jobs of the workflow, once each, and make no
	// cycle (Kahn's algorithm: what is left unsorted is on a cycle).
	indeg := make([]int, len(w.Jobs))
	children := make([][]int, len(w.Jobs))
	for i, j := range w.Jobs {
		seen := map[string]bool{}
		for _, d := range j.DependsOn {
			p, ok := index[d]
			switch {
			case !ok:
				return nil, errorf(ErrInvalidWorkflow, "workflow %s, job %s depends on %q, which the workflow does not have", w.ID, j.Name, d)
			case p == i:
				return nil, errorf(ErrInvalidWorkflow, "workflow %s, job %s depends on itself", w.ID, j.Name)
			case seen[d]:
				return nil, errorf(ErrInvalidWorkflow, "workflow %s, job %s names dependency %s twice", w.ID, j.Name, d)
			}
			seen[d] = true
			indeg[i]++
			children[p] = append(children[p], i)
		}
	}
	var ready []int
	for i, d := range indeg {
		if d == 0 {
			ready = append(ready, i)
		}
	}
	sorted := 0
	for len(ready) > 0 {
		n := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		sorted++
		for _, c := range children[n] {
			if indeg[c]--; indeg[c] == 0 {
				ready = append(ready, c)
			}
		}
	}
	if sorted < len(w.Jobs) {
		var cyc []string
		for i, d := range indeg {
			if d > 0 {
				cyc = append(cyc, w.Jobs[i].Name)
			}
		}
		return nil, errorf(ErrInvalidWorkflow, "workflow %s has a dependency cycle among %s", w.ID, strings.Join(cyc, ", "))
	}
	return jobs, nil
}

// ValidateWorkflow reports what is wrong with a workflow; nil when nothing
// is. Its types need not be registered.
func ValidateWorkflow(w NewWorkflow) error {
	if w.ID == "" {
		w.ID = "x"
	}
	_, err := prepareWorkflow(&w)
	return err
}

// AddWorkflow adds a workflow in one transaction: its jobs without
// dependencies are added as pending jobs, the others wait in the
// workflow's nodes and are added, pending, by the transaction that
// finishes their last dependency (see Workflows in the package doc).
// Every job's type must be registered. A workflow too large for one
// transaction is refused with ErrDataTooLarge naming the limit.
func (q *Queue) AddWorkflow(ctx context.Context, tr kv.Transactor, w NewWorkflow) (*WorkflowInfo, error) {
	jobs, err := prepareWorkflow(&w)
	if err != nil {
		return nil, err
	}
	token := newToken()
	_, err = kv.Transact(ctx, tr, func(tx kv.Tx) (struct{}, error) {
		sub := q.k.workflow(w.ID)
		old, err := tx.Get(sub.MustPack(tuple.Tuple{wfHeader}))
		if err != nil {
			return struct{}{}, err
		}
		if old != nil {
			var h workflowHeader
			if json.Unmarshal(old, &h) == nil && h.Token == token {
				return struct{}{}, nil // this call's commit applied
			}
			return struct{}{}, errorf(ErrWorkflowExists, "%s", w.ID)
		}
		now := q.nowMs()
		h := workflowHeader{Policy: w.Policy, Created: now, Token: token}
		settings := map[string]*TypeSettings{}
		marked := map[string]*zoneMarks{}
		for i, wj := range w.Jobs {
			j := jobs[i]
			h.Names = append(h.Names, wj.Name)
			if settings[j.Type] == nil {
				s, err := q.settings(tx, j.Type)
				if err != nil {
					return struct{}{}, fmt.Errorf("workflow %s, job %s: %w", w.ID, wj.Name, err)
				}
				settings[j.Type], marked[j.Type] = &s, &zoneMarks{}
			}
			n := workflowNode{Type: j.Type, Data: j.Data, Priority: j.Priority, Key: j.Key, MaxAttempts: j.MaxAttempts,
				Retry: j.Retry, ScheduledAt: toMs(j.ScheduledAt), DependsOn: wj.DependsOn, Remaining: len(wj.DependsOn), State: NodeWaiting}
			// Every job's id must be free, not only the ones added now: a
			// job of no workflow at a waiting job's id would take its place.
			if old, err := q.load(tx, j.Type, j.ID); err != nil && !errors.Is(err, ErrCorrupt) {
				return struct{}{}, err
			} else if old != nil || err != nil {
				return struct{}{}, errorf(ErrWorkflowExists, "workflow %s: job %s/%s exists", w.ID, j.Type, j.ID)
			}
			if n.Remaining == 0 {
				if _, err := q.add(tx, j, settings[j.Type], marked[j.Type], now, token, false); err != nil {
					return struct{}{}, err
				}
				n.State, n.Data = NodeAdded, nil // the job holds it now
			}
			if err := q.putNode(tx, w.ID, wj.Name, &n); err != nil {
				return struct{}{}, err
			}
			for _, d := range wj.DependsOn {
				tx.Set(sub.MustPack(tuple.Tuple{wfEdge, d, wj.Name}), nil)
			}
		}
		b, err := json.Marshal(h)
		if err != nil {
			return struct{}{}, err
		}
		tx.Set(sub.MustPack(tuple.Tuple{wfHeader}), b)
		nb, err := json.Marshal(h.Names)
		if err != nil {
			return struct{}{}, err
		}
		tx.Set(sub.MustPack(tuple.Tuple{wfNames}), nb)
		return struct{}{}, nil
	})
	if err != nil {
		return nil, err
	}
	return q.GetWorkflow(ctx, tr, w.ID)
}

func (q *Queue) putNode(tx kv.Tx, wf, name string, n *workflowNode) error {
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	tx.Set(q.k.workflow(wf).MustPack(tuple.Tuple{wfNode, name}), b)
	return nil
}

func (q *Queue) loadNode(tx kv.ReadTx, wf, name string) (*workflowNode, error) {
	b, err := tx.Get(q.k.workflow(wf).MustPack(tuple.Tuple{wfNode, name}))
	if err != nil || b == nil {
		return nil, err
	}
	var n workflowNode
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, &Error{Err: ErrCorrupt, Detail: fmt.Sprintf("workflow %s, job %s: %v", wf, name, err), Cause: err}
	}
	return &n, nil
}

func (q *Queue) loadNames(tx kv.ReadTx, wf string, h *workflowHeader) error {
	b, err := tx.Get(q.k.workflow(wf).MustPack(tuple.Tuple{wfNames}))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &h.Names); err != nil {
		return &Error{Err: ErrCorrupt, Detail: fmt.Sprintf("workflow %s: its names: %v", wf, err), Cause: err}
	}
	return nil
}

func (q *Queue) loadHeader(tx kv.ReadTx, wf string) (*workflowHeader, error) {
	b, err := tx.Get(q.k.workflow(wf).MustPack(tuple.Tuple{wfHeader}))
	if err != nil || b == nil {
		return nil, err
	}
	var h workflowHeader
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, &Error{Err: ErrCorrupt, Detail: fmt.Sprintf("workflow %s: %v", wf, err), Cause: err}
	}
	return &h, nil
}

// children returns the names of the nodes that depend on name.
func (q *Queue) children(tx kv.ReadTx, wf, name string) ([]string, error) {
	sub := q.k.workflow(wf).Sub(wfEdge, name)
	kvs, err := tx.GetRange(sub.Range(), kv.RangeOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(kvs))
	for _, e := range kvs {
		t, err := sub.Unpack(e.Key)
		if err != nil || len(t) != 1 {
			continue
		}
		if c, ok := t[0].(string); ok {
			out = append(out, c)
		}
	}
	return out, nil
}

// workflowStep is run by put and drop when a workflow's job finishes
// (outcome) or is removed before it finished (OutcomeRemoved), or goes
// back to pending from finished (outcome ""): it records the node's
// state, and adds or skips the dependents whose last dependency this
// was, in the caller's transaction. What it finds unreadable it logs and
// leaves: a workflow's damaged record must not keep its jobs from
// finishing.
func (q *Queue) workflowStep(tx kv.Tx, id string, outcome Outcome) error {
	wf, name, ok := strings.Cut(id, ":")
	if !ok {
		return nil
	}
	h, err := q.loadHeader(tx, wf)
	if err != nil || h == nil {
		return q.workflowDamage(wf, name, err)
	}
	n, err := q.loadNode(tx, wf, name)
	if err != nil || n == nil {
		return q.workflowDamage(wf, name, err)
	}
	counter := q.k.workflow(wf).MustPack(tuple.Tuple{wfCounter})
	if outcome == "" {
		// Requeued, or added again: done no more. Its dependents keep
		// what its finish gave them.
		if n.State == NodeDone {
			n.State, n.Outcome = NodeAdded, ""
			tx.Add(counter, -1)
			return q.putNode(tx, wf, name, n)
		}
		return nil
	}
	if n.State == NodeDone || n.State == NodeSkipped {
		return nil
	}
	given := n.Given
	n.State, n.Outcome, n.Given = NodeDone, outcome, true
	if err := q.putNode(tx, wf, name, n); err != nil {
		return err
	}
	tx.Add(counter, 1)
	if given {
		return nil // its dependents keep what its first finish gave them
	}
	children, err := q.children(tx, wf, name)
	if err != nil {
		return err
	}
	done := outcome == Succeeded || h.Policy == RunDependents
	for _, c := range children {
		cn, err := q.loadNode(tx, wf, c)
		if err != nil || cn == nil {
			if err := q.workflowDamage(wf, c, err); err != nil {
				return err
			}
			continue
		}
		if cn.State != NodeWaiting {
			continue
		}
		if !done || h.Canceled {
			if err := q.skipNodes(tx, wf, c, cn); err != nil {
				return err
			}
			continue
		}
		if cn.Remaining--; cn.Remaining > 0 {
			if err := q.putNode(tx, wf, c, cn); err != nil {
				return err
			}
			continue
		}
		if err := q.addNode(tx, wf, c, cn); err != nil {
			return err
		}
	}
	return nil
}

// addNode adds a node's job, now that its dependencies are done. A node
// whose job cannot be made (damaged, or its id taken by a job of no
// workflow) is logged and skipped with its dependents, so that the
// workflow still ends.
func (q *Queue) addNode(tx kv.Tx, wf, name string, n *workflowNode) error {
	j := NewJob{Type: n.Type, ID: WorkflowJobID(wf, name), Data: n.Data, Priority: n.Priority, Key: n.Key,
		MaxAttempts: n.MaxAttempts, Retry: n.Retry}
	if n.ScheduledAt != 0 {
		j.ScheduledAt = time.UnixMilli(n.ScheduledAt)
	}
	skip := func(err error) error {
		if err := q.workflowDamage(wf, name, err); err != nil {
			return err
		}
		return q.skipNodes(tx, wf, name, n)
	}
	if err := prepareJob(&j); err != nil {
		return skip(&Error{Err: ErrCorrupt, Detail: fmt.Sprintf("workflow %s, job %s: %v", wf, name, err), Cause: err})
	}
	j.workflow = true
	s, err := q.settings(tx, n.Type)
	if err != nil {
		if errors.Is(err, ErrUnknownType) || errors.Is(err, ErrCorrupt) {
			return skip(err)
		}
		return err
	}
	old, err := q.load(tx, j.Type, j.ID)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return err
	}
	if err != nil || old != nil && !old.Workflow {
		if err == nil {
			err = errorf(ErrCorrupt, "workflow %s, job %s: its id %s/%s is taken by a job of no workflow", wf, name, j.Type, j.ID)
		}
		return skip(err)
	}
	if old == nil {
		if _, err := q.add(tx, j, &s, &zoneMarks{}, q.nowMs(), newToken(), false); err != nil {
			if errors.Is(err, ErrDataTooLarge) || errors.Is(err, ErrInvalidJob) {
				return skip(&Error{Err: ErrCorrupt, Detail: fmt.Sprintf("workflow %s, job %s: %v", wf, name, err), Cause: err})
			}
			return err
		}
	}
	n.State, n.Remaining, n.Data = NodeAdded, 0, nil // the job holds its data now
	return q.putNode(tx, wf, name, n)
}

// skipNodes marks a waiting node skipped, and every waiting node that
// depends on it, directly or not.
func (q *Queue) skipNodes(tx kv.Tx, wf, name string, n *workflowNode) error {
	counter := q.k.workflow(wf).MustPack(tuple.Tuple{wfCounter})
	stack := []string{name}
	nodes := map[string]*workflowNode{name: n}
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		cn := nodes[c]
		if cn == nil {
			var err error
			if cn, err = q.loadNode(tx, wf, c); err != nil || cn == nil {
				if err := q.workflowDamage(wf, c, err); err != nil {
					return err
				}
				continue
			}
		}
		if cn.State != NodeWaiting {
			continue
		}
		cn.State = NodeSkipped
		if err := q.putNode(tx, wf, c, cn); err != nil {
			return err
		}
		tx.Add(counter, 1)
		children, err := q.children(tx, wf, c)
		if err != nil {
			return err
		}
		stack = append(stack, children...)
	}
	return nil
}

// stepUnreadable is run when Remove clears the unreadable record of job
// id of typ: if it was the added job of a workflow's node, the workflow
// learns that it was removed.
func (q *Queue) stepUnreadable(tx kv.Tx, typ, id string) error {
	wf, name, ok := strings.Cut(id, ":")
	if !ok || ValidateWorkflowID(wf) != nil {
		return nil
	}
	n, err := q.loadNode(tx, wf, name)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return err
	}
	if err != nil || n == nil || n.Type != typ || n.State != NodeAdded {
		return nil // not a workflow's job, or one it cannot follow
	}
	return q.workflowStep(tx, id, OutcomeRemoved)
}

// workflowDamage logs what a workflow step could not read and lets the
// step go on; a store error (to retry) is returned.
func (q *Queue) workflowDamage(wf, name string, err error) error {
	if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownType) {
		return err
	}
	if err == nil {
		err = errors.New("its record is missing")
	}
	q.logger().Warn("fdbq: a workflow's job cannot be followed; its dependents stay as they are", "workflow", wf, "job", name, "err", err)
	return nil
}

// GetWorkflow returns a workflow with the state of each of its jobs, or
// ErrUnknownWorkflow.
func (q *Queue) GetWorkflow(ctx context.Context, tr kv.ReadTransactor, id string) (*WorkflowInfo, error) {
	if err := ValidateWorkflowID(id); err != nil {
		return nil, err
	}
	return kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) (*WorkflowInfo, error) {
		return q.workflowInfo(tx, id)
	})
}

func (q *Queue) workflowInfo(tx kv.ReadTx, id string) (*WorkflowInfo, error) {
	h, err := q.loadHeader(tx, id)
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errorf(ErrUnknownWorkflow, "%s", id)
	}
	if err := q.loadNames(tx, id, h); err != nil {
		return nil, err
	}
	in := &WorkflowInfo{ID: id, Policy: h.Policy, CreatedAt: time.UnixMilli(h.Created).UTC(), Canceled: h.Canceled, Done: true}
	sub := q.k.workflow(id).Sub(wfNode)
	kvs, err := tx.GetRange(sub.Range(), kv.RangeOptions{})
	if err != nil {
		return nil, err
	}
	byName := map[string][]byte{}
	for _, e := range kvs {
		if t, err := sub.Unpack(e.Key); err == nil && len(t) == 1 {
			if name, ok := t[0].(string); ok {
				byName[name] = e.Value
			}
		}
	}
	for _, name := range h.Names {
		node := &WorkflowNode{Name: name, ID: WorkflowJobID(id, name)}
		in.Jobs = append(in.Jobs, node)
		b := byName[name]
		var n workflowNode
		if b == nil {
			node.Err = errorf(ErrCorrupt, "workflow %s, job %s: its record is missing", id, name)
			in.Done = false
			continue
		}
		if err := json.Unmarshal(b, &n); err != nil {
			node.Err = &Error{Err: ErrCorrupt, Detail: fmt.Sprintf("workflow %s, job %s: %v", id, name, err), Cause: err}
			in.Done = false
			continue
		}
		node.Type, node.DependsOn, node.State, node.Outcome = n.Type, n.DependsOn, n.State, n.Outcome
		if n.State == NodeWaiting || n.State == NodeAdded {
			in.Done = false
		}
		if n.State == NodeAdded || n.State == NodeDone {
			rec, err := q.load(tx, n.Type, node.ID)
			switch {
			case err != nil && !errors.Is(err, ErrCorrupt):
				return nil, err
			case err != nil:
				node.Err = err
			case rec != nil:
				node.Job = rec.job(n.Type, node.ID)
			}
		}
	}
	return in, nil
}

// CancelWorkflow cancels a workflow in one transaction: its waiting jobs
// are skipped and its pending and running jobs canceled (a running job's
// worker gets ErrHalt); finished jobs stay as they are.
func (q *Queue) CancelWorkflow(ctx context.Context, tr kv.Transactor, id string) (*WorkflowInfo, error) {
	if err := ValidateWorkflowID(id); err != nil {
		return nil, err
	}
	return kv.Transact(ctx, tr, func(tx kv.Tx) (*WorkflowInfo, error) {
		h, err := q.loadHeader(tx, id)
		if err != nil {
			return nil, err
		}
		if h == nil {
			return nil, errorf(ErrUnknownWorkflow, "%s", id)
		}
		if err := q.loadNames(tx, id, h); err != nil {
			return nil, err
		}
		if !h.Canceled {
			h.Canceled = true
			b, err := json.Marshal(h)
			if err != nil {
				return nil, err
			}
			tx.Set(q.k.workflow(id).MustPack(tuple.Tuple{wfHeader}), b)
		}
		// Waiting nodes first, so that canceling a job skips nothing twice.
		var added []string
		for _, name := range h.Names {
			n, err := q.loadNode(tx, id, name)
			if err != nil || n == nil {
				if err := q.workflowDamage(id, name, err); err != nil {
					return nil, err
				}
				continue
			}
			switch n.State {
			case NodeWaiting:
				if err := q.skipNodes(tx, id, name, n); err != nil {
					return nil, err
				}
			case NodeAdded:
				added = append(added, name)
			}
		}
		for _, name := range added {
			n, err := q.loadNode(tx, id, name)
			if err != nil || n == nil {
				continue
			}
			jid := WorkflowJobID(id, name)
			rec, err := q.load(tx, n.Type, jid)
			if err != nil && !errors.Is(err, ErrCorrupt) {
				return nil, err
			}
			if rec == nil || rec.State == Finished {
				continue
			}
			next := *rec
			if rec.State == Running {
				next.LastLock = rec.Lock + ":cancel"
			}
			next.finish(Canceled, q.nowMs())
			if err := q.put(tx, n.Type, jid, rec, &next); err != nil {
				return nil, err
			}
		}
		return q.workflowInfo(tx, id)
	})
}

// WaitWorkflow waits until every job of the workflow is finished or
// skipped, or timeout passes (< 0: until ctx ends), and returns the
// workflow as it then is (Done says which). It watches the workflow's
// counter of finished jobs: no polling.
func (q *Queue) WaitWorkflow(ctx context.Context, id string, timeout time.Duration) (*WorkflowInfo, error) {
	if err := ValidateWorkflowID(id); err != nil {
		return nil, err
	}
	if timeout >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	counter := q.k.workflow(id).MustPack(tuple.Tuple{wfCounter})
	for {
		var w kv.Watch
		in, err := kv.Transact(ctx, q.db, func(tx kv.Tx) (*WorkflowInfo, error) {
			if w != nil {
				w.Cancel()
			}
			w = tx.Watch(counter)
			return q.workflowInfo(tx, id)
		})
		if err != nil {
			if w != nil {
				w.Cancel()
			}
			if ctx.Err() != nil {
				// The wait is over (its timeout, or ctx): what the read
				// found, if it got that far, else a read of its own.
				if in != nil {
					return in, nil
				}
				return q.GetWorkflow(context.WithoutCancel(ctx), q.db, id)
			}
			return nil, err
		}
		if in.Done {
			w.Cancel()
			return in, nil
		}
		select {
		case <-ctx.Done():
			w.Cancel()
			return in, nil
		case <-w.Ready():
		}
		w.Cancel()
	}
}

// Parents returns the jobs a workflow job depends on, by name, as they are
// now: what a job reads its dependencies' results from. A dependency
// removed since is absent; a job of no workflow has none.
func (q *Queue) Parents(ctx context.Context, tr kv.ReadTransactor, typ, id string) (map[string]*Job, error) {
	wf, name, ok := strings.Cut(id, ":")
	if !ok || ValidateWorkflowID(wf) != nil {
		return map[string]*Job{}, nil
	}
	return kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) (map[string]*Job, error) {
		n, err := q.loadNode(tx, wf, name)
		if err != nil {
			return nil, err
		}
		out := map[string]*Job{}
		if n == nil || n.Type != typ {
			return out, nil
		}
		for _, d := range n.DependsOn {
			pn, err := q.loadNode(tx, wf, d)
			if err != nil {
				return nil, err
			}
			if pn == nil {
				continue
			}
			rec, err := q.load(tx, pn.Type, WorkflowJobID(wf, d))
			if err != nil {
				return nil, err
			}
			if rec != nil {
				out[d] = rec.job(pn.Type, WorkflowJobID(wf, d))
			}
		}
		return out, nil
	})
}
