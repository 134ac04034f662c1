package main

import (
	"text/tabwriter"
	"time"

	"github.com/jobstage/jobstage/httpapi"
)

// schedules: jobstage schedules [list] | pause|resume|delete NAME.
func (c *cli) schedules(args []string) error {
	sub := "list"
	if len(args) > 0 && (args[0] == "list" || args[0] == "pause" || args[0] == "resume" || args[0] == "delete") {
		sub, args = args[0], args[1:]
	}
	if sub == "list" {
		fs, cf := c.clientFlagSet("schedules", "")
		if _, err := parse(fs, args, 0, 0); err != nil {
			return err
		}
		list, err := cf.client().Schedules(c.ctx)
		if err != nil {
			return err
		}
		if cf.json {
			return c.printJSON(map[string]any{"schedules": list})
		}
		return c.printSchedules(list)
	}
	fs, cf := c.clientFlagSet("schedules "+sub, "NAME")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	cl := cf.client()
	var s *httpapi.Schedule
	switch sub {
	case "pause":
		s, err = cl.PauseSchedule(c.ctx, pos[0])
	case "resume":
		s, err = cl.ResumeSchedule(c.ctx, pos[0])
	case "delete":
		if err := cl.DeleteSchedule(c.ctx, pos[0]); err != nil {
			return err
		}
		if cf.json {
			return c.printJSON(map[string]any{"deleted": pos[0]})
		}
		printf(c.stdout, "deleted schedule %s\n", pos[0])
		return nil
	}
	if err != nil {
		return err
	}
	if cf.json {
		return c.printJSON(s)
	}
	return c.printSchedules([]httpapi.Schedule{*s})
}

// printSchedules prints schedules as a table; one that cannot be read is
// listed by name, and why on stderr.
func (c *cli) printSchedules(list []httpapi.Schedule) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	printf(tw, "SCHEDULE\tTYPE\tWHEN\tMISSED\tPAUSED\tNEXT\tLAST JOB\tFIRED\tSKIPPED\n")
	var bad []httpapi.Schedule
	for _, s := range list {
		if s.Error != "" {
			bad = append(bad, s)
			printf(tw, "%s\t?\t?\t?\t?\t?\t?\t?\t?\n", s.Name)
			continue
		}
		when := "every " + s.Every
		if s.Cron != "" {
			when = s.Cron
			if s.Timezone != "" {
				when += " (" + s.Timezone + ")"
			}
		}
		next := "-"
		if s.Next != nil {
			next = s.Next.UTC().Format(time.RFC3339)
		}
		last := s.LastJob
		if last == "" {
			last = "-"
		}
		printf(tw, "%s\t%s\t%s\t%s\t%v\t%s\t%s\t%d\t%d\n", s.Name, s.Type, when, s.Missed, s.Paused, next, last, s.Fired, s.Skipped)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range bad {
		printf(c.stderr, "unreadable: %s (declare it again, or: jobstage schedules delete %s)\n", s.Error, s.Name)
	}
	return nil
}
