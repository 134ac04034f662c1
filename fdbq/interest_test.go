package fdbq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/tuple"
)

// The type's change key is the one key a change to any of its jobs could
// write; written by every job it would be the type's hot spot on a
// cluster. A change writes it only while a process holds an interest
// entry in it (doc.go, "Waking").

func interestRange(typ string) kv.Range {
	return tuple.FromBytes(fdbq.DefaultPrefix).Sub(19, typ).Range()
}

// interestCount is the count of typ's interest entries, as stored.
func interestCount(t *testing.T, q *fdbq.Queue, typ string) int64 {
	t.Helper()
	return kv.DecodeInt64(rawGet(t, q, tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{18, typ})))
}

func interestEntries(t *testing.T, q *fdbq.Queue, typ string) []kv.KeyValue {
	t.Helper()
	kvs, err := kv.ReadTransact(context.Background(), q.DB(), func(tx kv.ReadTx) ([]kv.KeyValue, error) {
		return tx.GetRange(interestRange(typ), kv.RangeOptions{})
	})
	if err != nil {
		t.Fatal(err)
	}
	return kvs
}

func rawGet(t *testing.T, q *fdbq.Queue, key []byte) []byte {
	t.Helper()
	v, err := kv.ReadTransact(context.Background(), q.DB(), func(tx kv.ReadTx) ([]byte, error) { return tx.Get(key) })
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// With nobody holding an interest, a job's whole life (add, accept,
// heartbeat, finish) leaves the change key unwritten; a wait for many jobs
// (which watches the change key) holds one while it waits, every change
// meanwhile moves the key, and the entry is gone once the wait returns.
func TestChangeKeyOnlyWhileHeld(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	change := trChangeKey("email")
	addJob(t, q, fdbq.NewJob{ID: "solo"})
	ls := acceptNoWait(t, q, fdbq.AcceptOptions{})
	if err := q.Heartbeat(ctx, q.DB(), ls[0], fdbq.HeartbeatOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := q.Finish(ctx, q.DB(), ls[0], nil); err != nil {
		t.Fatal(err)
	}
	if v := rawGet(t, q, change); v != nil {
		t.Fatalf("a job's life with no holder wrote the change key: %x", v)
	}

	ids := addJobs(t, q, 40) // more than one wait watches one by one
	out := make(chan error, 1)
	go func() {
		_, err := q.Wait(ctx, "email", ids, fdbq.Finished)
		out <- err
	}()
	eventually(t, waitBound, "the wait's interest entry", func() bool { return len(interestEntries(t, q, "email")) == 1 })
	if got := interestEntries(t, q, "email")[0].Key; string(got) != string(tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{19, "email", q.InterestHolder()})) {
		t.Fatalf("interest entry %q, want the queue's holder", got)
	}
	for len(ids) > 0 {
		ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 16})
		before := rawGet(t, q, change)
		for _, l := range ls {
			if err := q.Finish(ctx, q.DB(), l, nil); err != nil {
				t.Fatal(err)
			}
		}
		if len(ls) < len(ids) {
			if after := rawGet(t, q, change); kv.DecodeInt64(after) <= kv.DecodeInt64(before) {
				t.Fatalf("finishes while a wait holds the change key left it at %d", kv.DecodeInt64(after))
			}
		}
		ids = ids[len(ls):]
	}
	if err := recvWithin(t, out, "the wait for 40 jobs"); err != nil {
		t.Fatal(err)
	}
	if n, c := len(interestEntries(t, q, "email")), interestCount(t, q, "email"); n != 0 || c != 0 {
		t.Fatalf("%d interest entries left after the wait returned, count %d", n, c)
	}
}

// A change whose transaction read the interest entries before a holder
// wrote its entry, and commits after, must not commit unseen: its read
// carries a conflict, so FoundationDB fails the commit (not_committed,
// 1020: a key in a read conflict range was written after the read
// version; fdbclient/NativeAPI.actor.cpp, tryCommit) and the retry sees
// the entry and moves the key. With a snapshot read the holder's read,
// which may have begun before the change committed, and the change key
// would both miss it.
func TestChangeConflictsWithAHolderWritingItsEntry(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	other := kv.NewDB(q.DB().Backend(), kv.Options{})
	entry := tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{19, "email", "other-process"})
	count := tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{18, "email"})
	attempts := 0
	if err := q.DB().Transact(ctx, func(tx kv.Tx) error {
		attempts++
		if _, err := q.AddBatch(ctx, tx, []fdbq.NewJob{{Type: "email", ID: "a"}}); err != nil {
			return err
		}
		if attempts == 1 {
			// Another process holds an interest, committed while this
			// transaction is open.
			return other.Transact(ctx, func(tx kv.Tx) error {
				tx.Set(entry, tuple.Tuple{int64(1) << 50}.MustPack())
				tx.Add(count, 1)
				return nil
			})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if attempts != 2 {
		t.Fatalf("the add committed after %d attempts, want 2 (the first conflicts with the entry)", attempts)
	}
	if v := rawGet(t, q, trChangeKey("email")); kv.DecodeInt64(v) == 0 {
		t.Fatal("an add committed after a holder's entry left the change key unmoved")
	}
}

// An idle monitor holds the change keys of the types with no running jobs
// and watches them, so it sleeps until a job starts; a type with running
// jobs it reads on its own every Interval instead, and holds nothing, so
// those jobs' heartbeats write no change key.
func TestMonitorHoldsIdleTypesOnly(t *testing.T) {
	q := newRealClockQueue(t, embedded.Options{})
	ctx := context.Background()
	shortTimeout(t, q, "email")
	if err := q.SetType(ctx, q.DB(), "sms", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	startMonitor(t, q, fdbq.MonitorOptions{})
	held := func(typ string) bool { return len(interestEntries(t, q, typ)) == 1 }
	eventually(t, waitBound, "the idle monitor's holds", func() bool { return held("email") && held("sms") })

	addJob(t, q, fdbq.NewJob{ID: "a"})
	ls := acceptNoWait(t, q, fdbq.AcceptOptions{})
	eventually(t, waitBound, "the monitor letting go of a type with a running job", func() bool { return !held("email") })
	if !held("sms") {
		t.Fatal("the monitor let go of an idle type")
	}
	before := rawGet(t, q, trChangeKey("email"))
	for range 3 {
		if err := q.Heartbeat(ctx, q.DB(), ls[0], fdbq.HeartbeatOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if after := rawGet(t, q, trChangeKey("email")); string(after) != string(before) {
		t.Fatalf("heartbeats of a type nobody holds moved its change key from %d to %d", kv.DecodeInt64(before), kv.DecodeInt64(after))
	}
	if err := q.Finish(ctx, q.DB(), ls[0], nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitBound, "the monitor holding the type again once idle", func() bool { return held("email") })
}

// An entry whose holder stopped renewing it (a process that died) is
// cleared by a monitor a lease after it expired, as is one that does not
// decode; a live one, and the monitor's own, stay.
func TestMonitorClearsStaleInterest(t *testing.T) {
	t.Cleanup(fdbq.SetInterestLease(200 * time.Millisecond)) // after the monitor stops
	q := newRealClockQueue(t, embedded.Options{})
	ctx := context.Background()
	sub := tuple.FromBytes(fdbq.DefaultPrefix).Sub(19, "email")
	now := time.Now().UnixMilli()
	entries := map[string][]byte{
		"dead":    tuple.Tuple{now - 1000}.MustPack(),
		"garbage": []byte("not a tuple"),
		"live":    tuple.Tuple{now + 3_600_000}.MustPack(),
	}
	if err := q.DB().Transact(ctx, func(tx kv.Tx) error {
		for h, v := range entries {
			tx.Set(sub.MustPack(tuple.Tuple{h}), v)
		}
		tx.Add(tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{18, "email"}), 7) // not 3: a wrong count is mended too
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	startMonitor(t, q, fdbq.MonitorOptions{})
	holders := func() map[string]bool {
		out := map[string]bool{}
		for _, e := range interestEntries(t, q, "email") {
			tt, err := sub.Unpack(e.Key)
			if err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprint(tt[0])] = true
		}
		return out
	}
	eventually(t, waitBound, "the stale entries cleared, the monitor's own written and the count mended", func() bool {
		h := holders()
		return !h["dead"] && !h["garbage"] && h[q.InterestHolder()] && interestCount(t, q, "email") == 2
	})
	// Over two renewals of the monitor's own entry (every 100 ms, half a
	// lease) neither it nor the live one is cleared.
	expiry := func(h string) int64 {
		tt, err := tuple.Unpack(rawGet(t, q, sub.MustPack(tuple.Tuple{h})))
		if err != nil || len(tt) != 1 {
			return 0
		}
		return tt[0].(int64)
	}
	first := expiry(q.InterestHolder())
	eventually(t, waitBound, "two renewals of the monitor's entry", func() bool {
		return expiry(q.InterestHolder()) >= first+200
	})
	if h := holders(); !h["live"] || !h[q.InterestHolder()] {
		t.Fatalf("holders %v: the live entry or the monitor's own was cleared", h)
	}
}

// A wait that outlasts half a lease writes its entry again, and still
// wakes for the change it waits for.
func TestWaitRenewsItsInterest(t *testing.T) {
	t.Cleanup(fdbq.SetInterestLease(200 * time.Millisecond))
	q, c := newQueue(t)
	ctx := context.Background()
	ids := addJobs(t, q, 40)
	out := make(chan error, 1)
	go func() {
		_, err := q.Wait(ctx, "email", ids, fdbq.Running)
		out <- err
	}()
	expiry := func() int64 {
		kvs := interestEntries(t, q, "email")
		if len(kvs) != 1 {
			return 0
		}
		tt, err := tuple.Unpack(kvs[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		return tt[0].(int64)
	}
	eventually(t, waitBound, "the wait's interest entry", func() bool { return expiry() != 0 })
	first := expiry()
	c.Advance(time.Second) // the queue's clock, which the expiry is written by
	eventually(t, waitBound, "the entry renewed", func() bool { return expiry() > first })
	for len(ids) > 0 {
		ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 40})
		ids = ids[len(ls):]
	}
	if err := recvWithin(t, out, "the wait"); err != nil {
		t.Fatal(err)
	}
}

// A monitor that finds a type idle takes a hold on its change key and
// then waits on that key at once; when a change wakes it, it lets go of
// its holds before its pause, since the read after the pause takes them
// again for the types still idle. Held through the pause (0.5 to 1.5
// Intervals), or taken and not watched until after one, the hold had
// every change of a type that had just become busy bump its change key
// meanwhile: a key written by every job, for up to a second and a half.
func TestMonitorLetsGoOfItsHoldsWhenWoken(t *testing.T) {
	q := newRealClockQueue(t, embedded.Options{})
	ctx := context.Background()
	shortTimeout(t, q, "email")
	m := fdbq.NewMonitor(q, fdbq.MonitorOptions{Logger: slog.New(slog.DiscardHandler)})
	idled := make(chan error, 1)
	go func() {
		sweep, err := m.Idle(ctx)
		if err == nil && sweep {
			err = errors.New("the idle monitor of a store with no deadline chose to sweep")
		}
		idled <- err
	}()
	eventually(t, waitBound, "the idle monitor's hold", func() bool { return len(interestEntries(t, q, "email")) == 1 })
	before := rawGet(t, q, trChangeKey("email"))
	addJob(t, q, fdbq.NewJob{ID: "a"}) // bumps the change key: the type is held
	if err := <-idled; err != nil {
		t.Fatal(err)
	}
	if after := rawGet(t, q, trChangeKey("email")); string(after) == string(before) {
		t.Fatal("the add did not move the change key of a type the monitor held")
	}
	if n := m.Holds(); n != 0 || len(interestEntries(t, q, "email")) != 0 {
		t.Fatalf("the monitor, woken by a change, still holds %d types (%d entries in the store)", n, len(interestEntries(t, q, "email")))
	}
	ls := acceptNoWait(t, q, fdbq.AcceptOptions{})
	before = rawGet(t, q, trChangeKey("email"))
	for range 3 {
		if err := q.Heartbeat(ctx, q.DB(), ls[0], fdbq.HeartbeatOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if after := rawGet(t, q, trChangeKey("email")); string(after) != string(before) {
		t.Fatalf("the changes of a type nobody holds moved its change key from %d to %d", kv.DecodeInt64(before), kv.DecodeInt64(after))
	}
}
