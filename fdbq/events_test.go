package fdbq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/kvtest"
)

// follow is a Follow running in its own goroutine.
type follow struct {
	events chan fdbq.Event
	done   chan error
	cancel context.CancelFunc
	ready  fdbq.Cursor
}

// startFollow starts a Follow and returns once it is ready.
func startFollow(t *testing.T, q *fdbq.Queue, o fdbq.FollowOptions) *follow {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &follow{events: make(chan fdbq.Event, 10000), done: make(chan error, 1), cancel: cancel}
	go func() {
		f.done <- q.Follow(ctx, o, func(e fdbq.Event) error {
			select {
			case f.events <- e:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	t.Cleanup(f.stop)
	e := f.next(t)
	if e.Kind != fdbq.EventReady || e.Cursor.IsZero() {
		t.Fatalf("first event %+v, want ready with a cursor", e)
	}
	f.ready = e.Cursor
	return f
}

// next returns the next event other than idle.
func (f *follow) next(t *testing.T) fdbq.Event {
	t.Helper()
	timer := time.NewTimer(waitBound)
	defer timer.Stop()
	for {
		select {
		case e := <-f.events:
			if e.Kind == fdbq.EventIdle {
				continue
			}
			return e
		case err := <-f.done:
			f.done <- err
			t.Fatalf("follow ended: %v", err)
		case <-timer.C:
			t.Fatalf("no event within %v", waitBound)
		}
	}
}

func (f *follow) stop() {
	f.cancel()
	if err := <-f.done; err != nil && !errors.Is(err, context.Canceled) {
		panic(fmt.Sprintf("follow: %v", err))
	}
	f.done <- nil
}

// expect reads events and checks them against want, "id state[ outcome]"
// each, and that their cursors grow. It returns the last.
func (f *follow) expect(t *testing.T, typ string, want ...string) fdbq.Event {
	t.Helper()
	var last fdbq.Event
	for i, w := range want {
		e := f.next(t)
		got := e.ID + " " + string(e.State)
		if e.Outcome != "" {
			got += " " + string(e.Outcome)
		}
		if e.Kind != fdbq.EventJob || e.Type != typ || got != w {
			t.Fatalf("event %d: %+v (%q), want %s %q", i, e, got, typ, w)
		}
		if !last.Cursor.IsZero() && e.Cursor.String() <= last.Cursor.String() {
			t.Fatalf("event %d: cursor %s after %s", i, e.Cursor, last.Cursor)
		}
		last = e
	}
	return last
}

func TestFollowReportsChanges(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	db := q.DB()
	f := startFollow(t, q, fdbq.FollowOptions{Types: []string{"email"}})

	if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: "a", Data: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 {
		t.Fatalf("accept: %v %v", ls, err)
	}
	if err := q.Finish(ctx, db, ls[0], []byte(`2`)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := q.Remove(ctx, db, "email", "b"); err != nil {
		t.Fatal(err)
	}
	// One transaction, two jobs: two events, in the order written.
	if err := db.Transact(ctx, func(tx kv.Tx) error {
		for _, id := range []string{"c", "d"} {
			if _, err := q.Add(ctx, tx, fdbq.NewJob{Type: "email", ID: id}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	last := f.expect(t, "email", "a pending", "a running", "a finished succeeded", "b pending", "b removed", "c pending", "d pending")
	if last.Attempts != 0 || last.At.IsZero() {
		t.Fatalf("last event %+v", last)
	}
	if c, err := fdbq.ParseCursor(last.Cursor.String()); err != nil || c != last.Cursor {
		t.Fatalf("cursor %s reads back as %s, %v", last.Cursor, c, err)
	}
}

// A change that nobody follows writes no event; following costs a write a
// change only while someone follows.
func TestNoEventsWithoutFollower(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	for i := range 10 {
		if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// A coarse wait holds the change key but keeps no log.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, _ = q.WaitOne(wctx, "email", "0", fdbq.Finished)
	if kvs, err := q.EventLog(ctx, "email"); err != nil || len(kvs) != 0 {
		t.Fatalf("event log without a follower: %d entries, %v", len(kvs), err)
	}
}

// A follower that comes back within the lease finds every change made
// while it was gone, and no reset.
func TestFollowResumesWithoutGap(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	f := startFollow(t, q, fdbq.FollowOptions{Types: []string{"email"}})
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: "a"}); err != nil {
		t.Fatal(err)
	}
	a := f.expect(t, "email", "a pending")
	f.stop()
	for _, id := range []string{"b", "c"} {
		if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	g := startFollow(t, q, fdbq.FollowOptions{Types: []string{"email"}, After: a.Cursor})
	if g.ready != a.Cursor {
		t.Fatalf("ready at %s, want %s", g.ready, a.Cursor)
	}
	g.expect(t, "email", "b pending", "c pending")
}

// A cursor past every change of the store (from another store, or from
// before the store was restored from a backup) would sort after every
// change logged from now on: the follower is reset to the store's present
// and then gets each change.
func TestFollowCursorPastTheStore(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: "a"}); err != nil {
		t.Fatal(err)
	}
	future, err := fdbq.ParseCursor(strings.Repeat("7f", 10) + strings.Repeat("00", 8))
	if err != nil {
		t.Fatal(err)
	}
	f := startFollow(t, q, fdbq.FollowOptions{Types: []string{"email"}, After: future})
	e := f.next(t)
	if e.Kind != fdbq.EventReset || !strings.Contains(e.Reason, "past every change") || e.Cursor.String() >= future.String() {
		t.Fatalf("first event %+v, want a reset to the store's present", e)
	}
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: "b"}); err != nil {
		t.Fatal(err)
	}
	if b := f.expect(t, "email", "b pending"); b.Cursor.String() <= e.Cursor.String() {
		t.Fatalf("event of b at %s, not after the reset's %s", b.Cursor, e.Cursor)
	}
}

// Once nobody followed for longer than the lease, the log was not kept: a
// follower from before is told to read again, and then gets what follows.
func TestFollowResetAfterLogNotKept(t *testing.T) {
	defer fdbq.SetInterestLease(time.Minute)()
	q, c := newQueue(t)
	ctx := context.Background()
	f := startFollow(t, q, fdbq.FollowOptions{Types: []string{"email"}})
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: "a"}); err != nil {
		t.Fatal(err)
	}
	a := f.expect(t, "email", "a pending")
	f.stop()
	c.Advance(3 * time.Minute)
	if _, err := fdbq.NewMonitor(q, fdbq.MonitorOptions{Clock: c.Now}).Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := q.EventsHeld(ctx, "email"); err != nil || n != 0 {
		t.Fatalf("events count %d after the entry expired, %v", n, err)
	}
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: "lost"}); err != nil {
		t.Fatal(err)
	}
	g := startFollow(t, q, fdbq.FollowOptions{Types: []string{"email"}, After: a.Cursor})
	if e := g.next(t); e.Kind != fdbq.EventReset || !strings.Contains(e.Reason, "email") || e.Cursor.String() <= a.Cursor.String() {
		t.Fatalf("after a gap: %+v, want a reset past %s", e, a.Cursor)
	}
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: "b"}); err != nil {
		t.Fatal(err)
	}
	g.expect(t, "email", "b pending")
}

// A monitor trims events past the retention; a follower from before them
// is reset, one after them is not.
func TestFollowTrimmed(t *testing.T) {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	t.Cleanup(func() { db.Close() })
	c := newClock()
	q := fdbq.New(db, fdbq.Options{Now: c.Now, EventRetention: time.Minute})
	ctx := context.Background()
	if err := q.SetType(ctx, db, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	f := startFollow(t, q, fdbq.FollowOptions{Types: []string{"email"}})
	if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: "old"}); err != nil {
		t.Fatal(err)
	}
	old := f.expect(t, "email", "old pending")
	c.Advance(2 * time.Minute)
	if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: "new"}); err != nil {
		t.Fatal(err)
	}
	recent := f.expect(t, "email", "new pending")
	if _, err := fdbq.NewMonitor(q, fdbq.MonitorOptions{Clock: c.Now}).Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if kvs, err := q.EventLog(ctx, "email"); err != nil || len(kvs) != 1 {
		t.Fatalf("%d events left after the trim, want 1 (%v)", len(kvs), err)
	}
	g := startFollow(t, q, fdbq.FollowOptions{Types: []string{"email"}, After: f.ready})
	if e := g.next(t); e.Kind != fdbq.EventReset || e.Cursor != old.Cursor {
		t.Fatalf("from before the trim: %+v, want a reset at %s", e, old.Cursor)
	}
	g.expect(t, "email", "new pending")
	h := startFollow(t, q, fdbq.FollowOptions{Types: []string{"email"}, After: old.Cursor})
	h.expect(t, "email", "new pending")
	if h.ready != old.Cursor || recent.Cursor.String() <= old.Cursor.String() {
		t.Fatalf("cursors %s %s", old.Cursor, recent.Cursor)
	}
}

// Following every type takes in a type registered later: a reset (its log
// begins then), then its events.
func TestFollowAllTypes(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	f := startFollow(t, q, fdbq.FollowOptions{})
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: "a"}); err != nil {
		t.Fatal(err)
	}
	f.expect(t, "email", "a pending")
	if err := q.SetType(ctx, q.DB(), "sms", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	if e := f.next(t); e.Kind != fdbq.EventReset || !strings.Contains(e.Reason, "sms") {
		t.Fatalf("after a new type: %+v, want a reset naming it", e)
	}
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "sms", ID: "s"}); err != nil {
		t.Fatal(err)
	}
	f.expect(t, "sms", "s pending")
}

func TestFollowRefusesBadInput(t *testing.T) {
	q, _ := newQueue(t)
	err := q.Follow(context.Background(), fdbq.FollowOptions{Types: []string{"bad\xff"}}, func(fdbq.Event) error { return nil })
	if !errors.Is(err, fdbq.ErrInvalidJob) {
		t.Fatalf("follow of a bad type name: %v", err)
	}
	var many []string
	for i := range fdbq.MaxFollowTypes + 1 {
		many = append(many, fmt.Sprint("t", i))
	}
	err = q.Follow(context.Background(), fdbq.FollowOptions{Types: many}, func(fdbq.Event) error { return nil })
	if !errors.Is(err, fdbq.ErrTooManyTypes) || !strings.Contains(err.Error(), fmt.Sprint(fdbq.MaxFollowTypes)) {
		t.Fatalf("follow of %d types: %v", len(many), err)
	}
	for _, s := range []string{"x", strings.Repeat("0", 35), strings.Repeat("0", 20) + "8" + strings.Repeat("0", 15), strings.Repeat("g", 36)} {
		if _, err := fdbq.ParseCursor(s); err == nil {
			t.Errorf("ParseCursor(%q) took it", s)
		}
	}
}

// An entry of the log that does not decode is skipped; those after it
// are reported.
func TestFollowSkipsUnreadableEvents(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	f := startFollow(t, q, fdbq.FollowOptions{Types: []string{"email"}})
	for _, v := range [][]byte{nil, []byte("\xff\x00junk"), {0x02, 'a', 0}} {
		if err := q.PutRawEvent(ctx, "email", v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: "a"}); err != nil {
		t.Fatal(err)
	}
	f.expect(t, "email", "a pending")
}

// Through commits that fail, retry, or apply and report that they did not
// (commit_unknown_result), the last event of every job is its state: a
// follower misses no change that committed.
func TestFollowUnderFaults(t *testing.T) {
	seed := jobtest.Seed(t)
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	base := kv.NewDB(st, kv.Options{})
	t.Cleanup(func() { base.Close() })
	fo := kvtest.DefaultFaultOptions(int64(seed))
	fo.UnknownAppliedRate = 0.1
	fdb, fb := kvtest.NewFaultyDB(base, fo)
	q := fdbq.New(fdb, fdbq.Options{})
	ctx := context.Background()
	s := fdbq.DefaultTypeSettings()
	s.Retry.Base = time.Millisecond
	if err := q.SetType(ctx, base, "email", s); err != nil {
		t.Fatal(err)
	}
	f := startFollow(t, fdbq.New(base, fdbq.Options{}), fdbq.FollowOptions{Types: []string{"email"}})

	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			for range 150 {
				id := fmt.Sprint(r.IntN(12))
				switch r.IntN(5) {
				case 0, 1:
					_, _ = q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: id})
				case 2:
					ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 2})
					for _, l := range ls {
						if err == nil && r.IntN(2) == 0 {
							_ = q.Finish(ctx, q.DB(), l, nil)
						} else {
							_ = q.Fail(ctx, q.DB(), l, "no")
						}
					}
				case 3:
					_ = q.Remove(ctx, q.DB(), "email", id)
				case 4:
					_ = q.Requeue(ctx, q.DB(), "email", id)
				}
			}
		}()
	}
	wg.Wait()
	if fb.Counts().UnknownApplied == 0 {
		t.Fatalf("seed %d: no commit applied and reported unknown", seed)
	}
	// Commit order: once the marker's event is in, every change before
	// it is.
	if _, err := q.Add(ctx, base, fdbq.NewJob{Type: "email", ID: "marker"}); err != nil {
		t.Fatal(err)
	}
	last := map[string]fdbq.Event{}
	for {
		e := f.next(t)
		if e.Kind != fdbq.EventJob {
			t.Fatalf("seed %d: %+v", seed, e)
		}
		if e.ID == "marker" {
			break
		}
		last[e.ID] = e
	}
	for i := range 12 {
		id := fmt.Sprint(i)
		j, err := q.Get(ctx, base, "email", id)
		e, seen := last[id]
		switch {
		case errors.Is(err, fdbq.ErrNotFound):
			if seen && e.State != fdbq.Removed {
				t.Errorf("seed %d: job %s is gone, its last event says %s", seed, id, e.State)
			}
		case err != nil:
			t.Fatal(err)
		case !seen || e.State != j.State || e.Outcome != j.Outcome || e.Attempts != j.Attempts:
			t.Errorf("seed %d: job %s is %s %s after %d attempts, its last event %+v", seed, id, j.State, j.Outcome, j.Attempts, e)
		}
	}
}
