package fdbq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv/kvtest"
)

// CancelWorkflow racing with workers finishing jobs, through the faulty
// store: every workflow ends done and canceled, with no job of it left
// pending or running, and no node left waiting or added.
func TestWorkflowCancelRacesFinishes(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		base := openDisk(t, t.TempDir())
		ctx := context.Background()
		db, _ := kvtest.NewFaultyDB(base, kvtest.DefaultFaultOptions(seed))
		q := fdbq.New(db, fdbq.Options{Logger: slog.New(slog.DiscardHandler)})
		if err := q.SetType(ctx, db, "email", fdbq.DefaultTypeSettings()); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for w := range 10 {
			id := fmt.Sprintf("w%d", w)
			ids = append(ids, id)
			nw := fdbq.NewWorkflow{ID: id, Policy: fdbq.WorkflowPolicy(w % 2)}
			for i := range 10 {
				var deps []string
				if i > 0 {
					deps = append(deps, fmt.Sprintf("n%d", i/2))
				}
				if i > 3 {
					deps = append(deps, fmt.Sprintf("n%d", i-1))
				}
				nw.Jobs = append(nw.Jobs, wfJob(fmt.Sprintf("n%d", i), deps...))
			}
			if _, err := q.AddWorkflow(ctx, db, nw); err != nil {
				t.Fatal(err)
			}
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 2})
					if err != nil {
						t.Error(err)
						return
					}
					for _, l := range ls {
						if err := q.Finish(ctx, db, l, nil); err != nil && !errors.Is(err, fdbq.ErrHalt) {
							t.Error(err)
						}
					}
				}
			}()
		}
		for _, id := range ids {
			time.Sleep(2 * time.Millisecond)
			if _, err := q.CancelWorkflow(ctx, db, id); err != nil {
				t.Fatal(err)
			}
		}
		close(stop)
		wg.Wait()
		for _, id := range ids {
			in, err := q.GetWorkflow(ctx, base, id)
			if err != nil {
				t.Fatal(err)
			}
			if !in.Done || !in.Canceled {
				t.Fatalf("seed %d: %s: %s", seed, id, states(t, q, id))
			}
		}
		for _, s := range []fdbq.State{fdbq.Pending, fdbq.Running} {
			if n, err := q.Count(ctx, base, "email", s); err != nil || n != 0 {
				t.Fatalf("seed %d: %d %s jobs left: %v", seed, n, s, err)
			}
		}
	}
}
