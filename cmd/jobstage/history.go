package main

import (
	"text/tabwriter"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

// history prints a type's ended attempts per minute, as the store counts
// them: the minutes with counts (every one with --every-minute), then
// the sums.
func (c *cli) history(args []string) error {
	fs, cf := c.clientFlagSet("history", "TYPE")
	minutes := fs.Int("minutes", 60, "how many minutes, up to --until's (at most 1440)")
	until := fs.String("until", "", "the last minute is this time's: RFC 3339 (2026-01-02T15:04:05Z), or how long ago (1h); default now")
	every := fs.Bool("every-minute", false, "print every minute, those with no counts too")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *minutes < 1 || *minutes > fdbq.MaxHistoryMinutes {
		return usagef("--minutes %d: want 1 to %d", *minutes, fdbq.MaxHistoryMinutes)
	}
	end, err := parseAgo("until", *until)
	if err != nil {
		return err
	}
	if *until != "" && end.IsZero() {
		// The client sends the zero time as no time at all: now.
		return usagef("--until %q: want a time after 0001-01-01T00:00:00Z", *until)
	}
	h, err := cf.client().History(c.ctx, pos[0], *minutes, end)
	if err != nil {
		return err
	}
	if cf.json {
		return c.printJSON(h)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	printf(tw, "MINUTE\tSUCCEEDED\tFAILED\tCANCELED\tRETRIED\tRECYCLED\t\n")
	var sum httpapi.HistoryMinute
	for _, m := range h.Minutes {
		sum.Succeeded += m.Succeeded
		sum.Failed += m.Failed
		sum.Canceled += m.Canceled
		sum.Retried += m.Retried
		sum.Recycled += m.Recycled
		if !*every && m == (httpapi.HistoryMinute{At: m.At}) {
			continue
		}
		printf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", m.At.Local().Format("2006-01-02 15:04"), m.Succeeded, m.Failed, m.Canceled, m.Retried, m.Recycled)
	}
	span := "no minutes"
	if n := len(h.Minutes); n > 0 {
		span = h.Minutes[0].At.Local().Format("15:04") + "–" + h.Minutes[n-1].At.Add(time.Minute).Local().Format("15:04")
	}
	printf(tw, "total %s\t%d\t%d\t%d\t%d\t%d\t\n", span, sum.Succeeded, sum.Failed, sum.Canceled, sum.Retried, sum.Recycled)
	if err := tw.Flush(); err != nil {
		return err
	}
	if h.Unreadable > 0 {
		printf(c.stderr, "%d keys of the history of %s are not counters; they were passed over\n", h.Unreadable, pos[0])
	}
	return nil
}
