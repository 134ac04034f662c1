// Command pipeline runs jobs end to end on jobstage's embedded store: it
// registers a job type, enqueues jobs, runs a pipeline (producer → filter
// → typed handler) which runs the activity monitor too, waits for the
// jobs, prints their outcomes and stops gracefully (Ctrl-C stops early,
// handing unstarted jobs back to pending).
//
//	go run ./examples/pipeline [-dir ./jobstage-data] [-jobs 10]
//
// Without -dir the store lives in a temporary directory removed at exit.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// Thumbnail is the data of a "thumbnail" job. Its Kind names the job
// type, so that a pipeline whose producer accepts another type is refused
// when it is built.
type Thumbnail struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

func (Thumbnail) Kind() string { return "thumbnail" }

// Rendered is what the handler stores as the job's result.
type Rendered struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes"`
}

func main() {
	dir := flag.String("dir", "", "data directory of the embedded store (default: a temporary one)")
	n := flag.Int("jobs", 10, "jobs to enqueue")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *dir, *n); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dir string, n int) error {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "jobstage-example-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	store, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		return err
	}
	db := kv.NewDB(store, kv.Options{})
	defer db.Close()
	q := fdbq.New(db, fdbq.Options{})
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	// The type's settings: a job whose worker stops heartbeating for 10 s
	// is retried, up to 3 attempts, 100 ms apart.
	settings := fdbq.DefaultTypeSettings()
	settings.ActivityTimeout = 10 * time.Second
	settings.Retry = fdbq.RetryPolicy{MaxAttempts: 3, Backoff: fdbq.Constant, Base: 100 * time.Millisecond}
	if err := q.SetType(ctx, db, Thumbnail{}.Kind(), settings); err != nil {
		return err
	}

	ids, err := enqueue(ctx, q, db, n)
	if err != nil {
		return err
	}
	fmt.Printf("store %s: enqueued %d thumbnail jobs\n", dir, n)

	// The consumer runs render, four jobs at a time.
	c, err := consumer.New(render, consumer.Options{Concurrency: 4, MaxDemand: 8, JobTimeout: 5 * time.Second},
		consumer.Logging(logger), consumer.Recover())
	if err != nil {
		return err
	}
	// Width 0 means "no thumbnail wanted": such jobs are finished by the
	// filter with {"filtered":true} and never reach the handler.
	wanted := pipeline.Filter(func(l *fdbq.Lease) bool { return !strings.Contains(string(l.Data), `"width":0`) })
	p, err := pipeline.From(producer.New(q, Thumbnail{}.Kind(), producer.Options{})).
		Via(wanted).
		To(c).
		WithOptions(pipeline.Options{DrainTimeout: 10 * time.Second, BatchFinish: true, Logger: logger}).
		Build()
	if err != nil {
		return err
	}
	// The pipeline runs the activity monitor while it runs: a job whose
	// worker died (an earlier run killed mid-job) is pending again after
	// its activity timeout.
	if err := p.Start(ctx); err != nil {
		return err
	}

	// Wait for every job to finish: Wait watches the store, it never polls.
	results, waitErr := q.Wait(ctx, Thumbnail{}.Kind(), ids, fdbq.Finished)

	stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := p.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	if waitErr != nil {
		if ctx.Err() != nil {
			fmt.Println("interrupted; unfinished jobs are pending again")
			return nil
		}
		return waitErr
	}
	return printOutcomes(results)
}

// enqueue adds n thumbnail jobs in one transaction and returns their ids.
// The ids are ours, so running the program again on the same directory
// enqueues the same jobs again.
func enqueue(ctx context.Context, q *fdbq.Queue, db *kv.DB, n int) ([]string, error) {
	var jobs []fdbq.NewJob
	var ids []string
	for i := range n {
		id := fmt.Sprintf("img-%03d", i)
		data, err := json.Marshal(Thumbnail{Image: fmt.Sprintf("photos/%d.jpg", i), Width: 64 * (i % 4)})
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, fdbq.NewJob{Type: Thumbnail{}.Kind(), ID: id, Data: data})
		ids = append(ids, id)
	}
	if _, err := q.AddBatch(ctx, db, jobs); err != nil {
		return nil, err
	}
	return ids, nil
}

// render is the handler of thumbnail jobs. It sees typed data; its result
// is stored as JSON. An error fails the attempt (retried per the type's
// policy), a panic too.
func render(ctx context.Context, j *consumer.Job[Thumbnail]) (Rendered, error) {
	if strings.HasSuffix(j.Data.Image, "/7.jpg") && j.Attempt == 1 {
		return Rendered{}, errors.New("transient failure, retried")
	}
	return Rendered{Path: fmt.Sprintf("thumbs/%s.%dw.jpg", j.ID, j.Data.Width), Bytes: j.Data.Width * 100}, nil
}

// printOutcomes prints how each job finished: its outcome, its attempts
// and the result its handler stored. A job Wait could not report (one
// removed meanwhile) ends the program with its error.
func printOutcomes(results []fdbq.WaitResult) error {
	for _, r := range results {
		if r.Err != nil {
			return r.Err
		}
		j := r.Job
		fmt.Printf("%s: %s after %d attempt(s): %s\n", j.ID, j.Outcome, j.Attempts, j.Result)
	}
	return nil
}
