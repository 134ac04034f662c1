package main

import (
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jobstage/jobstage/httpapi"
)

// keys lists a type's fairness keys: each key's policy, its zones with
// ready jobs, its running jobs and its rate window.
func (c *cli) keys(args []string) error {
	fs, cf := c.clientFlagSet("keys", "TYPE")
	limit := fs.Int("limit", 50, "keys per page (at most 200)")
	after := fs.String("after", "", "list the keys after this one (the next page's, which a previous keys printed)")
	all := fs.Bool("all", false, "follow the pages to the end")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *limit < 1 || *limit > 200 {
		return usagef("--limit %d: want 1 to 200", *limit)
	}
	cl := cf.client()
	o := httpapi.KeysOptions{Limit: *limit, After: *after}
	out := httpapi.KeyPage{Keys: []httpapi.KeyInfo{}}
	for {
		page, err := cl.Keys(c.ctx, pos[0], o)
		if err != nil {
			return err
		}
		out.Keys = append(out.Keys, page.Keys...)
		out.Unreadable = append(out.Unreadable, page.Unreadable...)
		out.Next = page.Next
		if !*all || page.Next == "" {
			break
		}
		o.After = page.Next
	}
	if cf.json {
		return c.printJSON(out)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	printf(tw, "KEY\tPOLICY\tWEIGHT\tMAX RUNNING\tMAX STARTS\tZONES\tREADY ZONES\tRUNNING\tRATE WINDOW\n")
	for _, k := range out.Keys {
		name, policy, running := k.Key, "default", "-"
		if k.Key == "" {
			name, policy = "(no key)", "no key"
		}
		if k.Named {
			policy = "named"
		}
		if k.Running != nil {
			running = strconv.FormatInt(*k.Running, 10)
		}
		printf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\n", name, policy, k.Policy.Weight, bound(k.Policy.MaxRunning),
			rate(k.Policy), k.Policy.Zones, k.ReadyZones, running, window(k.Window, k.Policy.MaxStarts))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	c.printUnreadable(pos[0], out.Unreadable)
	if out.Next != "" {
		printf(c.stderr, "more: jobstage keys %s --limit %d --after %s\n", shellQuote(pos[0]), *limit, shellQuote(out.Next))
	}
	return nil
}

// bound shows a bound of 0 as none.
func bound(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func rate(p httpapi.KeyPolicy) string {
	if p.MaxStarts == 0 {
		return "-"
	}
	return fmt.Sprintf("%d per %s", p.MaxStarts, time.Duration(p.Per))
}

// window shows a rate window: the starts in it and until when it holds.
func window(w *httpapi.RateWindow, maxStarts int) string {
	switch {
	case w == nil:
		return "-"
	case !w.Current:
		return fmt.Sprintf("ended %s (%d started)", w.End.Local().Format(time.RFC3339), w.Started)
	}
	return fmt.Sprintf("%d of %d until %s", w.Started, maxStarts, w.End.Local().Format(time.RFC3339))
}
