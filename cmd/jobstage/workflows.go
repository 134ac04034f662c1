package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

// workflow: jobstage workflow add FILE|- | get ID | wait ID | cancel ID.
func (c *cli) workflow(args []string) error {
	if len(args) == 0 {
		return usagef("want a subcommand: add FILE|-, get ID, wait ID or cancel ID")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "add":
		fs, cf := c.clientFlagSet("workflow add", "FILE|-")
		pos, err := parse(fs, args, 1, 1)
		if err != nil {
			return err
		}
		var r io.Reader = c.stdin
		if pos[0] != "-" {
			f, err := os.Open(pos[0])
			if err != nil {
				return err
			}
			defer f.Close()
			r = f
		}
		dec := json.NewDecoder(r)
		dec.DisallowUnknownFields()
		var nw httpapi.NewWorkflow
		if err := dec.Decode(&nw); err != nil {
			return usagef("%s: not a workflow (JSON of POST /v1/workflows): %v", pos[0], err)
		}
		w, err := cf.client().AddWorkflow(c.ctx, nw)
		if err != nil {
			return err
		}
		return c.printWorkflow(cf, w)
	case "get", "cancel":
		fs, cf := c.clientFlagSet("workflow "+sub, "ID")
		pos, err := parse(fs, args, 1, 1)
		if err != nil {
			return err
		}
		cl := cf.client()
		var w *httpapi.Workflow
		if sub == "get" {
			w, err = cl.Workflow(c.ctx, pos[0])
		} else {
			w, err = cl.CancelWorkflow(c.ctx, pos[0])
		}
		if err != nil {
			return err
		}
		return c.printWorkflow(cf, w)
	case "wait":
		fs, cf := c.clientFlagSet("workflow wait", "ID")
		timeout := fs.Duration("timeout", time.Minute, "give up after this long")
		pos, err := parse(fs, args, 1, 1)
		if err != nil {
			return err
		}
		if *timeout < 0 {
			return usagef("--timeout %s is negative", *timeout)
		}
		deadline := time.Now().Add(*timeout)
		var w *httpapi.Workflow
		for {
			poll := max(min(time.Until(deadline), httpapi.MaxWait), time.Millisecond)
			w, err = cf.longPollClient(poll).WaitWorkflow(c.ctx, pos[0], poll)
			if err != nil {
				return err
			}
			if w.Done || time.Until(deadline) <= 0 {
				break
			}
		}
		if err := c.printWorkflow(cf, w); err != nil {
			return err
		}
		if !w.Done {
			return fmt.Errorf("workflow %s not done after %s", w.ID, *timeout)
		}
		var bad []string
		for _, n := range w.Jobs {
			if n.State != fdbq.NodeDone || n.Outcome != fdbq.Succeeded {
				bad = append(bad, n.Name)
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("workflow %s is done; jobs that did not succeed: %s", w.ID, strings.Join(bad, ", "))
		}
		return nil
	}
	return usagef("unknown subcommand %q: add, get, wait or cancel", sub)
}

// printWorkflow prints a workflow as a table of its jobs.
func (c *cli) printWorkflow(cf *clientFlags, w *httpapi.Workflow) error {
	if cf.json {
		return c.printJSON(w)
	}
	status := "running"
	switch {
	case w.Done && w.Canceled:
		status = "done (canceled)"
	case w.Done:
		status = "done"
	case w.Canceled:
		status = "canceled"
	}
	printf(c.stdout, "workflow %s (%s, policy %s)\n", w.ID, status, w.Policy)
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	printf(tw, "JOB\tTYPE\tSTATE\tDEPENDS ON\tID\n")
	for _, n := range w.Jobs {
		st := n.State
		switch {
		case n.Error != "":
			st = "? " + n.Error
		case n.State == fdbq.NodeDone:
			st = "done (" + string(n.Outcome) + ")"
		case n.State == fdbq.NodeAdded && n.Job != nil:
			st = string(n.Job.State)
		}
		deps := strings.Join(n.DependsOn, ",")
		if deps == "" {
			deps = "-"
		}
		printf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Name, n.Type, st, deps, n.ID)
	}
	return tw.Flush()
}
