// Command periodic runs periodic jobs on jobstage's embedded store: a
// schedule every second and a cron schedule with seconds, worked by a
// typed handler, for a few seconds; then it prints each schedule's state
// and stops.
//
//	go run ./examples/periodic [-dir ./jobstage-data] [-for 5s]
//
// Without -dir the store lives in a temporary directory removed at exit.
// Run it twice with the same -dir: the schedules keep their place, and
// the ticks missed while it was not running follow each schedule's
// policy (the heartbeat skips them, the report catches each one up).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/fdbq"
)

// Report is the data of a periodic job.
type Report struct {
	Name string `json:"name"`
}

func (Report) Kind() string { return "report" }

func main() {
	dir := flag.String("dir", "", "store directory (default: a temporary one)")
	d := flag.Duration("for", 5*time.Second, "how long to run")
	flag.Parse()
	if *dir == "" {
		tmp, err := os.MkdirTemp("", "jobstage-periodic-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		*dir = tmp
	}
	n, err := run(*dir, *d)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d reports worked\n", n)
}

// run works the schedules' jobs for d and returns how many it worked.
func run(dir string, d time.Duration) (int64, error) {
	ctx := context.Background()
	c, err := jobstage.Open(ctx, jobstage.Config{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	var worked atomic.Int64
	if err := jobstage.Work(c, func(_ context.Context, j *jobstage.Job[Report]) error {
		worked.Add(1)
		fmt.Printf("%s: %s\n", j.ID, j.Data.Name)
		return nil
	}, nil); err != nil {
		return 0, err
	}
	for _, s := range []jobstage.Schedule[Report]{
		{Name: "heartbeat", Every: time.Second, Args: Report{Name: "heartbeat"}, Missed: fdbq.MissedSkip},
		{Name: "every-2s", Cron: "*/2 * * * * *", Timezone: "Europe/Paris", Args: Report{Name: "cron"}, Missed: fdbq.MissedEach},
	} {
		if err := jobstage.Periodic(c, s); err != nil {
			return 0, err
		}
	}
	if err := c.Start(ctx); err != nil {
		return 0, err
	}
	time.Sleep(d) // the example runs for a while: nothing to wait for
	if err := c.Stop(ctx); err != nil {
		return 0, err
	}
	list, err := c.Queue().Schedules(ctx, c.DB())
	if err != nil {
		return 0, err
	}
	for _, s := range list {
		fmt.Printf("schedule %s: %d ticks with a job, %d skipped, last %s\n", s.Name, s.Fired, s.Skipped, s.LastJob)
	}
	return worked.Load(), nil
}
