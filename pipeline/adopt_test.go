package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// An adopted monitor stays the one the pipelines of its queue join until
// its owner releases it: the stop of the last pipeline that joined it
// does not unregister it, so a pipeline started after that joins it too
// instead of starting a second monitor.
func TestAdoptedMonitorOutlivesItsPipelines(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := fdbq.NewMonitor(e.q, fdbq.MonitorOptions{Interval: 10 * time.Millisecond})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Stop(context.Background())
	release := pipeline.AdoptMonitor(e.q, m)
	defer release()

	c := consumer.Must(consumer.NewFunc(func(context.Context, *consumer.Job[any]) error { return nil }, consumer.Options{}))
	for i := range 2 {
		p, err := pipeline.From(e.producer(producer.Options{})).To(c).Build()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := jobtest.MonitorLoops(1); n != 1 {
			t.Fatalf("pipeline %d: %d monitors run beside the adopted one's pipeline, want 1 (the adopted)", i, n)
		}
		stopNow(t, p)
		if n := pipeline.MonitorsRunning(); n != 1 {
			t.Fatalf("after pipeline %d stopped: %d monitors registered, want the adopted one until its release", i, n)
		}
	}
	release()
	if n := pipeline.MonitorsRunning(); n != 0 {
		t.Fatalf("%d monitors registered after the release", n)
	}
}

// Pipelines that start and stop while an owner adopts and releases its
// monitor over and over: at the end no monitor is registered or running
// but the owner's, stopped last.
func TestAdoptAcquireReleaseConcurrently(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := consumer.Must(consumer.NewFunc(func(context.Context, *consumer.Job[any]) error { return nil }, consumer.Options{}))
	m := fdbq.NewMonitor(e.q, fdbq.MonitorOptions{Interval: 5 * time.Millisecond})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			release := pipeline.AdoptMonitor(e.q, m)
			time.Sleep(time.Millisecond)
			release()
			release()
		}
	}()
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for range 10 {
				p, err := pipeline.From(e.producer(producer.Options{})).To(c).Build()
				if err != nil {
					errs <- err
					return
				}
				if err := p.Start(context.Background()); err != nil {
					errs <- err
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
				err = p.Stop(ctx)
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	<-done
	if n := pipeline.MonitorsRunning(); n != 0 {
		t.Fatalf("%d monitors registered after everything stopped", n)
	}
	if n := jobtest.MonitorLoops(1); n != 1 {
		t.Fatalf("%d monitors run, want the owner's 1", n)
	}
	m.Stop(context.Background())
}

// An owner that adopts its monitor after pipelines of its queue started
// theirs moves them to its own: theirs stops, one monitor runs, and
// their stop leaves the adopted one running and registered.
func TestAdoptTakesOverThePipelinesMonitor(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := consumer.Must(consumer.NewFunc(func(context.Context, *consumer.Job[any]) error { return nil }, consumer.Options{}))
	p, err := pipeline.From(e.producer(producer.Options{})).To(c).Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := jobtest.MonitorLoops(1); n != 1 {
		t.Fatalf("%d monitors run for one pipeline, want 1", n)
	}
	m := fdbq.NewMonitor(e.q, fdbq.MonitorOptions{Interval: 10 * time.Millisecond})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Stop(context.Background())
	release := pipeline.AdoptMonitor(e.q, m)
	defer release()
	if n := jobtest.MonitorLoops(1); n != 1 {
		t.Fatalf("%d monitors run once the owner adopted its own beside a running pipeline, want 1 (the adopted)", n)
	}
	stopNow(t, p)
	if n, loops := pipeline.MonitorsRunning(), jobtest.MonitorLoops(1); n != 1 || loops != 1 {
		t.Fatalf("after the pipeline stopped: %d registered, %d running; want the adopted one", n, loops)
	}
}
