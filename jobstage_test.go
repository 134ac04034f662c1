package jobstage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/jobstagetest"
	"github.com/jobstage/jobstage/kv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const waitLimit = 30 * time.Second

func within(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

// Report has defaults of its own: 2 attempts, a second apart, an activity
// timeout of 200 ms.
type Report struct {
	Month string `json:"month"`
}

func (Report) Kind() string { return "report" }

func (Report) Defaults() jobstage.Defaults {
	return jobstage.Defaults{
		Priority:        4,
		Retry:           &fdbq.RetryPolicy{MaxAttempts: 2, Backoff: fdbq.Constant, Base: time.Millisecond},
		ActivityTimeout: 200 * time.Millisecond,
	}
}

// The kind's defaults reach the stored type and the enqueued job; a job
// fails, is retried per the kind's policy, and its typed result comes
// back from Wait.
func TestDefaultsAndTypedResult(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	if err := jobstage.WorkResult(c, func(ctx context.Context, j *jobstage.Job[Report]) (map[string]int, error) {
		if j.Attempt == 1 {
			return nil, errors.New("the ledger is locked")
		}
		return map[string]int{j.Data.Month: j.Attempt}, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	job, err := jobstage.Enqueue(ctx, c, Report{Month: "2026-11"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if job.Priority != 4 {
		t.Errorf("enqueued job's priority %d, want the kind's 4", job.Priority)
	}
	done, err := jobstage.Wait[Report](ctx, c, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	var result map[string]int
	if err := done.DecodeResult(&result); err != nil {
		t.Fatal(err)
	}
	if done.Outcome != fdbq.Succeeded || done.Attempts != 2 || result["2026-11"] != 2 || done.Data.Month != "2026-11" {
		t.Fatalf("job: %s after %d attempts, result %v, data %+v", done.Outcome, done.Attempts, result, done.Data)
	}
	info, err := c.Queue().GetType(ctx, c.DB(), "report")
	if err != nil {
		t.Fatal(err)
	}
	if s := info.Settings; s.ActivityTimeout != 200*time.Millisecond || s.Retry.MaxAttempts != 2 || s.Retention != fdbq.DefaultRetention {
		t.Errorf("registered settings %+v", s)
	}
}

// A worker that died holding a job (it accepted the job and never
// heartbeated) loses it to the activity monitor a client runs by
// default, and the client's own pipeline works it.
func TestCrashRecoveryByDefault(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet, Monitor: fdbq.MonitorOptions{Interval: 20 * time.Millisecond}})
	job, err := jobstage.Enqueue(ctx, c, Report{Month: "lost"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The dead worker: another process's accept, no heartbeat ever.
	if ls, err := c.Queue().Accept(ctx, "report", fdbq.AcceptOptions{}); err != nil || len(ls) != 1 {
		t.Fatalf("dead worker's accept: %d leases, %v", len(ls), err)
	}
	worked := make(chan int, 4)
	if err := jobstage.Work(c, func(ctx context.Context, j *jobstage.Job[Report]) error {
		worked <- j.Attempt
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done, err := jobstage.Wait[Report](ctx, c, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.Outcome != fdbq.Succeeded || done.Attempts != 2 {
		t.Fatalf("recovered job: %s after %d attempts", done.Outcome, done.Attempts)
	}
	if a := <-worked; a != 2 {
		t.Errorf("the client's handler ran attempt %d, want 2 (the dead worker's was 1)", a)
	}
}

// EnqueueTx commits with the caller's transaction or not at all; inside
// it, the test kit sees the job before the commit.
func TestEnqueueTx(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	boom := errors.New("the order did not save")
	err := c.DB().Transact(ctx, func(tx kv.Tx) error {
		tx.Set([]byte("app/order/1"), []byte("saved"))
		if _, err := jobstage.EnqueueTx(ctx, tx, c, Report{Month: "rolled back"}, nil); err != nil {
			return err
		}
		if got := jobstagetest.RequireEnqueued[Report](t, tx, c); got.Data.Month != "rolled back" {
			t.Errorf("inside the transaction: %+v", got.Data)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("transaction: %v", err)
	}
	if jobs := jobstagetest.Enqueued[Report](t, c.DB(), c); len(jobs) != 0 {
		t.Fatalf("a job of a transaction that failed was enqueued: %+v", jobs[0].Data)
	}
	err = c.DB().Transact(ctx, func(tx kv.Tx) error {
		tx.Set([]byte("app/order/2"), []byte("saved"))
		_, err := jobstage.EnqueueManyTx(ctx, tx, c, []Report{{Month: "a"}, {Month: "b"}}, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if jobs := jobstagetest.Enqueued[Report](t, c.DB(), c); len(jobs) != 2 {
		t.Fatalf("%d jobs after the transaction committed, want 2", len(jobs))
	}
}

type badKind struct{}

func (badKind) Kind() string { return "bad\x00kind" }

// What cannot work is refused with an error that names it, before
// anything is written.
func TestRefusals(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	if _, err := jobstage.Enqueue(ctx, c, badKind{}, nil); err == nil || !strings.Contains(err.Error(), "Kind of jobstage_test.badKind") {
		t.Errorf("enqueue of a bad kind: %v", err)
	}
	if err := jobstage.Work(c, func(context.Context, *jobstage.Job[badKind]) error { return nil }, nil); err == nil {
		t.Error("Work of a bad kind was accepted")
	}
	if _, err := jobstage.EnqueueMany(ctx, c, []Report{{}, {}}, &jobstage.EnqueueOptions{ID: "one"}); err == nil {
		t.Error("one id for two jobs was accepted")
	}
	h := func(context.Context, *jobstage.Job[Report]) error { return nil }
	if err := jobstage.Work(c, h, nil); err != nil {
		t.Fatal(err)
	}
	if err := jobstage.Work(c, h, nil); err == nil || !strings.Contains(err.Error(), "has a handler already") {
		t.Errorf("a second handler for a kind: %v", err)
	}
	if _, err := jobstage.Open(ctx, jobstage.Config{Dir: t.TempDir(), ClusterFile: "/etc/fdb.cluster"}); err == nil {
		t.Error("Open with two stores was accepted")
	}
	if _, err := jobstage.Get[Report](ctx, c, "nope"); !errors.Is(err, fdbq.ErrNotFound) {
		t.Errorf("Get of a missing job: %v", err)
	}
}

// Data that does not decode into the kind's type cancels the job at once
// instead of spending its attempts.
func TestUndecodableDataCancels(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	if err := jobstage.Work(c, func(context.Context, *jobstage.Job[Report]) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Queue().Add(ctx, c.DB(), fdbq.NewJob{Type: "report", ID: "x", Data: json.RawMessage(`{"month":7}`)}); err != nil {
		t.Fatal(err)
	}
	j, err := c.Queue().WaitOne(ctx, "report", "x", fdbq.Finished)
	if err != nil {
		t.Fatal(err)
	}
	if j.Outcome != fdbq.Canceled || j.Attempts != 1 || !strings.Contains(j.Error, "decode") {
		t.Fatalf("undecodable job: %s after %d attempts, %q", j.Outcome, j.Attempts, j.Error)
	}
}

// Start keeps an operator's pause of a kind's type.
func TestStartKeepsPause(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	if _, err := jobstage.Enqueue(ctx, c, Report{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Queue().Pause(ctx, c.DB(), "report"); err != nil {
		t.Fatal(err)
	}
	if err := jobstage.Work(c, func(context.Context, *jobstage.Job[Report]) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := c.Queue().GetType(ctx, c.DB(), "report")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Settings.Paused {
		t.Error("Start resumed a paused type")
	}
}

// Stop before Start and twice do nothing; Start twice, or after Stop, is
// refused.
func TestClientLifecycle(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := c.Start(ctx); err == nil {
		t.Fatal("Start after Stop was accepted")
	}
	d := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err == nil {
		t.Fatal("a second Start was accepted")
	}
	for range 2 {
		if err := d.Stop(ctx); err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
}

// ptrKind's Kind reads a field: called on the zero *ptrKind, it panics.
type ptrKind struct{ name string }

func (p *ptrKind) Kind() string { return p.name }

// shifty's Kind says something else each time it is asked.
type shifty struct{}

var shiftyCalls atomic.Int32

func (shifty) Kind() string { return fmt.Sprintf("shifty%d", shiftyCalls.Add(1)) }

// defaultsPanic's Defaults panics.
type defaultsPanic struct{}

func (defaultsPanic) Kind() string                { return "defaults_panic" }
func (defaultsPanic) Defaults() jobstage.Defaults { panic("no defaults today") }

// A kind that cannot name its type — its Kind panics on the zero value,
// or changes between calls, or its Defaults panics — is refused with an
// error by everything that takes the kind, instead of panicking in the
// caller or scattering its jobs over several types.
func TestKindMisbehaving(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	calls := map[string]func() error{
		"Work ptrKind": func() error {
			return jobstage.Work(c, func(context.Context, *jobstage.Job[*ptrKind]) error { return nil }, nil)
		},
		"Enqueue ptrKind": func() error { _, err := jobstage.Enqueue(ctx, c, &ptrKind{name: "x"}, nil); return err },
		"Get ptrKind":     func() error { _, err := jobstage.Get[*ptrKind](ctx, c, "x"); return err },
		"Wait ptrKind":    func() error { _, err := jobstage.Wait[*ptrKind](ctx, c, "x"); return err },
		"Work shifty": func() error {
			return jobstage.Work(c, func(context.Context, *jobstage.Job[shifty]) error { return nil }, nil)
		},
		"Enqueue shifty": func() error { _, err := jobstage.Enqueue(ctx, c, shifty{}, nil); return err },
		"Work defaultsPanic": func() error {
			return jobstage.Work(c, func(context.Context, *jobstage.Job[defaultsPanic]) error { return nil }, nil)
		},
		"Enqueue defaultsPanic": func() error { _, err := jobstage.Enqueue(ctx, c, defaultsPanic{}, nil); return err },
	}
	for name, call := range calls {
		var panicked any
		err := func() error {
			defer func() { panicked = recover() }()
			return call()
		}()
		if panicked != nil || err == nil {
			t.Errorf("%s: panic %v, error %v; want an error", name, panicked, err)
		}
	}
	types, err := c.Queue().Types(ctx, c.DB())
	if err != nil {
		t.Fatal(err)
	}
	for _, ty := range types {
		t.Errorf("a misbehaving kind registered type %q", ty.Name)
	}
}

// negativeTimeout's Defaults bound each attempt by a negative time.
type negativeTimeout struct{}

func (negativeTimeout) Kind() string { return "negative_timeout" }
func (negativeTimeout) Defaults() jobstage.Defaults {
	return jobstage.Defaults{Timeout: -time.Second}
}

// A negative timeout, in a kind's Defaults or in WorkOptions, is refused:
// 0 says "no timeout", and a negative one silently meant the same.
func TestNegativeTimeoutRefused(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	if err := jobstage.Work(c, func(context.Context, *jobstage.Job[negativeTimeout]) error { return nil }, nil); !errors.Is(err, fdbq.ErrInvalidJob) {
		t.Errorf("Work of a kind whose Defaults.Timeout is negative: %v, want ErrInvalidJob", err)
	}
	if _, err := jobstage.Enqueue(ctx, c, negativeTimeout{}, nil); !errors.Is(err, fdbq.ErrInvalidJob) {
		t.Errorf("Enqueue of a kind whose Defaults.Timeout is negative: %v, want ErrInvalidJob", err)
	}
	if err := jobstage.Work(c, func(context.Context, *jobstage.Job[Report]) error { return nil }, &jobstage.WorkOptions{Timeout: -time.Minute}); err == nil {
		t.Error("Work with a negative WorkOptions.Timeout was accepted")
	}
}
