// Command periodic runs periodic jobs and workflows on jobstage's
// embedded store: a schedule ticks every second, and each tick's job
// starts a workflow (fetch, then resize and index side by side, then
// publish, which reads what they returned); a cron schedule with seconds
// ticks every two seconds beside it. It runs for a few seconds, then
// prints each schedule's state and the last workflow, and stops.
//
//	go run ./examples/periodic [-dir ./jobstage-data] [-for 5s]
//
// Without -dir the store lives in a temporary directory removed at exit.
// Run it twice with the same -dir: the schedules keep their place, and
// the ticks missed while it was not running follow each schedule's
// policy (the batch schedule skips them, the cron one catches each one
// up).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/fdbq"
)

// Batch is the periodic job: each one starts a workflow.
type Batch struct {
	Source string `json:"source"`
}

func (Batch) Kind() string { return "batch" }

// The workflow's steps.
type (
	Fetch   struct{ Run string }
	Resize  struct{ Run string }
	Index   struct{ Run string }
	Publish struct{ Run string }
)

func (Fetch) Kind() string   { return "fetch" }
func (Resize) Kind() string  { return "resize" }
func (Index) Kind() string   { return "index" }
func (Publish) Kind() string { return "publish" }

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
	s, err := run(*dir, *d)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d ticks worked, %d workflows published\n", s.ticks, s.published)
}

type stats struct {
	ticks, published int64
	last             string // the last workflow started
}

// run works the schedules and their workflows for d.
func run(dir string, d time.Duration) (*stats, error) {
	ctx := context.Background()
	c, err := jobstage.Open(ctx, jobstage.Config{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var ticks, published atomic.Int64
	var mu sync.Mutex
	var last string
	// Each tick starts a workflow named after its schedule and tick: a job run
	// again (a retry) finds its workflow there and is done.
	if err := jobstage.Work(c, func(ctx context.Context, j *jobstage.Job[Batch]) error {
		ticks.Add(1)
		id := fmt.Sprintf("%s-%d", j.Data.Source, j.ScheduledAt.UnixMilli())
		w := &jobstage.Workflow{ID: id}
		jobstage.Step(w, "fetch", Fetch{id}, nil)
		jobstage.Step(w, "resize", Resize{id}, nil, "fetch")
		jobstage.Step(w, "index", Index{id}, nil, "fetch")
		jobstage.Step(w, "publish", Publish{id}, nil, "resize", "index")
		if _, err := jobstage.EnqueueWorkflow(ctx, c, w); err != nil && !errors.Is(err, fdbq.ErrWorkflowExists) {
			return err
		}
		mu.Lock()
		last = id
		mu.Unlock()
		fmt.Printf("%s (from %s): started workflow %s\n", j.ID, j.Data.Source, id)
		return nil
	}, nil); err != nil {
		return nil, err
	}
	if err := jobstage.WorkResult(c, func(_ context.Context, j *jobstage.Job[Fetch]) (int, error) { return 3, nil }, nil); err != nil {
		return nil, err
	}
	if err := jobstage.WorkResult(c, func(ctx context.Context, j *jobstage.Job[Resize]) (string, error) {
		n, err := jobstage.ParentResult[int](ctx, c, j, "fetch")
		return fmt.Sprintf("%d thumbnails", n), err
	}, nil); err != nil {
		return nil, err
	}
	if err := jobstage.WorkResult(c, func(ctx context.Context, j *jobstage.Job[Index]) (string, error) {
		n, err := jobstage.ParentResult[int](ctx, c, j, "fetch")
		return fmt.Sprintf("%d entries", n), err
	}, nil); err != nil {
		return nil, err
	}
	if err := jobstage.Work(c, func(ctx context.Context, j *jobstage.Job[Publish]) error {
		thumbs, err := jobstage.ParentResult[string](ctx, c, j, "resize")
		if err != nil {
			return err
		}
		entries, err := jobstage.ParentResult[string](ctx, c, j, "index")
		if err != nil {
			return err
		}
		published.Add(1)
		fmt.Printf("%s: published %s and %s\n", j.Data.Run, thumbs, entries)
		return nil
	}, nil); err != nil {
		return nil, err
	}
	for _, s := range []jobstage.Schedule[Batch]{
		{Name: "batch", Every: time.Second, Args: Batch{Source: "interval"}, Missed: fdbq.MissedSkip},
		{Name: "batch-cron", Cron: "*/2 * * * * *", Timezone: "Europe/Paris", Args: Batch{Source: "cron"}, Missed: fdbq.MissedEach},
	} {
		if err := jobstage.Periodic(c, s); err != nil {
			return nil, err
		}
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	time.Sleep(d) // the example runs for a while: nothing to wait for
	mu.Lock()
	lastRun := last
	mu.Unlock()
	if lastRun != "" {
		// The last workflow finishes before the example stops.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		in, err := jobstage.WaitWorkflow(wctx, c, lastRun)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, n := range in.Jobs {
			fmt.Printf("workflow %s, %s: %s %s\n", in.ID, n.Name, n.State, n.Outcome)
		}
	}
	if err := c.Stop(ctx); err != nil {
		return nil, err
	}
	list, err := c.Queue().Schedules(ctx, c.DB())
	if err != nil {
		return nil, err
	}
	for _, s := range list {
		fmt.Printf("schedule %s: %d ticks with a job, %d skipped, last %s\n", s.Name, s.Fired, s.Skipped, s.LastJob)
	}
	return &stats{ticks: ticks.Load(), published: published.Load(), last: lastRun}, nil
}
