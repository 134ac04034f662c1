package fdbq_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/tuple"
)

// stampsPrefix is where the stamps of the default prefix's types live.
var stampsPrefix = append(bytes.Clone(fdbq.DefaultPrefix), tuple.Tuple{13}.MustPack()...)

// hookBackend runs onCommit before each commit of a transaction that wrote
// a stamp (a renewal) or cleared stamps (a sweep), with which of the two.
type hookBackend struct {
	kv.Backend
	onCommit func(renewal, clear bool)
}

func (b *hookBackend) Begin(ctx context.Context) (kv.Transaction, error) {
	tx, err := b.Backend.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &hookTx{Transaction: tx, b: b}, nil
}

type hookTx struct {
	kv.Transaction
	b              *hookBackend
	renewal, clear bool
}

func (t *hookTx) SetVersionstampedValue(key, value []byte) {
	t.renewal = t.renewal || bytes.HasPrefix(key, stampsPrefix)
	t.Transaction.SetVersionstampedValue(key, value)
}

func (t *hookTx) ClearRange(r kv.Range) {
	t.clear = t.clear || bytes.HasPrefix(r.Begin, stampsPrefix)
	t.Transaction.ClearRange(r)
}

func (t *hookTx) Commit() error {
	if (t.renewal || t.clear) && t.b.onCommit != nil {
		t.b.onCommit(t.renewal, t.clear)
	}
	return t.Transaction.Commit()
}

// stampsOf returns the read versions of a type's stamps, oldest first
// (stamps are keyed by lane, then read version).
func stampsOf(t *testing.T, db *kv.DB, typ string) []int64 {
	t.Helper()
	sub := tuple.FromBytes(stampsPrefix).Sub(typ)
	kvs, err := kv.ReadTransact(context.Background(), db, func(tx kv.ReadTx) ([]kv.KeyValue, error) {
		return tx.GetRange(sub.Range(), kv.RangeOptions{})
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, e := range kvs {
		k, err := sub.Unpack(e.Key)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, k[1].(int64))
	}
	slices.Sort(out)
	return out
}

// checkStore fails t with every problem the simulation's checker finds in
// the store, a running job without its stamp among them.
func checkStore(t *testing.T, db *kv.DB) map[simJobRef]*fdbq.StoredJob {
	t.Helper()
	jobs, problems, err := scanStore(context.Background(), db, fdbq.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.job, p.msg)
	}
	return jobs
}

// TestStampsOneAcceptWritesOne: one accept of many jobs writes one stamp,
// and a sweep clears the stamps no running job's entry names: every one
// when nothing runs, all but the oldest running job's and later ones when
// something does. Heartbeats move a job's stamp on with it.
func TestStampsOneAcceptWritesOne(t *testing.T) {
	ctx := context.Background()
	q, _ := newQueue(t)
	for i := range 50 {
		if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: fmt.Sprint("a", i)}); err != nil {
			t.Fatal(err)
		}
	}
	leases, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 50})
	if err != nil || len(leases) != 50 {
		t.Fatalf("accept: %d leases, %v", len(leases), err)
	}
	if got := stampsOf(t, q.DB(), "email"); len(got) != 1 {
		t.Fatalf("an accept of 50 jobs left stamps at %v, want one", got)
	}
	// Heartbeats in transactions of their own: a stamp each.
	for _, l := range leases[:10] {
		if err := q.Heartbeat(ctx, q.DB(), l, fdbq.HeartbeatOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := stampsOf(t, q.DB(), "email"); len(got) != 11 {
		t.Fatalf("stamps %v after 10 heartbeats, want 11", got)
	}
	m := fdbq.NewMonitor(q, fdbq.MonitorOptions{Logger: quietLog})
	if _, err := m.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	// 40 jobs are still at the accept's read version: nothing to clear.
	if got := stampsOf(t, q.DB(), "email"); len(got) != 11 {
		t.Fatalf("stamps %v after a sweep, want the 11 running jobs name", got)
	}
	checkStore(t, q.DB())
	for _, l := range leases[10:] {
		if err := q.Finish(ctx, q.DB(), l, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := stampsOf(t, q.DB(), "email"); len(got) != 10 {
		t.Fatalf("stamps %v with 10 jobs running, each heartbeated alone, want 10", got)
	}
	checkStore(t, q.DB())
	for _, l := range leases[:10] {
		if err := q.Finish(ctx, q.DB(), l, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := stampsOf(t, q.DB(), "email"); len(got) != 0 {
		t.Fatalf("stamps %v with nothing running", got)
	}
}

// TestStampsKeptForRenewalDuringSweep: a renewal that commits while a
// sweep clears stamps keeps its stamp, also one whose read version is
// older than every entry the sweep read, because the sweep read the index
// with conflicts (FoundationDB's resolver fails a transaction whose read
// conflict ranges another commit wrote in between: fdbclient's
// NativeAPI.actor.cpp, commit → not_committed). Without the stamp, a dead
// worker's job would never be taken back.
func TestStampsKeptForRenewalDuringSweep(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// older: the renewal's read version precedes another job's
		// entry, the oldest the sweep reads; else nothing else runs.
		older bool
	}{{"nothing else running", false}, {"older than the first entry", true}} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := embedded.Open("", embedded.Options{InMemory: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			mb := &hookBackend{Backend: st} // the monitor's and first client's
			rb := &hookBackend{Backend: st} // the renewing client's
			mdb, rdb := kv.NewDB(mb, kv.Options{}), kv.NewDB(rb, kv.Options{})
			c := newClock()
			// The renewing client's clock is an hour ahead, so that B,
			// scheduled half an hour on, is due for it alone.
			ahead := &clock{now: c.Now().Add(time.Hour)}
			q := fdbq.New(mdb, fdbq.Options{Now: c.Now})
			r := fdbq.New(rdb, fdbq.Options{Now: ahead.Now})
			s := fdbq.DefaultTypeSettings()
			trMust(t, "set type", q.SetType(ctx, mdb, "email", s))
			// G ran and finished: its stamp is one for the sweep to clear.
			_, err = q.Add(ctx, mdb, fdbq.NewJob{Type: "email", ID: "G"})
			trMust(t, "add G", err)
			ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{})
			if err != nil || len(ls) != 1 {
				t.Fatalf("accept of G: %v, %v", ls, err)
			}
			trMust(t, "finish G", q.Finish(ctx, mdb, ls[0], nil))
			_, err = q.Add(ctx, mdb, fdbq.NewJob{Type: "email", ID: "B", Priority: 5, ScheduledAt: c.Now().Add(30 * time.Minute)})
			trMust(t, "add B", err)
			if tc.older {
				_, err = q.Add(ctx, mdb, fdbq.NewJob{Type: "email", ID: "A"})
				trMust(t, "add A", err)
			}

			// The renewal (r's accept of B) gets its read version, then
			// waits at its commit until the sweep is at its own.
			atCommit, release, renewed := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			rb.onCommit = func(renewal, _ bool) {
				if renewal {
					rb.onCommit = nil
					close(atCommit)
					<-release
				}
			}
			go func() {
				ls, err := r.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1, Window: 1})
				if err == nil && (len(ls) != 1 || ls[0].Job.ID != "B") {
					err = fmt.Errorf("the renewal took %d jobs, want B", len(ls))
				}
				renewed <- err
			}()
			<-atCommit
			if tc.older {
				// A commit in between, so that A's accept reads at a later
				// version than the renewal.
				trMust(t, "set type", q.SetType(ctx, mdb, "other", s))
				ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
				if err != nil || len(ls) != 1 || ls[0].Job.ID != "A" {
					t.Fatalf("accept of A: %v, %v", ls, err)
				}
			}
			clears := 0
			mb.onCommit = func(_, clear bool) {
				if clear {
					if clears++; clears == 1 {
						close(release)
						if err := <-renewed; err != nil {
							t.Errorf("renewal: %v", err)
						}
					}
				}
			}
			m := fdbq.NewMonitor(q, fdbq.MonitorOptions{Logger: quietLog})
			if _, err := m.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			if clears == 0 {
				t.Fatal("the sweep cleared no stamps, so the case was not tried")
			}
			jobs := checkStore(t, mdb)
			if j := jobs[simJobRef{"email", "B"}]; j == nil || j.State != fdbq.Running {
				t.Fatalf("B is %+v, want running", j)
			}
		})
	}
}

// TestStampsIdleMonitorClears: a monitor with nothing due sweeps once it
// sees stamps no entry names, so that they do not pile up while jobs run
// and finish well within their timeouts.
func TestStampsIdleMonitorClears(t *testing.T) {
	ctx := context.Background()
	q, _ := newQueue(t)
	swept := make(chan struct{}, 100)
	m := fdbq.NewMonitor(q, fdbq.MonitorOptions{Logger: quietLog, Interval: 10 * time.Millisecond,
		OnSweep: func(fdbq.SweepStats) { swept <- struct{}{} }})
	trMust(t, "start", m.Start(ctx))
	t.Cleanup(func() { m.Stop(ctx) })
	<-swept // the first, at start
	for i := range 3 {
		if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{})
		if err != nil || len(ls) != 1 {
			t.Fatalf("accept: %v, %v", ls, err)
		}
		if err := q.Finish(ctx, q.DB(), ls[0], nil); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.After(30 * time.Second)
	for len(stampsOf(t, q.DB(), "email")) > 0 {
		select {
		case <-swept:
		case <-deadline:
			t.Fatalf("stamps %v left for 30 s by an idle monitor", stampsOf(t, q.DB(), "email"))
		}
	}
}
