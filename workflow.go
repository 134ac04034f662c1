package jobstage

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
)

// Workflow is a set of jobs of any kinds with dependencies (a DAG), built
// with Step and added in one transaction by EnqueueWorkflow. A job runs
// once every job it depends on has succeeded (see fdbq.NewWorkflow, and
// Policy for what a job that does not succeed does to its dependents).
type Workflow struct {
	// ID names the workflow (empty: a random one); its jobs' ids are
	// ID:NAME.
	ID     string
	Policy fdbq.WorkflowPolicy

	jobs  []fdbq.WorkflowJob
	kinds map[string]Defaults
	err   error
}

// Step adds to w a job of args's kind named name (unique in w), which
// runs after the jobs named in dependsOn. o's Priority, Key, MaxAttempts
// and At apply (At: not before then, once its dependencies are done); o
// may be nil. An error is kept and returned by EnqueueWorkflow.
func Step[T Args](w *Workflow, name string, args T, o *EnqueueOptions, dependsOn ...string) *Workflow {
	if w.err != nil {
		return w
	}
	kind, d, err := kindOf[T]()
	if err != nil {
		w.err = err
		return w
	}
	if o == nil {
		o = &EnqueueOptions{}
	}
	if o.ID != "" || o.Unique != nil {
		w.err = fmt.Errorf("jobstage: workflow step %s: a step has the workflow's id and cannot be unique", name)
		return w
	}
	data, err := json.Marshal(args)
	if err != nil {
		w.err = fmt.Errorf("jobstage: workflow step %s: encode the args: %w", name, err)
		return w
	}
	j := fdbq.NewJob{Type: kind, Data: data, Priority: d.Priority, Key: o.Key, MaxAttempts: o.MaxAttempts, ScheduledAt: o.At}
	if o.Priority != 0 {
		j.Priority = o.Priority
	}
	if w.kinds == nil {
		w.kinds = map[string]Defaults{}
	}
	w.kinds[kind] = d
	w.jobs = append(w.jobs, fdbq.WorkflowJob{Name: name, Job: j, DependsOn: dependsOn})
	return w
}

// EnqueueWorkflow adds w in a transaction of its own (see
// EnqueueWorkflowTx).
func EnqueueWorkflow(ctx context.Context, c *Client, w *Workflow) (*fdbq.WorkflowInfo, error) {
	return EnqueueWorkflowTx(ctx, c.db, c, w)
}

// EnqueueWorkflowTx adds w inside tr: the caller's transaction, or
// c.DB(). Kinds no one registered yet are registered with their defaults
// in the same transaction, as Enqueue does.
func EnqueueWorkflowTx(ctx context.Context, tr kv.Transactor, c *Client, w *Workflow) (*fdbq.WorkflowInfo, error) {
	if w.err != nil {
		return nil, w.err
	}
	nw := fdbq.NewWorkflow{ID: w.ID, Policy: w.Policy, Jobs: w.jobs}
	var out *fdbq.WorkflowInfo
	err := tr.Transact(ctx, func(tx kv.Tx) error {
		return c.addDeclaring(ctx, tx, w.kinds, func() error {
			var err error
			out, err = c.q.AddWorkflow(ctx, tx, nw)
			return err
		})
	})
	return out, err
}

// WaitWorkflow waits until every job of workflow id is finished or
// skipped, or ctx ends (then it returns the workflow as it is and ctx's
// error, as Wait does); it watches the workflow, never polls.
func WaitWorkflow(ctx context.Context, c *Client, id string) (*fdbq.WorkflowInfo, error) {
	for {
		in, err := c.q.WaitWorkflow(ctx, id, time.Minute)
		switch {
		case err != nil || in.Done:
			return in, err
		case ctx.Err() != nil:
			return in, ctx.Err()
		}
	}
}

// ParentResult decodes the result of the job named name that job (a
// workflow's job) depends on. It fails if that job did not succeed, or is
// gone (retention removed it).
func ParentResult[R any, T any](ctx context.Context, c *Client, job *Job[T], name string) (R, error) {
	var zero R
	ps, err := c.q.Parents(ctx, c.db, job.Type, job.ID)
	if err != nil {
		return zero, err
	}
	p, ok := ps[name]
	if !ok {
		return zero, fmt.Errorf("jobstage: job %s has no dependency %s (or it was removed)", job.ID, name)
	}
	return ResultOf[R](p)
}
