// Package lifecycletest checks that a long-running part follows the rule
// of package lifecycle, with one stress test every part's package runs:
//
//	func TestMonitorLifecycle(t *testing.T) {
//		q := newQueue(t)
//		lifecycletest.Run(t, "fdbq.Monitor", func(t *testing.T) lifecycletest.Part {
//			return fdbq.NewMonitor(q, fdbq.MonitorOptions{})
//		})
//	}
//
// Run checks, each on a new part: Stop before Start returns nil and a later
// Start fails with lifecycle.ErrStopped; a second Start fails with
// lifecycle.ErrStarted, naming the part; Stop twice, and from many
// goroutines at once, returns nil; a Stop whose ctx has ended returns, and
// a later Stop waits for the stop; and, many times, goroutines that start
// and stop one part in a random order, after which exactly one Start may
// have succeeded and every Stop returned nil. No goroutine may be left
// behind (go.uber.org/goleak) once the parts are stopped.
//
// The random orders come from a seed, printed when the test fails; set
// LIFECYCLETEST_SEED to it to run the same orders again. Run under -race:
// the interleavings are the point.
package lifecycletest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jobstage/jobstage/internal/lifecycle"
)

// Part is what Run checks: a long-running part's lifecycle.
type Part interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// SeedEnv names the environment variable that replays a failed run.
const SeedEnv = "LIFECYCLETEST_SEED"

// Sizes of the random rounds: parts, goroutines per part, and operations
// per goroutine.
const (
	rounds     = 20
	goroutines = 8
	ops        = 6
)

// hangLimit bounds each call Run makes, so that a part that deadlocks
// fails with the call that hung rather than the test binary's timeout.
// It is a watchdog, not a measure: a correct part returns at once.
const hangLimit = time.Minute

// Run checks the lifecycle of the parts newPart makes; name is what their
// errors must name. newPart runs on the test's goroutine; what the parts
// share (a store, a queue) is made before Run, and what a part starts
// must stop with it. Run uses t.Run for each check.
func Run(t *testing.T, name string, newPart func(t *testing.T) Part) {
	t.Helper()
	seed := seedOf(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("lifecycletest seed: %d (replay with %s=%d)", seed, SeedEnv, seed)
		}
	})
	ignore := goleak.IgnoreCurrent()
	c := &checker{name: name}

	t.Run("StopBeforeStart", func(t *testing.T) {
		p := newPart(t)
		c.stop(t, p, "stop before start")
		c.startFails(t, p, lifecycle.ErrStopped, "start after a stop before start")
		c.stop(t, p, "stop after the refused start")
	})
	t.Run("StartTwice", func(t *testing.T) {
		p := newPart(t)
		c.start(t, p)
		c.startFails(t, p, lifecycle.ErrStarted, "second start")
		c.stop(t, p, "stop")
		c.stop(t, p, "second stop")
		c.startFails(t, p, lifecycle.ErrStopped, "start after stop")
	})
	t.Run("ConcurrentStops", func(t *testing.T) {
		p := newPart(t)
		c.start(t, p)
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() { c.stop(t, p, "concurrent stop") })
		}
		wg.Wait()
	})
	t.Run("StopWithEndedContext", func(t *testing.T) {
		p := newPart(t)
		c.start(t, p)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		// A Stop whose ctx has ended returns (nil if the part stopped at
		// once, else ctx's error), and the stop goes on: the next Stop
		// waits for it.
		if err := c.call(t, "stop with an ended context", func() error { return p.Stop(ctx) }); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("%s: stop with an ended context: %v, want nil or context.Canceled", name, err)
		}
		c.stop(t, p, "stop after the hurried stop")
	})
	t.Run("RandomOrders", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, seed>>1|1))
		for r := range rounds {
			c.randomRound(t, r, newPart(t), rng)
		}
	})
	t.Run("NoLeaks", func(t *testing.T) {
		goleak.VerifyNone(t, ignore)
	})
}

// seedOf returns the seed of the random orders: SeedEnv's, else one from
// the clock.
func seedOf(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(SeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", SeedEnv, s, err)
		}
		seed = v
	}
	return seed
}

type checker struct{ name string }

// randomRound is round r of RandomOrders on the new part p: goroutines,
// each with its own order drawn from rng, start and stop p at once. Each
// Start must succeed or fail with ErrStarted or ErrStopped, and at most
// one may succeed; each Stop must return nil. After them all, a last Stop
// returns nil and a Start fails with ErrStopped.
func (c *checker) randomRound(t *testing.T, r int, p Part, rng *rand.Rand) {
	var started atomic.Int32
	var wg sync.WaitGroup
	for g := range goroutines {
		gr := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		wg.Go(func() {
			for i := range ops {
				if t.Failed() {
					return // one report is enough
				}
				if gr.IntN(2) == 0 {
					err := c.call(t, "start", func() error { return p.Start(context.Background()) })
					switch {
					case err == nil:
						started.Add(1)
					case !errors.Is(err, lifecycle.ErrStarted) && !errors.Is(err, lifecycle.ErrStopped):
						t.Errorf("round %d, goroutine %d, op %d: start: %v, want success, ErrStarted or ErrStopped", r, g, i, err)
					}
				} else {
					c.stop(t, p, fmt.Sprintf("round %d, goroutine %d, op %d: stop", r, g, i))
				}
			}
		})
	}
	wg.Wait()
	if n := started.Load(); n > 1 {
		t.Errorf("round %d: %d starts succeeded on one part", r, n)
	}
	c.stop(t, p, fmt.Sprintf("round %d: final stop", r))
	c.startFails(t, p, lifecycle.ErrStopped, fmt.Sprintf("round %d: start after the final stop", r))
}

// errHung is call's answer for a call that did not return.
var errHung = errors.New("lifecycletest: the call hung")

// call runs f, failing the test if it has not returned within hangLimit.
// It may run on any goroutine.
func (c *checker) call(t *testing.T, what string, f func() error) error {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	select {
	case err := <-ch:
		return err
	case <-time.After(hangLimit):
		t.Errorf("%s: %s has not returned after %v", c.name, what, hangLimit)
		return errHung
	}
}

func (c *checker) start(t *testing.T, p Part) {
	t.Helper()
	if err := c.call(t, "start", func() error { return p.Start(context.Background()) }); err != nil {
		t.Fatalf("%s: start: %v", c.name, err)
	}
}

func (c *checker) stop(t *testing.T, p Part, what string) {
	t.Helper()
	if err := c.call(t, what, func() error { return p.Stop(context.Background()) }); err != nil {
		t.Errorf("%s: %s: %v", c.name, what, err)
	}
}

func (c *checker) startFails(t *testing.T, p Part, want error, what string) {
	t.Helper()
	err := c.call(t, what, func() error { return p.Start(context.Background()) })
	if !errors.Is(err, want) {
		t.Errorf("%s: %s: %v, want %v", c.name, what, err, want)
		return
	}
	if !strings.Contains(err.Error(), c.name) {
		t.Errorf("%s: %s: %q does not name the part", c.name, what, err)
	}
}
