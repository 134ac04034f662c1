package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// A worker that accepted a job and died never heartbeats it again. A
// pipeline built with default options runs the activity monitor, which
// makes the job pending again after its activity timeout; the pipeline
// then works it.
func TestPipelineRecoversJobsOfADeadWorker(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.ActivityTimeout = 100 * time.Millisecond
	e := newEnv(t, envOptions{settings: &s})
	e.add(t, fdbq.NewJob{ID: "orphan"})
	leases, err := e.q.Accept(context.Background(), "t", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(leases) != 1 {
		t.Fatalf("accept as the worker that dies: %v, %d leases", err, len(leases))
	}

	c := consumer.Must(consumer.NewFunc(func(context.Context, *consumer.Job[any]) error { return nil }, consumer.Options{}))
	p := e.start(t, pipeline.From(e.producer(producer.Options{})).To(c).
		WithOptions(pipeline.Options{Monitor: fdbq.MonitorOptions{Interval: 10 * time.Millisecond}}))
	j := e.waitFinished(t, "orphan")[0]
	if j.Outcome != fdbq.Succeeded || j.Attempts != 2 {
		t.Fatalf("recovered job: outcome %s after %d attempts; want succeeded on the 2nd", j.Outcome, j.Attempts)
	}
	if n := pipeline.MonitorUsers(p); n != 1 {
		t.Fatalf("%d pipelines use the monitor, want 1", n)
	}
	stopNow(t, p)
	if n := pipeline.MonitorsRunning(); n != 0 {
		t.Fatalf("%d monitors run after the pipeline stopped", n)
	}
}

// The pipelines of one queue share one monitor, stopped with the last of
// them; NoRecovery runs none.
func TestPipelinesOfOneQueueShareOneMonitor(t *testing.T) {
	e := newEnv(t, envOptions{types: []string{"a", "b", "c"}})
	build := func(typ string, o pipeline.Options) *pipeline.Pipeline {
		c := consumer.Must(consumer.NewFunc(func(context.Context, *consumer.Job[any]) error { return nil }, consumer.Options{}))
		p, err := pipeline.From(producer.New(e.q, typ, producer.Options{})).To(c).WithOptions(o).Build()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := build("a", pipeline.Options{})
	b := build("b", pipeline.Options{})
	none := build("c", pipeline.Options{NoRecovery: true})
	if n, users := pipeline.MonitorsRunning(), pipeline.MonitorUsers(a); n != 1 || users != 2 {
		t.Fatalf("%d monitors with %d users, want 1 shared by 2 pipelines", n, users)
	}
	stopNow(t, a)
	if n, users := pipeline.MonitorsRunning(), pipeline.MonitorUsers(b); n != 1 || users != 1 {
		t.Fatalf("after one stop: %d monitors with %d users, want 1 with 1", n, users)
	}
	stopNow(t, b)
	if n := pipeline.MonitorsRunning(); n != 0 {
		t.Fatalf("%d monitors run after their pipelines stopped (the NoRecovery one still runs)", n)
	}
	stopNow(t, none)
	// A pipeline started after the last one stopped starts a monitor again.
	d := build("a", pipeline.Options{})
	if n := pipeline.MonitorsRunning(); n != 1 {
		t.Fatalf("%d monitors after a new start, want 1", n)
	}
	stopNow(t, d)
}

func stopNow(t *testing.T, p *pipeline.Pipeline) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// A monitor its owner runs and adopts is the one pipelines of its queue
// join: they start none, and their stop does not stop it. After its
// release the next pipeline starts its own again.
func TestPipelinesJoinAnAdoptedMonitor(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.ActivityTimeout = 100 * time.Millisecond
	e := newEnv(t, envOptions{settings: &s})
	m := fdbq.NewMonitor(e.q, fdbq.MonitorOptions{Interval: 10 * time.Millisecond})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Stop(context.Background())
	release := pipeline.AdoptMonitor(e.q, m)

	// The adopted monitor recovers a dead worker's job for the pipeline.
	e.add(t, fdbq.NewJob{ID: "orphan"})
	if ls, err := e.q.Accept(context.Background(), "t", fdbq.AcceptOptions{Max: 1}); err != nil || len(ls) != 1 {
		t.Fatalf("accept as the worker that dies: %v, %d leases", err, len(ls))
	}
	c := consumer.Must(consumer.NewFunc(func(context.Context, *consumer.Job[any]) error { return nil }, consumer.Options{}))
	p, err := pipeline.From(e.producer(producer.Options{})).To(c).Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := jobtest.MonitorLoops(1); n != 1 {
		t.Fatalf("%d monitors run beside the adopted one's pipeline, want 1 (the adopted)", n)
	}
	e.waitFinished(t, "orphan")
	stopNow(t, p)
	if n := jobtest.MonitorLoops(1); n != 1 {
		t.Fatalf("the pipeline's stop stopped the adopted monitor (%d running)", n)
	}
	release()
	if n := pipeline.MonitorsRunning(); n != 0 {
		t.Fatalf("%d monitors registered after the release", n)
	}
	p2, err := pipeline.From(e.producer(producer.Options{})).To(c).Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := jobtest.MonitorLoops(2); n != 2 {
		t.Fatalf("after the release a pipeline runs %d monitors beside the adopted, want its own 1", n-1)
	}
	stopNow(t, p2)
}

// A heartbeat that is not below the type's activity timeout would have
// the monitor take running jobs back: Start refuses it, naming both.
func TestStartRefusesHeartbeatPastTheActivityTimeout(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := consumer.Must(consumer.NewFunc(func(context.Context, *consumer.Job[any]) error { return nil }, consumer.Options{}))
	p, err := pipeline.From(e.producer(producer.Options{})).To(c).
		WithOptions(pipeline.Options{Heartbeat: fdbq.DefaultActivityTimeout}).Build()
	if err != nil {
		t.Fatal(err)
	}
	err = p.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "Heartbeat 30s is not below the activity timeout 30s") {
		t.Fatalf("Start with a heartbeat of the activity timeout: %v", err)
	}
	if n := pipeline.MonitorsRunning(); n != 0 {
		t.Fatalf("a refused Start left %d monitors running", n)
	}
}
