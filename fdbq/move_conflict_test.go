package fdbq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// gateBackend holds the first commit after arm() at its commit until
// release, and reports that it got there.
type gateBackend struct {
	kv.Backend
	mu      sync.Mutex
	armed   bool
	at      chan struct{}
	release chan struct{}
}

func (b *gateBackend) arm() {
	b.mu.Lock()
	b.armed, b.at, b.release = true, make(chan struct{}), make(chan struct{})
	b.mu.Unlock()
}

func (b *gateBackend) Begin(ctx context.Context) (kv.Transaction, error) {
	tx, err := b.Backend.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &gateTx{Transaction: tx, b: b}, nil
}

type gateTx struct {
	kv.Transaction
	b     *gateBackend
	wrote bool
}

func (t *gateTx) Set(k, v []byte) { t.wrote = true; t.Transaction.Set(k, v) }
func (t *gateTx) Clear(k []byte)  { t.wrote = true; t.Transaction.Clear(k) }
func (t *gateTx) AddWriteConflictKey(k []byte) {
	t.wrote = true
	t.Transaction.AddWriteConflictKey(k)
}

func (t *gateTx) Commit() error {
	t.b.mu.Lock()
	hold := t.b.armed && t.wrote
	var at, release chan struct{}
	if hold {
		t.b.armed = false
		at, release = t.b.at, t.b.release
	}
	t.b.mu.Unlock()
	if hold {
		close(at)
		<-release
	}
	return t.Transaction.Commit()
}

// TestAcceptVersusMove: an accept that took a job from its entry in
// the ready index, and a move of that entry to the scheduled index by a
// client whose clock is behind (the job is not due for it), both commit
// in either order only if one of them retries; the job must end running
// once, with no pending entry, the counters right.
func TestAcceptVersusMove(t *testing.T) {
	for _, moveFirst := range []bool{true, false} {
		name := "accept held, move commits"
		if !moveFirst {
			name = "move held, accept commits"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st, err := embedded.Open("", embedded.Options{InMemory: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			ab, bb := &gateBackend{Backend: st}, &gateBackend{Backend: st}
			adb, bdb := kv.NewDB(ab, kv.Options{}), kv.NewDB(bb, kv.Options{})
			c := newClock()
			behind := &clock{now: c.Now().Add(-time.Hour)}
			a := fdbq.New(adb, fdbq.Options{Now: c.Now})
			b := fdbq.New(bdb, fdbq.Options{Now: behind.Now})
			trMust(t, "set type", a.SetType(ctx, adb, "email", fdbq.DefaultTypeSettings()))
			_, err = a.Add(ctx, adb, fdbq.NewJob{Type: "email", ID: "J"})
			trMust(t, "add", err)

			accepted := make(chan []*fdbq.Lease, 1)
			accept := func() {
				ls, err := a.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
				if err != nil {
					t.Errorf("accept: %v", err)
				}
				accepted <- ls
			}
			move := func() {
				ls, err := b.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
				if err != nil || len(ls) != 0 {
					t.Errorf("the clock behind took %v, %v", ls, err)
				}
			}
			if moveFirst {
				ab.arm()
				go accept()
				<-ab.at
				move()
				close(ab.release)
			} else {
				// b's accept reads, takes nothing, commits nothing; its
				// move is the first commit that writes.
				bb.arm()
				done := make(chan struct{})
				go func() { move(); close(done) }()
				<-bb.at
				accept()
				close(bb.release)
				<-done
			}
			ls := <-accepted
			if moveFirst && len(ls) == 0 {
				// The retry found the entry in the scheduled index: it
				// is due for a, which takes it from there.
				var err error
				ls, err = a.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
				trMust(t, "accept again", err)
			}
			if len(ls) != 1 {
				t.Fatalf("accepted %d", len(ls))
			}
			jobs := checkStore(t, adb)
			if j := jobs[simJobRef{"email", "J"}]; j == nil || j.State != fdbq.Running {
				t.Fatalf("J is %+v", j)
			}
			if again, err := a.Accept(ctx, "email", fdbq.AcceptOptions{Max: 5}); err != nil || len(again) != 0 {
				t.Fatalf("J taken twice: %v, %v", again, err)
			}
		})
	}
}
