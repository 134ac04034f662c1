package fdbq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/kvtest"
)

// TestStampsUnderFaults: workers accept, heartbeat (alone, several
// in one transaction, heartbeat then finish in one transaction), finish,
// fail, resubmit; an admin cancels, removes, requeues, re-adds and changes
// the type's timeout (hundreds of timeout groups over the run); monitors
// sweep with a clock that runs a long way ahead (so they recycle jobs that
// are being renewed) — all under injected conflicts, too-old,
// commit_unknown_result (applied or not) and delays. After each round, no
// running job may lack its stamp or hold a stamp below its renewal
// (checkStore). At the end, with everything finished, a sweep leaves no
// stamp.
func TestStampsUnderFaults(t *testing.T) {
	secs := 4
	if s, err := strconv.Atoi(os.Getenv("JOBSTAGE_STAMPS_SECONDS")); err == nil {
		secs = s
	}
	ctx := context.Background()
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	base := kv.NewDB(st, kv.Options{})
	fo := kvtest.DefaultFaultOptions(7)
	fo.ConflictRate, fo.UnknownAppliedRate, fo.UnknownNotAppliedRate = 0.05, 0.08, 0.04
	wdb, wfb := kvtest.NewFaultyDB(base, fo)
	mfo := fo
	mfo.Seed = 11
	mdb, mfb := kvtest.NewFaultyDB(base, mfo)
	c := newClock()
	w := fdbq.New(wdb, fdbq.Options{Now: c.Now})
	mq := fdbq.New(mdb, fdbq.Options{Now: c.Now})
	s := fdbq.DefaultTypeSettings()
	s.Retry.MaxAttempts = 1000
	trMust(t, "set type", w.SetType(ctx, base, "email", s))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ops, errs atomic.Int64
	var mu sync.Mutex // around problems
	var problems []string
	note := func(err error) {
		if err == nil {
			ops.Add(1)
			return
		}
		if errors.Is(err, fdbq.ErrHalt) || errors.Is(err, fdbq.ErrNotFound) || errors.Is(err, fdbq.ErrWrongState) {
			return
		}
		var ue *kv.UnknownResultError
		if errors.As(err, &ue) {
			return
		}
		errs.Add(1)
		mu.Lock()
		if len(problems) < 10 {
			problems = append(problems, err.Error())
		}
		mu.Unlock()
	}
	running := func() bool {
		select {
		case <-stop:
			return false
		default:
			return true
		}
	}
	// Producers/admin.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(1, 2))
		n := 0
		for running() {
			n++
			id := fmt.Sprint("j", r.IntN(60))
			switch r.IntN(10) {
			case 0:
				note(w.Cancel(ctx, wdb, "email", id))
			case 1:
				note(w.Remove(ctx, wdb, "email", id))
			case 2:
				note(w.Requeue(ctx, wdb, "email", id))
			case 3:
				s2 := s
				s2.ActivityTimeout = time.Minute + time.Duration(n%400)*time.Millisecond
				note(w.SetType(ctx, wdb, "email", s2))
			default:
				_, err := w.Add(ctx, wdb, fdbq.NewJob{Type: "email", ID: id})
				note(err)
			}
		}
	}()
	// Workers.
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i)+10, 3))
			var held []*fdbq.Lease
			for running() {
				ls, err := w.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1 + r.IntN(4)})
				note(err)
				held = append(held, ls...)
				if len(held) == 0 {
					continue
				}
				k := r.IntN(len(held))
				l := held[k]
				drop := func() { held = append(held[:k], held[k+1:]...) }
				switch r.IntN(8) {
				case 0, 1:
					note(w.Heartbeat(ctx, wdb, l, fdbq.HeartbeatOptions{}))
				case 2:
					// Several renewals and an end in one transaction.
					note(wdb.Transact(ctx, func(tx kv.Tx) error {
						for _, o := range held {
							if err := w.Heartbeat(ctx, tx, o, fdbq.HeartbeatOptions{}); err != nil && !errors.Is(err, fdbq.ErrHalt) {
								return err
							}
						}
						if err := w.Heartbeat(ctx, tx, l, fdbq.HeartbeatOptions{}); err != nil {
							return err
						}
						return w.Finish(ctx, tx, l, nil)
					}))
					drop()
				case 3:
					note(w.Finish(ctx, wdb, l, nil))
					drop()
				case 4:
					note(w.Fail(ctx, wdb, l, "x"))
					drop()
				case 5:
					note(w.Resubmit(ctx, wdb, l, time.Time{}))
					drop()
				case 6:
					drop() // the worker dies
				default:
					note(w.Release(ctx, wdb, []*fdbq.Lease{l}))
					drop()
				}
			}
		}()
	}
	// Monitors: one whose clock runs far ahead (recycles everything it
	// can), one at the real pace.
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := newClock()
			m := fdbq.NewMonitor(mq, fdbq.MonitorOptions{Logger: quietLog, Clock: own.Now})
			for running() {
				if i == 0 {
					own.Advance(1000 * time.Hour)
				} else {
					own.Advance(10 * time.Millisecond)
				}
				_, err := m.Sweep(ctx)
				note(err)
				time.Sleep(time.Millisecond)
			}
		}()
	}
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	for time.Now().Before(deadline) && !t.Failed() {
		time.Sleep(200 * time.Millisecond)
		checkStore(t, base)
	}
	close(stop)
	wg.Wait()
	checkStore(t, base)
	wc, mc := wfb.Counts(), mfb.Counts()
	t.Logf("ops %d, errors %d, faults workers %+v monitor %+v, stamps %d", ops.Load(), errs.Load(), wc, mc, len(stampsOf(t, base, "email")))
	for _, p := range problems {
		t.Logf("error: %s", p)
	}
	// Everything ends: finish what runs, then a sweep leaves no stamp.
	wfb.SetEnabled(false)
	mfb.SetEnabled(false)
	own := newClock()
	m := fdbq.NewMonitor(mq, fdbq.MonitorOptions{Logger: quietLog, Clock: own.Now})
	for range 3 {
		own.Advance(1000 * time.Hour)
		if _, err := m.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	n, err := w.Count(ctx, base, "email", fdbq.Running)
	if err != nil {
		t.Fatal(err)
	}
	if left := stampsOf(t, base, "email"); n == 0 && len(left) > 0 {
		t.Errorf("nothing running, %d stamps left", len(left))
	}
}
