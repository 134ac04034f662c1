package fdbq_test

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jobstage/jobstage/fdbq"
)

// Workflows in the simulation: producers add small workflows (two to five
// jobs of the simulation's types, random dependencies, either policy,
// some jobs with one attempt so that they fail), operators cancel them,
// and the workers, the monitor and the faults treat their jobs as any
// other. The rule:
//
//   - workflow: a workflow's job is created only by the call that adds
//     the workflow (a job with no dependency) or by a call that ended a
//     job (finish, fail, the monitor's recycle of a job out of attempts,
//     cancel, remove), and then every job it depends on has finished (or
//     was removed), succeeded under CancelDependents, by its first finish
//     in the commit log (what it gave its dependents), up to that commit; at the end of a drained run every workflow is done, each
//     job that its dependencies allowed ran, and no other did.

// simWorkflow is a workflow a producer added (its call may have failed).
type simWorkflow struct {
	id     string
	policy fdbq.WorkflowPolicy
	names  []string
	typ    map[string]string
	deps   map[string][]string
}

// workflowJob says whether job is a workflow's, and which.
func (s *sim) workflowJob(job simJobRef) (*simWorkflow, string, bool) {
	wf, name, ok := strings.Cut(job.id, ":")
	if !ok {
		return nil, "", false
	}
	w := s.workflows[wf]
	return w, name, w != nil
}

func (s *sim) addWorkflow(a *simActor) {
	p := a.p
	id := fmt.Sprintf("w%d", len(s.wfOrder))
	w := &simWorkflow{id: id, policy: fdbq.WorkflowPolicy(s.rng.IntN(2)), typ: map[string]string{}, deps: map[string][]string{}}
	nw := fdbq.NewWorkflow{ID: id, Policy: w.policy}
	var texts []string
	var roots []simJobRef
	for i := range 2 + s.rng.IntN(4) {
		name := fmt.Sprintf("n%d", i)
		typ := simTypes[s.rng.IntN(len(simTypes))]
		var deps []string
		for d := range i {
			if s.rng.IntN(2) == 0 {
				deps = append(deps, fmt.Sprintf("n%d", d))
			}
		}
		j := fdbq.NewJob{Type: typ, MaxAttempts: []int{0, 0, 1}[s.rng.IntN(3)]}
		nw.Jobs = append(nw.Jobs, fdbq.WorkflowJob{Name: name, Job: j, DependsOn: deps})
		w.names = append(w.names, name)
		w.typ[name], w.deps[name] = typ, deps
		texts = append(texts, fmt.Sprintf("%s@%s<-%v max=%d", name, typ, deps, j.MaxAttempts))
		if len(deps) == 0 {
			roots = append(roots, simJobRef{typ, fdbq.WorkflowJobID(id, name)})
		}
	}
	s.workflows[id] = w
	s.wfOrder = append(s.wfOrder, id)
	s.do(a, "addworkflow", fmt.Sprintf("%s policy=%s [%s]", id, w.policy, strings.Join(texts, "; ")), roots, nil, func(ctx context.Context) (string, error) {
		in, err := p.q.AddWorkflow(ctx, p.db, nw)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d jobs", len(in.Jobs)), nil
	})
}

func (s *sim) cancelWorkflow(a *simActor) {
	p := a.p
	id := s.wfOrder[s.rng.IntN(len(s.wfOrder))]
	s.do(a, "cancelworkflow", id, nil, nil, func(ctx context.Context) (string, error) {
		in, err := p.q.CancelWorkflow(ctx, p.db, id)
		if err != nil {
			return "", err
		}
		return fmt.Sprint(in.Done), nil
	})
}

// workflowCreates says whether op may create a job of a workflow.
func workflowCreates(op string) bool {
	return slices.Contains([]string{"addworkflow", "finish", "fail", "sweep", "cancel", "remove"}, op)
}

// checkWorkflows checks the workflow rule over the commit log, and, after
// a drain that settled, the workflows as the store has them.
func (s *sim) checkWorkflows(settled bool) {
	if len(s.workflows) == 0 {
		return
	}
	// finish is each job's first finish by the log: its outcome, or
	// "removed" for a job removed before it finished. It is what its
	// dependents were given; a later finish (after Requeue or an Add of
	// its id) gives them nothing.
	finish := map[simJobRef]fdbq.Outcome{}
	records := map[simJobRef]*fdbq.StoredJob{}
	for _, c := range s.hist.log {
		// A dependency's finish and the job it releases are one commit:
		// the dependencies are checked as the commit leaves them.
		for _, w := range c.writes {
			if w.settings != nil {
				continue
			}
			if _, ok := finish[w.job]; !ok {
				switch {
				case w.next != nil && w.next.State == fdbq.Finished && (w.prev == nil || w.prev.State != fdbq.Finished):
					finish[w.job] = w.next.Outcome
				case w.next == nil && w.prev != nil && w.prev.State != fdbq.Finished:
					finish[w.job] = fdbq.OutcomeRemoved
				}
			}
			records[w.job] = w.next
		}
		for _, w := range c.writes {
			wf, name, ok := s.workflowJob(w.job)
			if w.settings != nil || !ok || w.prev != nil || w.next == nil || w.next.Workflow == "" || c.entry == nil {
				continue
			}
			op := c.entry.op
			if !workflowCreates(op) || op == "addworkflow" && len(wf.deps[name]) > 0 {
				s.violate("workflow", w.job, c.entry, "c%d: %s created a job of workflow %s, which it may not", c.n, op, wf.id)
			}
			for _, d := range wf.deps[name] {
				dep := simJobRef{wf.typ[d], fdbq.WorkflowJobID(wf.id, d)}
				o, ok := finish[dep]
				switch {
				case !ok:
					s.violate("workflow", w.job, c.entry, "c%d: created while its dependency %s has not finished", c.n, d)
				case wf.policy == fdbq.CancelDependents && o != fdbq.Succeeded:
					s.violate("workflow", w.job, c.entry, "c%d: created while its dependency %s is %s (policy cancel)", c.n, d, o)
				}
			}
		}
	}
	if !settled {
		return
	}
	ctx := context.Background()
	q := fdbq.New(s.plain, fdbq.Options{})
	for _, id := range s.wfOrder {
		wf := s.workflows[id]
		in, err := q.GetWorkflow(ctx, s.plain, id)
		if err != nil {
			continue // its add did not commit
		}
		job := simJobRef{id: id}
		if !in.Done {
			s.violate("workflow", job, nil, "workflow %s is not done after the drain", id)
		}
		// What each job gave its dependents: its first finish.
		outcome := map[string]fdbq.Outcome{}
		for _, n := range in.Jobs {
			outcome[n.Name] = finish[simJobRef{wf.typ[n.Name], n.ID}]
		}
		for _, n := range in.Jobs {
			ref := simJobRef{wf.typ[n.Name], n.ID}
			allowed := !in.Canceled || n.State == fdbq.NodeDone
			for _, d := range wf.deps[n.Name] {
				if outcome[d] == "" || wf.policy == fdbq.CancelDependents && outcome[d] != fdbq.Succeeded {
					allowed = false
				}
			}
			switch {
			case n.Err != nil:
				s.violate("workflow", ref, nil, "%v", n.Err)
			case allowed && n.State != fdbq.NodeDone:
				s.violate("workflow", ref, nil, "its dependencies allowed it and it is %s at the end", n.State)
			case !allowed && n.State == fdbq.NodeDone && records[ref] != nil && records[ref].Attempts > 0:
				s.violate("workflow", ref, nil, "ran though a dependency did not allow it")
			case !allowed && n.State != fdbq.NodeSkipped && n.State != fdbq.NodeDone:
				s.violate("workflow", ref, nil, "is %s at the end", n.State)
			}
		}
	}
}
