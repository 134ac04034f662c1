// Package lifecycle is the one start/stop primitive of jobstage's
// long-running parts: the activity monitor, the heartbeater, the batch
// finisher, the pipeline and the server. Each embeds a Lifecycle and
// gives its own Start and Stop to it, so they all follow one rule:
//
//   - A part runs once. Start starts it; a second Start, while it runs or
//     after it stopped, fails with ErrStarted or ErrStopped, wrapped with
//     the part's name. A Start that fails leaves the part as it was: it
//     may be started again.
//   - Stop is safe at any time, from any number of goroutines. Before
//     Start it marks the part stopped (a later Start fails with
//     ErrStopped: a shutdown that raced ahead of a start must not be
//     undone by it) and returns nil. On a running part the first Stop
//     begins the stop and every Stop waits for it to end and returns its
//     error. A Stop during Start waits for Start to end, then stops.
//   - Stop returns when the part has stopped or when its ctx ends,
//     whichever is first (ctx's error then). A caller that gives up hurries
//     the stop (see Stop); the stop goes on in the background, and a
//     later Stop waits for it.
//
// Its states:
//
//	        Start             start ok
//	idle ───────────▶ starting ───────▶ running
//	 │ ▲                 │  │             │
//	 │ └── start fails ──┘  │ Stop        │ Stop
//	 │                      ▼             ▼
//	 │ Stop            (stop asked) ──▶ stopping ──▶ stopped
//	 └──────────────────────────────────────────────▶ stopped
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Errors of a refused Start, wrapped with the part's name.
var (
	ErrStarted = errors.New("already started")
	ErrStopped = errors.New("stopped, and a part runs once")
)

type state int

const (
	idle state = iota
	starting
	running
	stopping
	stopped
)

// Lifecycle runs a part's start and stop under the rule of the package.
// Its zero value, with Name set, is ready.
type Lifecycle struct {
	// Name names the part in the errors of a refused Start
	// ("fdbq.Monitor: already started").
	Name string

	mu struct {
		sync.Mutex
		state state
		// stopAsked: a Stop came while starting; stop is its function.
		stopAsked bool
		stop      func(hurry context.Context, started bool) error
		err       error // stop's, once stopped
	}
	once   sync.Once
	done   chan struct{} // closed once stopped
	hurry  context.Context
	hurryF context.CancelFunc
}

func (l *Lifecycle) init() {
	l.once.Do(func() {
		l.done = make(chan struct{})
		l.hurry, l.hurryF = context.WithCancel(context.Background())
	})
}

// Start runs start(ctx) if the part never started and was not stopped,
// else it fails with ErrStarted or ErrStopped. While start runs, Start and
// Stop of other goroutines do not wait for the lock start may take.
func (l *Lifecycle) Start(ctx context.Context, start func(ctx context.Context) error) error {
	l.init()
	l.mu.Lock()
	switch l.mu.state {
	case starting, running:
		if !l.mu.stopAsked {
			l.mu.Unlock()
			return fmt.Errorf("%s: %w", l.Name, ErrStarted)
		}
		fallthrough
	case stopping, stopped:
		l.mu.Unlock()
		return fmt.Errorf("%s: %w", l.Name, ErrStopped)
	}
	l.mu.state = starting
	l.mu.Unlock()

	err := start(ctx)

	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.mu.stopAsked:
		// A Stop came meanwhile and waits: stop what started, or report
		// stopped at once if nothing did.
		l.beginStopLocked(err == nil)
	case err != nil:
		l.mu.state = idle
	default:
		l.mu.state = running
	}
	return err
}

// Stop stops the part with stop and waits, until ctx ends, for it to have
// stopped; see the package's rule. stop runs once whatever the number of
// Stops, in a goroutine of its own: with started true if the part's start
// succeeded, to stop what it started; with started false if the part
// never started, to release what its constructor took (most parts have
// nothing to release: they return nil). Its hurry context is cancelled as
// soon as a Stop's ctx ends: a stop that waits on something (handlers to
// finish, hooks) should then cut it short.
func (l *Lifecycle) Stop(ctx context.Context, stop func(hurry context.Context, started bool) error) error {
	l.init()
	l.mu.Lock()
	switch l.mu.state {
	case idle:
		l.mu.stop = stop
		l.beginStopLocked(false)
	case starting:
		if !l.mu.stopAsked {
			l.mu.stopAsked, l.mu.stop = true, stop
		}
	case running:
		l.mu.stop = stop
		l.beginStopLocked(true)
	}
	l.mu.Unlock()
	select {
	case <-l.done:
		return l.err()
	default:
	}
	select {
	case <-l.done:
		return l.err()
	case <-ctx.Done():
		l.hurryF()
		return ctx.Err()
	}
}

// beginStopLocked runs the stop function in the background and marks the
// part stopped once it returns.
//
// REQUIRES: l.mu is held.
func (l *Lifecycle) beginStopLocked(started bool) {
	l.mu.state = stopping
	stop := l.mu.stop
	go func() {
		err := stop(l.hurry, started)
		l.mu.Lock()
		l.mu.state, l.mu.err = stopped, err
		l.mu.Unlock()
		l.hurryF()
		close(l.done)
	}()
}

func (l *Lifecycle) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.err
}

// Stopped is closed once the part has stopped: its stop returned, or it
// was stopped before it started.
func (l *Lifecycle) Stopped() <-chan struct{} {
	l.init()
	return l.done
}
