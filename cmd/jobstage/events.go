package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"time"

	"github.com/jobstage/jobstage/httpapi"
)

// events follows GET /v1/events, printing a line per event, and goes on
// from its last cursor when the stream ends (the server restarted), until
// it is stopped or --count events were printed.
func (c *cli) events(args []string) error {
	fs, cf := c.clientFlagSet("events", "[TYPE...]")
	cursor := fs.String("cursor", "", "begin after this event's cursor (default: from now)")
	count := fs.Int("count", 0, "stop after this many job events (0: never)")
	types, err := parse(fs, args, 0, -1)
	if err != nil {
		return err
	}
	if *count < 0 {
		return usagef("--count must not be negative, got %d", *count)
	}
	// No overall timeout: a stream runs until it is stopped.
	cl := httpapi.NewClient(cf.server, os.Getenv("JOBSTAGE_TOKEN"), &http.Client{})
	seen := 0
	errDone := errors.New("done")
	retry := time.Second
	for {
		err := cl.Events(c.ctx, types, *cursor, func(e httpapi.Event) error {
			retry = time.Second
			// Every event that carries a cursor (ready, reset, job) is
			// where a reconnection goes on from: one that drops before
			// any job event resumes from the ready event's, so the
			// changes committed meanwhile are not missed.
			if e.Cursor != "" {
				*cursor = e.Cursor
			}
			if cf.json {
				b, _ := json.Marshal(struct {
					Kind string `json:"event"`
					httpapi.Event
				}{e.Kind, e})
				c.stdout.Write(append(jsonText(b), '\n'))
			} else {
				switch e.Kind {
				case "job":
					state := e.State
					if e.Outcome != "" {
						state += " (" + e.Outcome + ")"
					}
					printf(c.stdout, "%s %s %s %s attempt %d\n", e.At.Format(time.RFC3339Nano), e.Type, e.ID, state, e.Attempts)
				case "reset":
					printf(c.stdout, "reset: %s\n", e.Reason)
				case "ready":
					printf(c.stderr, "following from cursor %s\n", e.Cursor)
				}
			}
			if e.Kind == "job" {
				if seen++; *count > 0 && seen >= *count {
					return errDone
				}
			}
			return nil
		})
		switch {
		case errors.Is(err, errDone):
			return nil
		case c.ctx.Err() != nil:
			return nil
		}
		var ae *httpapi.APIError
		if errors.As(err, &ae) && ae.Status != http.StatusServiceUnavailable {
			return err // refused: trying again changes nothing
		}
		printf(c.stderr, "stream ended (%v); again in %s from cursor %s\n", err, retry, *cursor)
		select {
		case <-time.After(retry):
		case <-c.ctx.Done():
			return nil
		}
		retry = min(2*retry, 30*time.Second)
	}
}
