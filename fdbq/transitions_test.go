package fdbq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/tuple"
)

// trQ wraps a test queue with assertions on the observable effects of a
// transition: the record, the per-state counts and the index a job is
// listed under.
type trQ struct {
	t   *testing.T
	q   *fdbq.Queue
	c   *clock
	ctx context.Context
}

func newTrQ(t *testing.T) *trQ {
	q, c := newQueue(t)
	holdChanges(t, q, "email")
	return &trQ{t: t, q: q, c: c, ctx: context.Background()}
}

// holdChanges writes an interest entry in typ's change key, as a process
// that watches it does, so that every change to a job of typ bumps it:
// the tests that read the counter to see whether a write happened.
func holdChanges(t *testing.T, q *fdbq.Queue, typ string) {
	t.Helper()
	root := tuple.FromBytes(fdbq.DefaultPrefix)
	if err := q.DB().Transact(context.Background(), func(tx kv.Tx) error {
		tx.Set(root.MustPack(tuple.Tuple{19, typ, "test"}), tuple.Tuple{int64(math.MaxInt64)}.MustPack())
		tx.Add(root.MustPack(tuple.Tuple{18, typ}), 1)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// Keys of the stored layout (doc.go), read directly to prove what was and
// was not written.
func trJobKey(typ, id string) []byte {
	return tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{1, typ, id})
}

func trChangeKey(typ string) []byte {
	return tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{4, typ})
}

func (x *trQ) raw(key []byte) []byte {
	x.t.Helper()
	v, err := kv.ReadTransact(x.ctx, x.q.DB(), func(tx kv.ReadTx) ([]byte, error) { return tx.Get(key) })
	if err != nil {
		x.t.Fatal(err)
	}
	return v
}

// watch returns a watch on key that fires at its next change.
func (x *trQ) watch(key []byte) kv.Watch {
	x.t.Helper()
	w, err := kv.Transact(x.ctx, x.q.DB(), func(tx kv.Tx) (kv.Watch, error) { return tx.Watch(key), nil })
	if err != nil {
		x.t.Fatal(err)
	}
	x.t.Cleanup(w.Cancel)
	return w
}

func trFired(w kv.Watch) bool {
	select {
	case <-w.Ready():
		return true
	default:
		return false
	}
}

func trWaitFired(t *testing.T, w kv.Watch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Wait(ctx); err != nil {
		t.Fatalf("watch did not fire: %v", err)
	}
}

func (x *trQ) add(j fdbq.NewJob) *fdbq.Job {
	x.t.Helper()
	if j.Type == "" {
		j.Type = "email"
	}
	got, err := x.q.Add(x.ctx, x.q.DB(), j)
	if err != nil {
		x.t.Fatalf("add %s: %v", j.ID, err)
	}
	return got
}

func (x *trQ) get(id string) *fdbq.Job {
	x.t.Helper()
	j, err := x.q.Get(x.ctx, x.q.DB(), "email", id)
	if err != nil {
		x.t.Fatalf("get %s: %v", id, err)
	}
	return j
}

func (x *trQ) accept(o fdbq.AcceptOptions) []*fdbq.Lease {
	x.t.Helper()
	ls, err := x.q.Accept(x.ctx, "email", o)
	if err != nil {
		x.t.Fatalf("accept: %v", err)
	}
	return ls
}

// acceptOne accepts exactly one job and checks it is id.
func (x *trQ) acceptOne(id string) *fdbq.Lease {
	x.t.Helper()
	ls := x.accept(fdbq.AcceptOptions{Max: 10})
	if len(ls) != 1 || ls[0].ID != id {
		x.t.Fatalf("accept: want just %s, got %v", id, trLeaseIDs(ls))
	}
	return ls[0]
}

func (x *trQ) acceptNone() {
	x.t.Helper()
	if ls := x.accept(fdbq.AcceptOptions{Max: 10}); len(ls) != 0 {
		x.t.Fatalf("accept: want nothing, got %v", trLeaseIDs(ls))
	}
}

func trLeaseIDs(ls []*fdbq.Lease) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.ID)
	}
	return out
}

// list returns the ids listed under state, page by page.
func (x *trQ) list(state fdbq.State) []string {
	x.t.Helper()
	return trListAll(x.t, x.q, "email", state, 2)
}

func trListAll(t testing.TB, q *fdbq.Queue, typ string, state fdbq.State, limit int) []string {
	t.Helper()
	var out []string
	cursor := ""
	for {
		p, err := q.List(context.Background(), q.DB(), typ, fdbq.ListOptions{State: state, Limit: limit, Cursor: cursor})
		if err != nil {
			t.Fatalf("list %s: %v", state, err)
		}
		for _, j := range p.Jobs {
			if j.State != state {
				t.Fatalf("list %s returned %s in state %s", state, j.ID, j.State)
			}
			out = append(out, j.ID)
		}
		if p.Next == "" {
			return out
		}
		cursor = p.Next
	}
}

func (x *trQ) counts() [3]int64 {
	x.t.Helper()
	var out [3]int64
	for i, s := range []fdbq.State{fdbq.Pending, fdbq.Running, fdbq.Finished} {
		n, err := x.q.Count(x.ctx, x.q.DB(), "email", s)
		if err != nil {
			x.t.Fatal(err)
		}
		out[i] = n
	}
	return out
}

func (x *trQ) wantCounts(pending, running, finished int64) {
	x.t.Helper()
	if got, want := x.counts(), [3]int64{pending, running, finished}; got != want {
		x.t.Fatalf("counts (pending, running, finished) = %v, want %v", got, want)
	}
}

// is checks a job's state, outcome and attempts, and that it is listed
// under its state's index and no other.
func (x *trQ) is(id string, state fdbq.State, outcome fdbq.Outcome, attempts int) *fdbq.Job {
	x.t.Helper()
	j := x.get(id)
	if j.State != state || j.Outcome != outcome || j.Attempts != attempts {
		x.t.Fatalf("%s: state %s outcome %q attempts %d, want %s %q %d", id, j.State, j.Outcome, j.Attempts, state, outcome, attempts)
	}
	if state != fdbq.Finished && (!j.FinishedAt.IsZero() || j.Outcome != "") {
		x.t.Fatalf("%s: %s job has finish time %v, outcome %q", id, state, j.FinishedAt, j.Outcome)
	}
	if state == fdbq.Finished && j.FinishedAt.IsZero() {
		x.t.Fatalf("%s: finished without a finish time", id)
	}
	for _, s := range []fdbq.State{fdbq.Pending, fdbq.Running, fdbq.Finished} {
		if in := slices.Contains(x.list(s), id); in != (s == state) {
			x.t.Fatalf("%s: listed under %s = %v, but its state is %s", id, s, in, state)
		}
	}
	return j
}

func (x *trQ) gone(id string) {
	x.t.Helper()
	if _, err := x.q.Get(x.ctx, x.q.DB(), "email", id); !errors.Is(err, fdbq.ErrNotFound) {
		x.t.Fatalf("get %s: want ErrNotFound, got %v", id, err)
	}
	for _, s := range []fdbq.State{fdbq.Pending, fdbq.Running, fdbq.Finished} {
		if slices.Contains(x.list(s), id) {
			x.t.Fatalf("%s was removed but is still listed under %s", id, s)
		}
	}
}

func trWantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: want %v, got %v", what, target, err)
	}
}

func trMust(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func trJS(s string) json.RawMessage { return json.RawMessage(s) }

func trConstant(d time.Duration, attempts int) *fdbq.RetryPolicy {
	return &fdbq.RetryPolicy{MaxAttempts: attempts, Backoff: fdbq.Constant, Base: d}
}

// --- add ---

func TestTransitionAddNew(t *testing.T) {
	x := newTrQ(t)
	now := x.c.Now()
	sched := now.Add(time.Minute)
	j := x.add(fdbq.NewJob{ID: "a", Data: trJS(`{"to":"x"}`), ScheduledAt: sched, Priority: 3, MaxAttempts: 2})
	if j.State != fdbq.Pending || j.Attempts != 0 || j.Priority != 3 || j.MaxAttempts != 2 ||
		!j.AddedAt.Equal(now) || !j.ScheduledAt.Equal(sched) || string(j.Data) != `{"to":"x"}` || j.Type != "email" || j.ID != "a" {
		t.Fatalf("added job: %+v", j)
	}
	got := x.is("a", fdbq.Pending, "", 0)
	if !got.ScheduledAt.Equal(sched) || string(got.Data) != `{"to":"x"}` || !got.AddedAt.Equal(now) || !got.StartedAt.IsZero() {
		t.Fatalf("stored job: %+v", got)
	}
	x.wantCounts(1, 0, 0)
	x.acceptNone() // not due
	x.c.Advance(time.Minute)
	x.acceptOne("a")

	// No id: one is made, and the job is found under it.
	g := x.add(fdbq.NewJob{})
	if len(g.ID) != 32 {
		t.Fatalf("generated id %q", g.ID)
	}
	if x.get(g.ID).State != fdbq.Pending || string(x.get(g.ID).Data) != "" {
		t.Fatalf("job with a generated id: %+v", x.get(g.ID))
	}
	if h := x.add(fdbq.NewJob{}); h.ID == g.ID {
		t.Fatal("two adds without id made the same id")
	}
	x.wantCounts(2, 1, 0)
}

func TestTransitionAddPendingReschedules(t *testing.T) {
	x := newTrQ(t)
	t0 := x.c.Now()
	x.add(fdbq.NewJob{ID: "a", Data: trJS(`1`)})
	x.c.Advance(time.Second)
	later := t0.Add(time.Hour)
	w := x.watch(trChangeKey("email"))
	j := x.add(fdbq.NewJob{ID: "a", Data: trJS(`2`), ScheduledAt: later, Priority: 1})
	if !j.ScheduledAt.Equal(later) || string(j.Data) != `2` || j.Priority != 1 {
		t.Fatalf("resubmitted: %+v", j)
	}
	trWaitFired(t, w)
	got := x.is("a", fdbq.Pending, "", 0)
	if !got.ScheduledAt.Equal(later) || string(got.Data) != `2` || !got.AddedAt.Equal(t0) || got.Priority != 1 {
		t.Fatalf("stored: %+v", got)
	}
	if ids := x.list(fdbq.Pending); len(ids) != 1 {
		t.Fatalf("pending index has %v: the old entry was left behind", ids)
	}
	x.wantCounts(1, 0, 0)
	// The old, due, index entry is gone: nothing is accepted before the
	// new time.
	x.acceptNone()
	x.c.Advance(time.Hour)
	if l := x.acceptOne("a"); string(l.Data) != `2` {
		t.Fatalf("accepted data %s", l.Data)
	}
}

func TestTransitionAddPendingUnchangedWritesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
	}{
		{"compact", `{"to":"x","n":[1,2]}`},
		{"spaced", `{"to": "x", "n": [1, 2]}`},
		{"html", `{"body":"<b>&</b>"}`},
		{"none", ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newTrQ(t)
			sched := x.c.Now().Add(time.Minute)
			nj := fdbq.NewJob{ID: "a", Data: trJS(tc.data), ScheduledAt: sched, Priority: 2, Retry: trConstant(time.Second, 3)}
			first := x.add(nj)
			rawBefore, changeBefore := x.raw(trJobKey("email", "a")), x.raw(trChangeKey("email"))
			w := x.watch(trChangeKey("email"))
			wj := x.watch(trJobKey("email", "a"))
			x.c.Advance(time.Second)

			if got := x.get("a"); string(got.Data) != string(first.Data) {
				t.Fatalf("add returned data %s, the store holds %s", first.Data, got.Data)
			}
			again := x.add(nj)
			if string(again.Data) != string(first.Data) || !again.ScheduledAt.Equal(first.ScheduledAt) {
				t.Fatalf("resubmit returned %+v, first add %+v", again, first)
			}
			if got := x.raw(trJobKey("email", "a")); !bytes.Equal(got, rawBefore) {
				t.Fatalf("record rewritten:\n%s\n%s", rawBefore, got)
			}
			if got := x.raw(trChangeKey("email")); !bytes.Equal(got, changeBefore) {
				t.Fatalf("change counter moved from %d to %d: a write happened", kv.DecodeInt64(changeBefore), kv.DecodeInt64(got))
			}
			if trFired(w) || trFired(wj) {
				t.Fatal("a watch fired on a resubmit that changed nothing")
			}
			x.wantCounts(1, 0, 0)

			// A real change is written and seen.
			nj.ScheduledAt = sched.Add(time.Second)
			x.add(nj)
			trWaitFired(t, w)
			trWaitFired(t, wj)
			if kv.DecodeInt64(x.raw(trChangeKey("email"))) == kv.DecodeInt64(changeBefore) {
				t.Fatal("change counter did not move on a real change")
			}
		})
	}
}

func TestTransitionAddRunning(t *testing.T) {
	for _, end := range []string{"finish", "fail", "recycle", "release"} {
		t.Run(end, func(t *testing.T) {
			x := newTrQ(t)
			x.add(fdbq.NewJob{ID: "a", Data: trJS(`"old"`), Retry: trConstant(time.Second, 1)})
			l := x.acceptOne("a")
			at := x.c.Now().Add(10 * time.Minute)
			j := x.add(fdbq.NewJob{ID: "a", Data: trJS(`"new"`), ScheduledAt: at})
			if j.State != fdbq.Running || !j.Resubmitted {
				t.Fatalf("add on running: %+v", j)
			}
			got := x.is("a", fdbq.Running, "", 1)
			if !got.Resubmitted || string(got.Data) != `"old"` {
				t.Fatalf("running job after add: resubmitted %v data %s", got.Resubmitted, got.Data)
			}
			x.wantCounts(0, 1, 0)

			// The same resubmit again writes nothing.
			before := x.raw(trChangeKey("email"))
			x.add(fdbq.NewJob{ID: "a", Data: trJS(`"new"`), ScheduledAt: at})
			if !bytes.Equal(before, x.raw(trChangeKey("email"))) {
				t.Fatal("repeated resubmit of a running job wrote")
			}
			// The worker is not disturbed by the flag.
			trMust(t, "heartbeat", x.q.Heartbeat(x.ctx, x.q.DB(), l, fdbq.HeartbeatOptions{}))

			switch end {
			case "finish":
				trMust(t, "finish", x.q.Finish(x.ctx, x.q.DB(), l, trJS(`"r"`)))
			case "fail":
				// The retry policy allows one attempt: without the flag
				// the job would finish failed.
				trMust(t, "fail", x.q.Fail(x.ctx, x.q.DB(), l, "boom"))
			case "recycle":
				x.c.Advance(fdbq.DefaultActivityTimeout + time.Millisecond)
				st, err := staleSweep(x.ctx, x.q, fdbq.MonitorOptions{})
				trMust(t, "sweep", err)
				if st.Recycled != 1 || st.Failed != 0 {
					t.Fatalf("sweep: %+v", st)
				}
			case "release":
				// Handing the job back unstarted must not lose the
				// resubmit: it goes to the time the add asked for.
				trMust(t, "release", x.q.Release(x.ctx, x.q.DB(), []*fdbq.Lease{l}))
			}
			got = x.is("a", fdbq.Pending, "", 0)
			if !got.ScheduledAt.Equal(at) || got.Resubmitted || string(got.Data) != `"old"` {
				t.Fatalf("after %s: %+v", end, got)
			}
			x.wantCounts(1, 0, 0)
			trWantErr(t, "heartbeat of the old lease", x.q.Heartbeat(x.ctx, x.q.DB(), l, fdbq.HeartbeatOptions{}), fdbq.ErrHalt)
			x.acceptNone()
			x.c.Advance(at.Sub(x.c.Now()))
			if l2 := x.acceptOne("a"); l2.Attempts != 1 {
				t.Fatalf("attempts after resubmitted run: %d", l2.Attempts)
			}
		})
	}
}

func TestTransitionAddFinished(t *testing.T) {
	for _, outcome := range []fdbq.Outcome{fdbq.Succeeded, fdbq.Failed, fdbq.Canceled} {
		t.Run(string(outcome), func(t *testing.T) {
			x := newTrQ(t)
			x.add(fdbq.NewJob{ID: "a", Data: trJS(`1`), MaxAttempts: 1})
			l := x.acceptOne("a")
			switch outcome {
			case fdbq.Succeeded:
				trMust(t, "finish", x.q.Finish(x.ctx, x.q.DB(), l, trJS(`"done"`)))
			case fdbq.Failed:
				trMust(t, "fail", x.q.Fail(x.ctx, x.q.DB(), l, "boom"))
			case fdbq.Canceled:
				trMust(t, "cancel", x.q.Cancel(x.ctx, x.q.DB(), "email", "a"))
			}
			x.is("a", fdbq.Finished, outcome, 1)
			x.wantCounts(0, 0, 1)

			x.c.Advance(time.Second)
			j := x.add(fdbq.NewJob{ID: "a", Data: trJS(`2`)})
			if j.State != fdbq.Pending || j.Attempts != 0 {
				t.Fatalf("re-added: %+v", j)
			}
			got := x.is("a", fdbq.Pending, "", 0)
			if string(got.Data) != `2` || got.Result != nil || got.Error != "" || !got.AddedAt.Equal(x.c.Now()) || !got.FinishedAt.IsZero() {
				t.Fatalf("re-added job kept its old life: %+v", got)
			}
			x.wantCounts(1, 0, 0)
			trWantErr(t, "finish by the first lease", x.q.Finish(x.ctx, x.q.DB(), l, nil), fdbq.ErrHalt)
			if l2 := x.acceptOne("a"); l2.Attempts != 1 || string(l2.Data) != `2` {
				t.Fatalf("accepted again: %+v", l2)
			}
		})
	}
}

// --- accept ---

func TestTransitionAccept(t *testing.T) {
	x := newTrQ(t)
	now := x.c.Now()
	x.add(fdbq.NewJob{ID: "low-early", ScheduledAt: now.Add(-2 * time.Second)})
	x.add(fdbq.NewJob{ID: "low-late", ScheduledAt: now.Add(-time.Second)})
	x.add(fdbq.NewJob{ID: "high-late", Priority: 5, ScheduledAt: now})
	x.add(fdbq.NewJob{ID: "high-early", Priority: 5, ScheduledAt: now.Add(-time.Second)})
	x.add(fdbq.NewJob{ID: "neg", Priority: -1, ScheduledAt: now.Add(-time.Hour)})
	x.add(fdbq.NewJob{ID: "future", Priority: 9, ScheduledAt: now.Add(time.Hour)})
	x.wantCounts(6, 0, 0)

	ls := x.accept(fdbq.AcceptOptions{Max: 3, Window: 3})
	if got, want := trLeaseIDs(ls), []string{"high-early", "high-late", "low-early"}; !slices.Equal(got, want) {
		t.Fatalf("accepted %v, want %v", got, want)
	}
	for _, l := range ls {
		if l.State != fdbq.Running || l.Attempts != 1 || l.Lock == "" || !l.StartedAt.Equal(now) || !l.HeartbeatAt.Equal(now) {
			t.Fatalf("lease %+v", l)
		}
		x.is(l.ID, fdbq.Running, "", 1)
	}
	if ls[0].Lock != ls[1].Lock {
		t.Fatal("one accept should hold its jobs under one lock")
	}
	x.wantCounts(3, 3, 0)

	ls = x.accept(fdbq.AcceptOptions{Max: 10, Window: 10})
	if got, want := trLeaseIDs(ls), []string{"low-late", "neg"}; !slices.Equal(got, want) {
		t.Fatalf("accepted %v, want %v", got, want)
	}
	x.acceptNone()
	// MaxScheduledAt reaches into the future.
	ls = x.accept(fdbq.AcceptOptions{MaxScheduledAt: now.Add(time.Hour)})
	if got := trLeaseIDs(ls); !slices.Equal(got, []string{"future"}) {
		t.Fatalf("accept with MaxScheduledAt: %v", got)
	}
	x.wantCounts(0, 6, 0)
}

// --- heartbeat ---

func TestTransitionHeartbeat(t *testing.T) {
	x := newTrQ(t)
	x.add(fdbq.NewJob{ID: "a", Data: trJS(`{"step":0}`)})
	l := x.acceptOne("a")
	x.c.Advance(20 * time.Second)
	trMust(t, "heartbeat", x.q.Heartbeat(x.ctx, x.q.DB(), l, fdbq.HeartbeatOptions{Data: trJS(`{"step":1}`), Progress: trJS(`50`)}))
	j := x.is("a", fdbq.Running, "", 1)
	if !j.HeartbeatAt.Equal(x.c.Now()) || string(j.Data) != `{"step":1}` || string(j.Progress) != `50` {
		t.Fatalf("after heartbeat: %+v", j)
	}
	// An empty heartbeat keeps data and progress.
	trMust(t, "heartbeat", x.q.Heartbeat(x.ctx, x.q.DB(), l, fdbq.HeartbeatOptions{}))
	if j := x.get("a"); string(j.Data) != `{"step":1}` || string(j.Progress) != `50` {
		t.Fatalf("empty heartbeat changed the job: %+v", j)
	}

	// The lease is renewed: a monitor that saw the job 20 s before a
	// heartbeat, and sweeps 20 s after it, leaves it alone; one timeout
	// after it saw the heartbeat, it takes the job back.
	m := fdbq.NewMonitor(x.q, fdbq.MonitorOptions{Clock: x.c.Now})
	if st, err := m.Sweep(x.ctx); err != nil || st.Recycled != 0 {
		t.Fatalf("first sweep: %+v %v", st, err)
	}
	x.c.Advance(20 * time.Second)
	trMust(t, "heartbeat", x.q.Heartbeat(x.ctx, x.q.DB(), l, fdbq.HeartbeatOptions{}))
	if st, err := m.Sweep(x.ctx); err != nil || st.Recycled != 0 {
		t.Fatalf("sweep after the heartbeat: %+v %v", st, err)
	}
	x.c.Advance(20 * time.Second)
	if st, err := m.Sweep(x.ctx); err != nil || st.Recycled != 0 {
		t.Fatalf("sweep 40 s after the first, 20 s after the heartbeat: %+v %v", st, err)
	}
	x.is("a", fdbq.Running, "", 1)
	x.c.Advance(fdbq.DefaultActivityTimeout - 20*time.Second)
	if st, err := m.Sweep(x.ctx); err != nil || st.Recycled != 1 {
		t.Fatalf("sweep a timeout after the one that saw the heartbeat: %+v %v", st, err)
	}
	j = x.is("a", fdbq.Pending, "", 1)
	if !strings.Contains(j.Error, "activity timeout") {
		t.Fatalf("recycled job's error: %q", j.Error)
	}
	trWantErr(t, "heartbeat after recycle", x.q.Heartbeat(x.ctx, x.q.DB(), l, fdbq.HeartbeatOptions{}), fdbq.ErrHalt)
}

func TestTransitionHeartbeatHalts(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(x *trQ, l *fdbq.Lease)
	}{
		{"cancel", func(x *trQ, l *fdbq.Lease) { trMust(x.t, "cancel", x.q.Cancel(x.ctx, x.q.DB(), "email", l.ID)) }},
		{"remove", func(x *trQ, l *fdbq.Lease) { trMust(x.t, "remove", x.q.Remove(x.ctx, x.q.DB(), "email", l.ID)) }},
		{"recycle", func(x *trQ, l *fdbq.Lease) {
			x.c.Advance(fdbq.DefaultActivityTimeout + time.Millisecond)
			_, err := staleSweep(x.ctx, x.q, fdbq.MonitorOptions{})
			trMust(x.t, "sweep", err)
		}},
		{"recycle and re-accept", func(x *trQ, l *fdbq.Lease) {
			x.c.Advance(fdbq.DefaultActivityTimeout + time.Millisecond)
			_, err := staleSweep(x.ctx, x.q, fdbq.MonitorOptions{})
			trMust(x.t, "sweep", err)
			x.c.Advance(time.Hour)
			x.acceptOne(l.ID)
		}},
		{"finish", func(x *trQ, l *fdbq.Lease) { trMust(x.t, "finish", x.q.Finish(x.ctx, x.q.DB(), l, nil)) }},
		{"resubmit", func(x *trQ, l *fdbq.Lease) { trMust(x.t, "resubmit", x.q.Resubmit(x.ctx, x.q.DB(), l, time.Time{})) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newTrQ(t)
			x.add(fdbq.NewJob{ID: "a", Data: trJS(`1`)})
			l := x.acceptOne("a")
			tc.do(x, l)
			var before []byte
			if j, err := x.q.Get(x.ctx, x.q.DB(), "email", "a"); err == nil {
				before, _ = json.Marshal(j)
			}
			err := x.q.Heartbeat(x.ctx, x.q.DB(), l, fdbq.HeartbeatOptions{Data: trJS(`2`)})
			trWantErr(t, "heartbeat", err, fdbq.ErrHalt)
			if !strings.Contains(err.Error(), "email/a") {
				t.Fatalf("halt error does not name the job: %v", err)
			}
			var after []byte
			if j, err := x.q.Get(x.ctx, x.q.DB(), "email", "a"); err == nil {
				after, _ = json.Marshal(j)
			}
			if !bytes.Equal(before, after) {
				t.Fatalf("a halted heartbeat changed the job:\n%s\n%s", before, after)
			}
		})
	}
}

// --- finish ---

func TestTransitionFinish(t *testing.T) {
	x := newTrQ(t)
	x.add(fdbq.NewJob{ID: "a", Data: trJS(`1`)})
	l := x.acceptOne("a")
	x.c.Advance(time.Second)
	trMust(t, "finish", x.q.Finish(x.ctx, x.q.DB(), l, trJS(`{"ok":true}`)))
	j := x.is("a", fdbq.Finished, fdbq.Succeeded, 1)
	if string(j.Result) != `{"ok":true}` || !j.FinishedAt.Equal(x.c.Now()) || string(j.Data) != `1` {
		t.Fatalf("finished: %+v", j)
	}
	x.wantCounts(0, 0, 1)

	// The same lease finishing again is a retry: nil, and nothing written.
	before := x.raw(trChangeKey("email"))
	trMust(t, "second finish", x.q.Finish(x.ctx, x.q.DB(), l, trJS(`{"ok":false}`)))
	if !bytes.Equal(before, x.raw(trChangeKey("email"))) {
		t.Fatal("second finish wrote")
	}
	if j := x.get("a"); string(j.Result) != `{"ok":true}` {
		t.Fatalf("second finish replaced the result: %s", j.Result)
	}
	// Other exits by the finished lease halt.
	trWantErr(t, "fail after finish", x.q.Fail(x.ctx, x.q.DB(), l, "x"), fdbq.ErrHalt)
	trWantErr(t, "resubmit after finish", x.q.Resubmit(x.ctx, x.q.DB(), l, time.Time{}), fdbq.ErrHalt)
	x.wantCounts(0, 0, 1)
}

func TestTransitionFinishStaleLease(t *testing.T) {
	x := newTrQ(t)
	x.add(fdbq.NewJob{ID: "a", Retry: trConstant(time.Second, 5)})
	old := x.acceptOne("a")
	x.c.Advance(fdbq.DefaultActivityTimeout + time.Millisecond)
	_, err := staleSweep(x.ctx, x.q, fdbq.MonitorOptions{})
	trMust(t, "sweep", err)
	x.c.Advance(time.Second)
	cur := x.acceptOne("a")
	if cur.Attempts != 2 || cur.Lock == old.Lock {
		t.Fatalf("re-accepted: %+v", cur)
	}
	trWantErr(t, "finish by the stale lease", x.q.Finish(x.ctx, x.q.DB(), old, trJS(`"stale"`)), fdbq.ErrHalt)
	trWantErr(t, "fail by the stale lease", x.q.Fail(x.ctx, x.q.DB(), old, "stale"), fdbq.ErrHalt)
	trWantErr(t, "resubmit by the stale lease", x.q.Resubmit(x.ctx, x.q.DB(), old, time.Time{}), fdbq.ErrHalt)
	trMust(t, "release by the stale lease", x.q.Release(x.ctx, x.q.DB(), []*fdbq.Lease{old}))
	// The current holder is untouched.
	j := x.is("a", fdbq.Running, "", 2)
	if j.Result != nil {
		t.Fatalf("stale finish left a result: %s", j.Result)
	}
	trMust(t, "finish by the holder", x.q.Finish(x.ctx, x.q.DB(), cur, trJS(`"fresh"`)))
	if j := x.is("a", fdbq.Finished, fdbq.Succeeded, 2); string(j.Result) != `"fresh"` {
		t.Fatalf("result %s", j.Result)
	}
}

// --- fail ---

func TestTransitionFailRetries(t *testing.T) {
	t.Run("trConstant", func(t *testing.T) {
		x := newTrQ(t)
		x.add(fdbq.NewJob{ID: "a", Retry: trConstant(10*time.Second, 3)})
		l := x.acceptOne("a")
		trMust(t, "fail", x.q.Fail(x.ctx, x.q.DB(), l, "boom 1"))
		j := x.is("a", fdbq.Pending, "", 1)
		if j.Error != "boom 1" || !j.ScheduledAt.Equal(x.c.Now().Add(10*time.Second)) {
			t.Fatalf("failed once: %+v", j)
		}
		x.wantCounts(1, 0, 0)
		x.c.Advance(10*time.Second - time.Millisecond)
		x.acceptNone()
		x.c.Advance(time.Millisecond)
		if l = x.acceptOne("a"); l.Attempts != 2 {
			t.Fatalf("second attempt: %d", l.Attempts)
		}
		trMust(t, "fail", x.q.Fail(x.ctx, x.q.DB(), l, "boom 2"))
		x.c.Advance(10 * time.Second)
		l = x.acceptOne("a")
		trMust(t, "fail", x.q.Fail(x.ctx, x.q.DB(), l, "boom 3"))
		j = x.is("a", fdbq.Finished, fdbq.Failed, 3)
		if j.Error != "boom 3" || !j.FinishedAt.Equal(x.c.Now()) {
			t.Fatalf("failed for good: %+v", j)
		}
		x.wantCounts(0, 0, 1)
		x.c.Advance(time.Hour)
		x.acceptNone()
		// Failing again with the same lease is a retry of the last fail.
		trMust(t, "second fail", x.q.Fail(x.ctx, x.q.DB(), l, "boom 3"))
		x.is("a", fdbq.Finished, fdbq.Failed, 3)
	})
	t.Run("exponential default", func(t *testing.T) {
		// The type's policy: exponential from 1 s with jitter, so the
		// first retry comes between 0.5 s and 1 s later.
		x := newTrQ(t)
		x.add(fdbq.NewJob{ID: "a"})
		trMust(t, "fail", x.q.Fail(x.ctx, x.q.DB(), x.acceptOne("a"), "boom"))
		x.c.Advance(500*time.Millisecond - time.Millisecond)
		x.acceptNone()
		x.c.Advance(500*time.Millisecond + time.Millisecond)
		x.acceptOne("a")
	})
	t.Run("linear with cap", func(t *testing.T) {
		x := newTrQ(t)
		x.add(fdbq.NewJob{ID: "a", Retry: &fdbq.RetryPolicy{MaxAttempts: 9, Backoff: fdbq.Linear, Base: time.Minute, Max: 150 * time.Second}})
		for attempt, delay := range []time.Duration{time.Minute, 2 * time.Minute, 150 * time.Second, 150 * time.Second} {
			trMust(t, "fail", x.q.Fail(x.ctx, x.q.DB(), x.acceptOne("a"), "boom"))
			if j := x.get("a"); !j.ScheduledAt.Equal(x.c.Now().Add(delay)) {
				t.Fatalf("after attempt %d: scheduled %v after now, want %v", attempt+1, j.ScheduledAt.Sub(x.c.Now()), delay)
			}
			x.c.Advance(delay)
		}
	})
}

func TestTransitionFailOverrides(t *testing.T) {
	for _, tc := range []struct {
		name     string
		job      fdbq.NewJob
		attempts int // attempts before the job finishes failed
	}{
		{"type default", fdbq.NewJob{}, fdbq.DefaultMaxAttempts},
		{"job max attempts", fdbq.NewJob{MaxAttempts: 2}, 2},
		{"job retry policy", fdbq.NewJob{Retry: trConstant(time.Second, 3)}, 3},
		{"max attempts over retry policy", fdbq.NewJob{MaxAttempts: 4, Retry: trConstant(time.Second, 1)}, 4},
		{"one attempt", fdbq.NewJob{MaxAttempts: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newTrQ(t)
			tc.job.ID = "a"
			x.add(tc.job)
			for i := 1; i <= tc.attempts; i++ {
				l := x.acceptOne("a")
				if l.Attempts != i {
					t.Fatalf("attempt %d: lease says %d", i, l.Attempts)
				}
				trMust(t, "fail", x.q.Fail(x.ctx, x.q.DB(), l, "boom"))
				if i < tc.attempts {
					x.is("a", fdbq.Pending, "", i)
					x.c.Advance(time.Hour)
				}
			}
			x.is("a", fdbq.Finished, fdbq.Failed, tc.attempts)
			x.wantCounts(0, 0, 1)
		})
	}
}

// --- resubmit and release by the worker ---

func TestTransitionResubmitByWorker(t *testing.T) {
	x := newTrQ(t)
	x.add(fdbq.NewJob{ID: "a", Data: trJS(`1`), MaxAttempts: 1})
	l := x.acceptOne("a")
	at := x.c.Now().Add(5 * time.Minute)
	trMust(t, "resubmit", x.q.Resubmit(x.ctx, x.q.DB(), l, at))
	j := x.is("a", fdbq.Pending, "", 0)
	if !j.ScheduledAt.Equal(at) || j.Error != "" {
		t.Fatalf("resubmitted: %+v", j)
	}
	x.wantCounts(1, 0, 0)
	trMust(t, "resubmit again", x.q.Resubmit(x.ctx, x.q.DB(), l, at))
	trWantErr(t, "finish after resubmit", x.q.Finish(x.ctx, x.q.DB(), l, nil), fdbq.ErrHalt)
	x.acceptNone()
	x.c.Advance(5 * time.Minute)
	// The snoozed attempt did not count: the one allowed attempt is left.
	l = x.acceptOne("a")
	if l.Attempts != 1 {
		t.Fatalf("attempts %d", l.Attempts)
	}
	trMust(t, "resubmit now", x.q.Resubmit(x.ctx, x.q.DB(), l, time.Time{}))
	if j := x.is("a", fdbq.Pending, "", 0); !j.ScheduledAt.Equal(x.c.Now()) {
		t.Fatalf("resubmit with zero time: scheduled %v, now %v", j.ScheduledAt, x.c.Now())
	}
	x.acceptOne("a")
}

func TestTransitionRelease(t *testing.T) {
	x := newTrQ(t)
	now := x.c.Now()
	for i, id := range []string{"a", "b", "c"} {
		x.add(fdbq.NewJob{ID: id, ScheduledAt: now.Add(time.Duration(i-3) * time.Second)})
	}
	ls := x.accept(fdbq.AcceptOptions{Max: 3, Window: 3})
	if len(ls) != 3 {
		t.Fatalf("accepted %v", trLeaseIDs(ls))
	}
	trMust(t, "cancel c", x.q.Cancel(x.ctx, x.q.DB(), "email", "c"))
	x.c.Advance(time.Second)
	trMust(t, "release", x.q.Release(x.ctx, x.q.DB(), []*fdbq.Lease{ls[0], ls[2]}))
	j := x.is("a", fdbq.Pending, "", 0)
	if !j.ScheduledAt.Equal(now.Add(-3 * time.Second)) {
		t.Fatalf("released job was rescheduled: %v", j.ScheduledAt)
	}
	x.is("b", fdbq.Running, "", 1)
	x.is("c", fdbq.Finished, fdbq.Canceled, 1) // a canceled job is not given back
	x.wantCounts(1, 1, 1)
	trMust(t, "release again", x.q.Release(x.ctx, x.q.DB(), []*fdbq.Lease{ls[0]}))
	x.wantCounts(1, 1, 1)
	if l := x.acceptOne("a"); l.Attempts != 1 {
		t.Fatalf("attempts after release: %d", l.Attempts)
	}
}

// --- cancel, remove, requeue ---

func TestTransitionCancel(t *testing.T) {
	t.Run("pending", func(t *testing.T) {
		x := newTrQ(t)
		x.add(fdbq.NewJob{ID: "a"})
		x.c.Advance(time.Second)
		trMust(t, "cancel", x.q.Cancel(x.ctx, x.q.DB(), "email", "a"))
		if j := x.is("a", fdbq.Finished, fdbq.Canceled, 0); !j.FinishedAt.Equal(x.c.Now()) {
			t.Fatalf("finish time %v", j.FinishedAt)
		}
		x.wantCounts(0, 0, 1)
		x.acceptNone()
	})
	t.Run("running", func(t *testing.T) {
		x := newTrQ(t)
		x.add(fdbq.NewJob{ID: "a"})
		l := x.acceptOne("a")
		trMust(t, "cancel", x.q.Cancel(x.ctx, x.q.DB(), "email", "a"))
		x.is("a", fdbq.Finished, fdbq.Canceled, 1)
		x.wantCounts(0, 0, 1)
		trWantErr(t, "heartbeat", x.q.Heartbeat(x.ctx, x.q.DB(), l, fdbq.HeartbeatOptions{}), fdbq.ErrHalt)
		trWantErr(t, "finish", x.q.Finish(x.ctx, x.q.DB(), l, trJS(`1`)), fdbq.ErrHalt)
		trWantErr(t, "fail", x.q.Fail(x.ctx, x.q.DB(), l, "x"), fdbq.ErrHalt)
		trWantErr(t, "resubmit", x.q.Resubmit(x.ctx, x.q.DB(), l, time.Time{}), fdbq.ErrHalt)
		if j := x.is("a", fdbq.Finished, fdbq.Canceled, 1); j.Result != nil {
			t.Fatalf("result %s", j.Result)
		}
		// The monitor has nothing to recycle.
		x.c.Advance(time.Hour)
		if st, err := staleSweep(x.ctx, x.q, fdbq.MonitorOptions{}); err != nil || st.Recycled != 0 {
			t.Fatalf("sweep: %+v %v", st, err)
		}
	})
	t.Run("finished", func(t *testing.T) {
		x := newTrQ(t)
		x.add(fdbq.NewJob{ID: "a"})
		trMust(t, "finish", x.q.Finish(x.ctx, x.q.DB(), x.acceptOne("a"), nil))
		err := x.q.Cancel(x.ctx, x.q.DB(), "email", "a")
		trWantErr(t, "cancel succeeded", err, fdbq.ErrWrongState)
		x.is("a", fdbq.Finished, fdbq.Succeeded, 1)
		x.add(fdbq.NewJob{ID: "b"})
		trMust(t, "cancel b", x.q.Cancel(x.ctx, x.q.DB(), "email", "b"))
		trWantErr(t, "cancel canceled", x.q.Cancel(x.ctx, x.q.DB(), "email", "b"), fdbq.ErrWrongState)
		x.wantCounts(0, 0, 2)
	})
	t.Run("missing", func(t *testing.T) {
		x := newTrQ(t)
		trWantErr(t, "cancel", x.q.Cancel(x.ctx, x.q.DB(), "email", "nope"), fdbq.ErrNotFound)
	})
}

func TestTransitionRemove(t *testing.T) {
	for _, state := range []fdbq.State{fdbq.Pending, fdbq.Running, fdbq.Finished} {
		t.Run(string(state), func(t *testing.T) {
			x := newTrQ(t)
			x.add(fdbq.NewJob{ID: "a"})
			x.add(fdbq.NewJob{ID: "keep", ScheduledAt: x.c.Now().Add(time.Hour)})
			var l *fdbq.Lease
			if state != fdbq.Pending {
				l = x.acceptOne("a")
			}
			if state == fdbq.Finished {
				trMust(t, "finish", x.q.Finish(x.ctx, x.q.DB(), l, nil))
			}
			x.is("a", state, x.get("a").Outcome, 1-trBtoi(state == fdbq.Pending))
			trMust(t, "remove", x.q.Remove(x.ctx, x.q.DB(), "email", "a"))
			x.gone("a")
			x.wantCounts(1, 0, 0)
			x.acceptNone()
			if state == fdbq.Running {
				err := x.q.Heartbeat(x.ctx, x.q.DB(), l, fdbq.HeartbeatOptions{})
				trWantErr(t, "heartbeat", err, fdbq.ErrHalt)
				if !strings.Contains(err.Error(), "removed") {
					t.Fatalf("halt error does not say the job was removed: %v", err)
				}
				trWantErr(t, "finish", x.q.Finish(x.ctx, x.q.DB(), l, nil), fdbq.ErrHalt)
				x.gone("a")
			}
			trWantErr(t, "remove again", x.q.Remove(x.ctx, x.q.DB(), "email", "a"), fdbq.ErrNotFound)
		})
	}
}

func trBtoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestTransitionRequeue(t *testing.T) {
	t.Run("failed", func(t *testing.T) {
		x := newTrQ(t)
		x.add(fdbq.NewJob{ID: "a", MaxAttempts: 1})
		trMust(t, "fail", x.q.Fail(x.ctx, x.q.DB(), x.acceptOne("a"), "boom"))
		x.c.Advance(time.Minute)
		trMust(t, "requeue", x.q.Requeue(x.ctx, x.q.DB(), "email", "a"))
		j := x.is("a", fdbq.Pending, "", 0)
		if !j.ScheduledAt.Equal(x.c.Now()) {
			t.Fatalf("requeued for %v, now %v", j.ScheduledAt, x.c.Now())
		}
		x.wantCounts(1, 0, 0)
		// Its attempts start over: MaxAttempts 1 allows one more run.
		trMust(t, "fail", x.q.Fail(x.ctx, x.q.DB(), x.acceptOne("a"), "boom"))
		x.is("a", fdbq.Finished, fdbq.Failed, 1)
	})
	t.Run("canceled", func(t *testing.T) {
		x := newTrQ(t)
		x.add(fdbq.NewJob{ID: "a"})
		x.acceptOne("a")
		trMust(t, "cancel", x.q.Cancel(x.ctx, x.q.DB(), "email", "a"))
		trMust(t, "requeue", x.q.Requeue(x.ctx, x.q.DB(), "email", "a"))
		x.is("a", fdbq.Pending, "", 0)
		x.acceptOne("a")
	})
	t.Run("wrong state", func(t *testing.T) {
		x := newTrQ(t)
		x.add(fdbq.NewJob{ID: "p"})
		x.add(fdbq.NewJob{ID: "r", ScheduledAt: x.c.Now().Add(-time.Second)})
		x.add(fdbq.NewJob{ID: "s", ScheduledAt: x.c.Now().Add(-time.Second)})
		ls := x.accept(fdbq.AcceptOptions{Max: 2, Window: 2})
		if len(ls) != 2 {
			t.Fatalf("accepted %v", trLeaseIDs(ls))
		}
		for _, l := range ls {
			if l.ID == "s" {
				trMust(t, "finish", x.q.Finish(x.ctx, x.q.DB(), l, nil))
			}
		}
		for _, id := range []string{"p", "r", "s"} {
			before := x.get(id)
			err := x.q.Requeue(x.ctx, x.q.DB(), "email", id)
			trWantErr(t, "requeue "+id, err, fdbq.ErrWrongState)
			if after := x.get(id); after.State != before.State || after.Outcome != before.Outcome {
				t.Fatalf("refused requeue changed %s", id)
			}
		}
		x.wantCounts(1, 1, 1)
		trWantErr(t, "requeue missing", x.q.Requeue(x.ctx, x.q.DB(), "email", "nope"), fdbq.ErrNotFound)
	})
}

// --- pause and resume ---

func TestTransitionPauseResume(t *testing.T) {
	x := newTrQ(t)
	x.add(fdbq.NewJob{ID: "a"})
	x.add(fdbq.NewJob{ID: "running"})
	ls := x.accept(fdbq.AcceptOptions{Max: 1, Window: 1})
	if len(ls) != 1 || ls[0].ID != "a" {
		t.Fatalf("accepted %v", trLeaseIDs(ls))
	}
	running := ls[0]
	trMust(t, "pause", x.q.Pause(x.ctx, x.q.DB(), "email"))
	if info, err := x.q.GetType(x.ctx, x.q.DB(), "email"); err != nil || !info.Settings.Paused {
		t.Fatalf("type after pause: %+v %v", info, err)
	}
	x.acceptNone()
	x.add(fdbq.NewJob{ID: "b"})
	x.acceptNone()
	x.wantCounts(2, 1, 0)
	// Workers of a paused type finish what they hold.
	trMust(t, "heartbeat", x.q.Heartbeat(x.ctx, x.q.DB(), running, fdbq.HeartbeatOptions{}))
	trMust(t, "finish", x.q.Finish(x.ctx, x.q.DB(), running, nil))

	// A blocked acceptor wakes on resume, without polling.
	got := make(chan []*fdbq.Lease, 1)
	errc := make(chan error, 1)
	ctx, cancel := context.WithTimeout(x.ctx, 20*time.Second)
	defer cancel()
	go func() {
		ls, err := x.q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 10, Timeout: -1})
		errc <- err
		got <- ls
	}()
	trMust(t, "resume", x.q.Resume(x.ctx, x.q.DB(), "email"))
	trMust(t, "blocked accept", <-errc)
	ids := trLeaseIDs(<-got)
	if more := x.accept(fdbq.AcceptOptions{Max: 10}); len(more) > 0 {
		ids = append(ids, trLeaseIDs(more)...)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"b", "running"}) {
		t.Fatalf("accepted after resume: %v", ids)
	}
	x.wantCounts(0, 2, 1)
	if info, _ := x.q.GetType(x.ctx, x.q.DB(), "email"); info.Settings.Paused || info.Running != 2 || info.Finished != 1 {
		t.Fatalf("type after resume: %+v", info)
	}
}

// --- the worker's own writes commit with its exit ---

func TestTransitionWorkerWritesCommitWithFinish(t *testing.T) {
	x := newTrQ(t)
	appKey := tuple.Tuple{"app", "sent", "a"}.MustPack()
	x.add(fdbq.NewJob{ID: "a"})
	l := x.acceptOne("a")
	err := x.q.DB().Transact(x.ctx, func(tx kv.Tx) error {
		tx.Set(appKey, []byte("yes"))
		return x.q.Finish(x.ctx, tx, l, trJS(`"sent"`))
	})
	trMust(t, "finish in the app's transaction", err)
	if string(x.raw(appKey)) != "yes" {
		t.Fatal("the app's write did not commit with the finish")
	}
	x.is("a", fdbq.Finished, fdbq.Succeeded, 1)

	// A heartbeat inside the worker's transaction works the same way.
	x.add(fdbq.NewJob{ID: "b"})
	lb := x.acceptOne("b")
	progressKey := tuple.Tuple{"app", "progress", "b"}.MustPack()
	trMust(t, "heartbeat in tx", x.q.DB().Transact(x.ctx, func(tx kv.Tx) error {
		tx.Set(progressKey, []byte("half"))
		return x.q.Heartbeat(x.ctx, tx, lb, fdbq.HeartbeatOptions{Progress: trJS(`50`)})
	}))
	if string(x.raw(progressKey)) != "half" || string(x.get("b").Progress) != `50` {
		t.Fatal("heartbeat in the app's transaction did not commit both")
	}
}

func TestTransitionWorkerWritesDroppedWithStaleLock(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(x *trQ, l *fdbq.Lease)
	}{
		{"canceled", func(x *trQ, l *fdbq.Lease) { trMust(x.t, "cancel", x.q.Cancel(x.ctx, x.q.DB(), "email", l.ID)) }},
		{"removed", func(x *trQ, l *fdbq.Lease) { trMust(x.t, "remove", x.q.Remove(x.ctx, x.q.DB(), "email", l.ID)) }},
		{"recycled", func(x *trQ, l *fdbq.Lease) {
			x.c.Advance(time.Hour)
			_, err := staleSweep(x.ctx, x.q, fdbq.MonitorOptions{})
			trMust(x.t, "sweep", err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newTrQ(t)
			appKey := tuple.Tuple{"app", "sent", "a"}.MustPack()
			x.add(fdbq.NewJob{ID: "a"})
			l := x.acceptOne("a")
			tc.lose(x, l)
			for _, exit := range []string{"finish", "fail", "heartbeat", "resubmit"} {
				err := x.q.DB().Transact(x.ctx, func(tx kv.Tx) error {
					tx.Set(appKey, []byte("yes"))
					switch exit {
					case "finish":
						return x.q.Finish(x.ctx, tx, l, trJS(`"sent"`))
					case "fail":
						return x.q.Fail(x.ctx, tx, l, "x")
					case "heartbeat":
						return x.q.Heartbeat(x.ctx, tx, l, fdbq.HeartbeatOptions{})
					default:
						return x.q.Resubmit(x.ctx, tx, l, time.Time{})
					}
				})
				trWantErr(t, exit+" with a stale lock", err, fdbq.ErrHalt)
				if v := x.raw(appKey); v != nil {
					t.Fatalf("%s: the app's write committed although the lock was gone", exit)
				}
			}
		})
	}
}

// --- commit_unknown_result (doc.go: idempotence) ---

func newTrUnknownXQ(t *testing.T) (*trQ, *commitHookBackend) {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	b := &commitHookBackend{Backend: st}
	db := kv.NewDB(b, kv.Options{})
	t.Cleanup(func() { db.Close() })
	c := newClock()
	q := fdbq.New(db, fdbq.Options{Now: c.Now})
	s := fdbq.DefaultTypeSettings()
	s.Retry = fdbq.RetryPolicy{MaxAttempts: 2, Backoff: fdbq.Constant, Base: time.Second}
	trMust(t, "set type", q.SetType(context.Background(), db, "email", s))
	return &trQ{t: t, q: q, c: c, ctx: context.Background()}, b
}

func TestTransitionCommitUnknownResult(t *testing.T) {
	armed := func(t *testing.T, b *commitHookBackend, what string, f func() error) {
		t.Helper()
		n := b.hits.Load()
		b.unknownOnce(nil)
		trMust(t, what+" under commit_unknown_result", f())
		if b.hits.Load() != n+1 {
			t.Fatalf("%s: no commit_unknown_result was injected", what)
		}
	}
	t.Run("add without id", func(t *testing.T) {
		x, b := newTrUnknownXQ(t)
		armed(t, b, "add", func() error { _, err := x.q.Add(x.ctx, x.q.DB(), fdbq.NewJob{Type: "email"}); return err })
		x.wantCounts(1, 0, 0)
	})
	t.Run("accept", func(t *testing.T) {
		x, b := newTrUnknownXQ(t)
		x.add(fdbq.NewJob{ID: "a"})
		var ls []*fdbq.Lease
		armed(t, b, "accept", func() (err error) { ls, err = x.q.Accept(x.ctx, "email", fdbq.AcceptOptions{}); return err })
		if len(ls) != 1 || ls[0].ID != "a" || ls[0].Attempts != 1 {
			t.Fatalf("accept retried after its commit applied returned %v: the job is running with nobody holding it", trLeaseIDs(ls))
		}
		x.is("a", fdbq.Running, "", 1)
		trMust(t, "finish with the reclaimed lease", x.q.Finish(x.ctx, x.q.DB(), ls[0], nil))
	})
	for _, exit := range []string{"finish", "fail", "fail last", "resubmit", "release"} {
		t.Run(exit, func(t *testing.T) {
			x, b := newTrUnknownXQ(t)
			x.add(fdbq.NewJob{ID: "a"})
			l := x.acceptOne("a")
			if exit == "fail last" {
				trMust(t, "fail", x.q.Fail(x.ctx, x.q.DB(), l, "first"))
				x.c.Advance(time.Second)
				l = x.acceptOne("a")
			}
			armed(t, b, exit, func() error {
				switch exit {
				case "finish":
					return x.q.Finish(x.ctx, x.q.DB(), l, trJS(`"r"`))
				case "fail", "fail last":
					return x.q.Fail(x.ctx, x.q.DB(), l, "boom")
				case "resubmit":
					return x.q.Resubmit(x.ctx, x.q.DB(), l, time.Time{})
				default:
					return x.q.Release(x.ctx, x.q.DB(), []*fdbq.Lease{l})
				}
			})
			switch exit {
			case "finish":
				x.is("a", fdbq.Finished, fdbq.Succeeded, 1)
				x.wantCounts(0, 0, 1)
			case "fail":
				x.is("a", fdbq.Pending, "", 1)
				x.wantCounts(1, 0, 0)
			case "fail last":
				x.is("a", fdbq.Finished, fdbq.Failed, 2)
				x.wantCounts(0, 0, 1)
			default:
				x.is("a", fdbq.Pending, "", 0)
				x.wantCounts(1, 0, 0)
			}
		})
	}
}
