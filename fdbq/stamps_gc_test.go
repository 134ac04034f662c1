package fdbq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/tuple"
)

// stampEnv is a store with two clients: m (the monitor's, its commits
// hooked, a short retry limit so that a starved transaction gives up
// quickly) and w (the workers').
type stampEnv struct {
	mb     *hookBackend
	mdb    *kv.DB
	wdb    *kv.DB
	q, w   *fdbq.Queue
	clock  *clock
	typSet fdbq.TypeSettings
}

func newStampEnv(t *testing.T, retryLimit int) *stampEnv {
	t.Helper()
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &stampEnv{mb: &hookBackend{Backend: st}, clock: newClock()}
	e.mdb = kv.NewDB(e.mb, kv.Options{RetryLimit: retryLimit, MaxBackoff: time.Millisecond})
	e.wdb = kv.NewDB(st, kv.Options{})
	e.q = fdbq.New(e.mdb, fdbq.Options{Now: e.clock.Now})
	e.w = fdbq.New(e.wdb, fdbq.Options{Now: e.clock.Now})
	e.typSet = fdbq.DefaultTypeSettings()
	trMust(t, "set type", e.q.SetType(context.Background(), e.mdb, "email", e.typSet))
	return e
}

// runAndFinish runs one job to its end, leaving a stamp no entry names.
func (e *stampEnv) runAndFinish(t *testing.T, id string) {
	t.Helper()
	trMust(t, "finish "+id, e.w.Finish(context.Background(), e.wdb, e.startJob(t, id), nil))
}

// startJobs has n jobs running, each accepted alone (its own entry and read
// version), in the order of their entries.
func (e *stampEnv) startJobs(t *testing.T, n int) []*fdbq.Lease {
	t.Helper()
	ctx := context.Background()
	var out []*fdbq.Lease
	for i := range n {
		id := fmt.Sprint("run", i)
		_, err := e.w.Add(ctx, e.wdb, fdbq.NewJob{Type: "email", ID: id})
		trMust(t, "add "+id, err)
		ls, err := e.w.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
		if err != nil || len(ls) != 1 {
			t.Fatalf("accept %s: %v, %v", id, ls, err)
		}
		out = append(out, ls[0])
	}
	return out
}

// TestStampGCNotStarvedByRenewals: the sweep's clearing of stamps
// fails whenever any heartbeat of one of the oldest running jobs (the
// first activityWindow entries of a group, which in a steady workload are
// exactly the ones heartbeating next) or any accept into a small group
// commits during its transaction, although none of these renewals is at a
// read version older than the cut. Under a steady heartbeat load of at
// least one heartbeat per GC transaction, the GC never commits: stamps
// pile up and Sweep reports a store error (the monitor backs off).
//
// The hook models that load: one heartbeat, of the job with the oldest
// entry, commits during each attempt of the GC's transaction.
func TestStampGCNotStarvedByRenewals(t *testing.T) {
	for _, n := range []int{3, 40} { // a group below and above activityWindow
		t.Run(fmt.Sprint(n, " running"), func(t *testing.T) {
			ctx := context.Background()
			e := newStampEnv(t, 10)
			e.runAndFinish(t, "G") // its stamp is garbage
			leases := e.startJobs(t, n)
			garbage := stampsOf(t, e.mdb, "email")[0]
			next, attempts, hbErrs := 0, 0, 0
			e.mb.onCommit = func(_, clear bool) {
				if !clear {
					return
				}
				attempts++
				// The job with the oldest entry heartbeats (round robin
				// keeps it the oldest next time): a renewal at a read
				// version later than every entry the GC read.
				l := leases[next%len(leases)]
				next++
				if err := e.w.Heartbeat(ctx, e.wdb, l, fdbq.HeartbeatOptions{}); err != nil {
					hbErrs++
				}
			}
			m := fdbq.NewMonitor(e.q, fdbq.MonitorOptions{Logger: quietLog})
			_, err := m.Sweep(ctx)
			e.mb.onCommit = nil
			if hbErrs > 0 {
				t.Fatalf("%d heartbeats failed", hbErrs)
			}
			checkStore(t, e.mdb)
			left := stampsOf(t, e.mdb, "email")
			if len(left) > 0 && left[0] == garbage {
				var rl *kv.RetryLimitError
				t.Errorf("the GC did not clear the stamp of G's finished run after %d attempts, each failed by one "+
					"heartbeat at a read version newer than every entry (sweep error: %v; retry limit: %v)",
					attempts, err, errors.As(err, &rl))
			}
		})
	}
}

// putRaw writes key=value in the store outside fdbq (a damaged or stray
// key).
func putRaw(t *testing.T, db *kv.DB, key []byte) {
	t.Helper()
	trMust(t, "put raw", db.Transact(context.Background(), func(tx kv.Tx) error {
		tx.Set(key, nil)
		return nil
	}))
}

var activePrefix = tuple.FromBytes(append(bytes.Clone(fdbq.DefaultPrefix), tuple.Tuple{12}.MustPack()...))

// TestStampGCPassesStrayActivityKeys: one key in the activity index that
// is no running job's entry stops the GC of the type's stamps for good,
// although the monitor skips such keys (and logs them) and otherwise goes
// on: stampCut takes the read version of any (int, int, string) key as an
// entry's, also one whose timeout activeGroups calls malformed (0), or
// one whose job does not exist, which no sweep ever removes; and it gives
// up (ok=false) on activityWindow keys in a row that do not parse. Every
// renewal's stamp is then kept forever.
func TestStampGCPassesStrayActivityKeys(t *testing.T) {
	cases := []struct {
		name string
		keys [][]byte
	}{
		{"timeout 0 (malformed for the sweep)", [][]byte{activePrefix.MustPack(tuple.Tuple{"email", int64(0), int64(1), "x"})}},
		{"entry of no job", [][]byte{activePrefix.MustPack(tuple.Tuple{"email", int64(60000), int64(1), "ghost"})}},
		{"activityWindow keys that do not parse", func() (ks [][]byte) {
			for i := range 16 {
				ks = append(ks, activePrefix.MustPack(tuple.Tuple{"email", int64(60000), "bad", int64(i)}))
			}
			return ks
		}()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newStampEnv(t, 0)
			for _, k := range tc.keys {
				putRaw(t, e.mdb, k)
			}
			for i := range 20 {
				e.runAndFinish(t, fmt.Sprint("j", i))
			}
			m := fdbq.NewMonitor(e.q, fdbq.MonitorOptions{Logger: quietLog})
			for range 3 {
				if _, err := m.Sweep(ctx); err != nil {
					t.Logf("sweep: %v", err)
				}
			}
			if left := stampsOf(t, e.mdb, "email"); len(left) > 0 {
				t.Errorf("nothing runs, yet %d stamps are left after sweeps (they grow by one per renewal, forever)", len(left))
			}
		})
	}
}

// TestStampGCWithMaxGroups: with exactly maxGroups (256)
// timeout groups, which recycle still goes through, stampCut gives up
// (it needs a 257th read to see that the index ends).
func TestStampGCWithMaxGroups(t *testing.T) {
	ctx := context.Background()
	e := newStampEnv(t, 0)
	e.runAndFinish(t, "G")
	garbage := stampsOf(t, e.mdb, "email")[0]
	s := e.typSet
	for i := range maxGroupsTried {
		s.ActivityTimeout = time.Minute + time.Duration(i)*time.Millisecond
		trMust(t, "set type", e.q.SetType(ctx, e.mdb, "email", s))
		e.startJob(t, fmt.Sprint("g", i))
	}
	m := fdbq.NewMonitor(e.q, fdbq.MonitorOptions{Logger: quietLog})
	if _, err := m.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if left := stampsOf(t, e.mdb, "email"); len(left) > 0 && left[0] == garbage {
		t.Errorf("256 groups: the stamp of G's finished run is kept (%d stamps)", len(left))
	}
}

// startJob adds job id and accepts it.
func (e *stampEnv) startJob(t *testing.T, id string) *fdbq.Lease {
	t.Helper()
	ctx := context.Background()
	_, err := e.w.Add(ctx, e.wdb, fdbq.NewJob{Type: "email", ID: id})
	trMust(t, "add "+id, err)
	ls, err := e.w.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 {
		t.Fatalf("accept %s: %v, %v", id, ls, err)
	}
	return ls[0]
}

var maxGroupsTried = 256

// TestStampsIdleMonitorNoSpin: with jobs running, stamps above the cut
// that no entry names, stray activity keys, and nothing changing, an idle
// monitor sweeps a bounded number of times (no sweep every interval).
func TestStampsIdleMonitorNoSpin(t *testing.T) {
	for _, stray := range [][]byte{nil,
		activePrefix.MustPack(tuple.Tuple{"email", int64(0), int64(1), "x"}),
		activePrefix.MustPack(tuple.Tuple{"email", int64(60000), "bad", int64(0)})} {
		t.Run(fmt.Sprintf("stray %q", stray), func(t *testing.T) {
			ctx := context.Background()
			e := newStampEnv(t, 0)
			if stray != nil {
				putRaw(t, e.mdb, stray)
			}
			e.startJob(t, "X") // the oldest entry
			e.runAndFinish(t, "Y")
			e.runAndFinish(t, "Z")
			ls := e.startJobs(t, 3)
			trMust(t, "hb", e.w.Heartbeat(ctx, e.wdb, ls[0], fdbq.HeartbeatOptions{}))
			swept := make(chan struct{}, 1000)
			m := fdbq.NewMonitor(e.q, fdbq.MonitorOptions{Logger: quietLog, Interval: 5 * time.Millisecond,
				OnSweep: func(fdbq.SweepStats) { swept <- struct{}{} }})
			trMust(t, "start", m.Start(ctx))
			defer m.Stop(ctx)
			// Settled: 200 ms (40 intervals) without a sweep, within 20 s.
			settle := time.After(20 * time.Second)
			for quiet := false; !quiet; {
				select {
				case <-swept:
				case <-time.After(200 * time.Millisecond):
					quiet = true
				case <-settle:
					t.Fatal("the monitor kept sweeping for 20 s with nothing changing")
				}
			}
			n := 0
			for window := time.After(500 * time.Millisecond); ; {
				select {
				case <-swept:
					n++
					continue
				case <-window:
				}
				break
			}
			if n > 0 {
				t.Errorf("%d sweeps in 500 ms (100 intervals) once settled, with nothing changing", n)
			}
		})
	}
}
