package lifecycle_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jobstage/jobstage/internal/lifecycle"
	"github.com/jobstage/jobstage/internal/lifecycletest"
)

// ticker is the smallest long-running part: a goroutine from Start to
// Stop, and something to release if it never starts.
type ticker struct {
	life     lifecycle.Lifecycle
	quit     chan struct{}
	done     chan struct{}
	released bool
}

func newTicker() *ticker {
	return &ticker{life: lifecycle.Lifecycle{Name: "ticker"}, quit: make(chan struct{}), done: make(chan struct{})}
}

func (p *ticker) Start(ctx context.Context) error {
	return p.life.Start(ctx, func(context.Context) error {
		go func() {
			defer close(p.done)
			<-p.quit
		}()
		return nil
	})
}

func (p *ticker) Stop(ctx context.Context) error {
	return p.life.Stop(ctx, func(_ context.Context, started bool) error {
		if !started {
			p.released = true
			return nil
		}
		close(p.quit)
		<-p.done
		return nil
	})
}

func TestLifecycle(t *testing.T) {
	lifecycletest.Run(t, "ticker", func(*testing.T) lifecycletest.Part { return newTicker() })
}

// A part stopped before it started releases what it holds, once.
func TestStopBeforeStartReleases(t *testing.T) {
	p := newTicker()
	ctx := context.Background()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if !p.released {
		t.Fatal("not released")
	}
	<-p.life.Stopped()
}

// A Start that fails leaves the part unstarted: it may start again.
func TestFailedStartRetries(t *testing.T) {
	var l lifecycle.Lifecycle
	l.Name = "part"
	ctx := context.Background()
	errNo := errors.New("no")
	if err := l.Start(ctx, func(context.Context) error { return errNo }); !errors.Is(err, errNo) {
		t.Fatalf("failing start: %v", err)
	}
	if err := l.Start(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("start after a failed start: %v", err)
	}
	stopped := false
	if err := l.Stop(ctx, func(_ context.Context, started bool) error { stopped = started; return nil }); err != nil || !stopped {
		t.Fatalf("stop: %v, stopped a started part: %v", err, stopped)
	}
}

// A Stop during Start waits for Start to end and then stops what started;
// Start, asked again meanwhile, is refused with ErrStopped.
func TestStopDuringStart(t *testing.T) {
	var l lifecycle.Lifecycle
	l.Name = "part"
	ctx := context.Background()
	inStart, release := make(chan struct{}), make(chan struct{})
	startErr := make(chan error, 1)
	go func() {
		startErr <- l.Start(ctx, func(context.Context) error {
			close(inStart)
			<-release
			return nil
		})
	}()
	<-inStart
	stopErr := make(chan error, 1)
	var stoppedStarted bool
	stopCalled := make(chan struct{})
	go func() {
		stopErr <- l.Stop(ctx, func(_ context.Context, started bool) error {
			stoppedStarted = started
			close(stopCalled)
			return nil
		})
	}()
	// The Stop is asked (or about to be); once the first start returns
	// it runs. A Start meanwhile is refused, as starting or as stopped.
	if err := l.Start(ctx, func(context.Context) error { return nil }); !errors.Is(err, lifecycle.ErrStarted) && !errors.Is(err, lifecycle.ErrStopped) {
		t.Fatalf("start during start: %v", err)
	}
	close(release)
	if err := <-startErr; err != nil {
		t.Fatal(err)
	}
	if err := <-stopErr; err != nil {
		t.Fatal(err)
	}
	<-stopCalled
	if !stoppedStarted {
		t.Fatal("the stop did not see the part started")
	}
}

// A Stop whose ctx ends hurries the stop in progress, which a later Stop
// waits for.
func TestStopHurries(t *testing.T) {
	var l lifecycle.Lifecycle
	l.Name = "part"
	if err := l.Start(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errSlow := errors.New("hurried")
	stop := func(hurry context.Context, _ bool) error {
		<-hurry.Done()
		return errSlow
	}
	if err := l.Stop(ctx, stop); !errors.Is(err, context.Canceled) {
		t.Fatalf("stop with an ended ctx: %v", err)
	}
	if err := l.Stop(context.Background(), stop); !errors.Is(err, errSlow) {
		t.Fatalf("later stop: %v, want the stop's error", err)
	}
}
