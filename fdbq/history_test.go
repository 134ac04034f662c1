package fdbq_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/tuple"
)

// historyAt is the history of the minute of at alone.
func historyAt(t *testing.T, q *fdbq.Queue, at time.Time) fdbq.Minute {
	t.Helper()
	h, err := q.History(context.Background(), q.DB(), "email", at, at)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Minutes) != 1 || h.Unreadable != 0 {
		t.Fatalf("history of one minute: %+v", h)
	}
	return h.Minutes[0]
}

func histMinute(at time.Time, m fdbq.Minute) fdbq.Minute {
	m.At = at.Truncate(time.Minute).UTC()
	return m
}

// addAccept adds job id and accepts it.
func addAccept(t *testing.T, q *fdbq.Queue, id string) *fdbq.Lease {
	t.Helper()
	ctx := context.Background()
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: id}); err != nil {
		t.Fatal(err)
	}
	ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 || ls[0].ID != id {
		t.Fatalf("accept %s: %v %v", id, trLeaseIDs(ls), err)
	}
	return ls[0]
}

// A worker that sends its ending again (it did not hear the answer, or
// the commit's result was unknown) finds it made, and counts nothing
// again: the history counts each attempt once.
func TestHistoryEndReplayed(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	for _, e := range []struct {
		id  string
		end fdbq.Ending
	}{
		{"ok", fdbq.Ending{How: fdbq.AttemptSucceeded}},
		{"retry", fdbq.Ending{How: fdbq.AttemptFailed, Cause: "boom"}},
		{"cancel", fdbq.Ending{How: fdbq.AttemptCanceled, Cause: "no"}},
		{"snooze", fdbq.Ending{How: fdbq.AttemptSnoozed}},
	} {
		l := addAccept(t, q, e.id)
		for i := range 3 {
			d, err := q.End(ctx, q.DB(), l, e.end)
			if err != nil || d.Replayed != (i > 0) {
				t.Fatalf("%s: end %d: %+v %v", e.id, i, d, err)
			}
		}
	}
	want := histMinute(c.Now(), fdbq.Minute{Succeeded: 1, Retried: 1, Canceled: 1})
	if got := historyAt(t, q, c.Now()); got != want {
		t.Fatalf("history %+v, want %+v", got, want)
	}
}

// Every way a job finishes counts, in the minute it finished by the
// clock of the process that finished it; a job requeued and finished
// again counts again; removing a job takes nothing from the history.
func TestHistoryKinds(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.Retry = fdbq.RetryPolicy{MaxAttempts: 2, Backoff: fdbq.Constant, Base: time.Millisecond}
	s.ActivityTimeout = time.Minute
	q, c := openTestQueue(t, quietLog, s)
	ctx := context.Background()
	t0 := c.Now()

	// Minute 0: a success, a retried failure, a final failure, a cancel
	// of a pending job and one of a running job.
	if err := q.Finish(ctx, q.DB(), addAccept(t, q, "a"), nil); err != nil {
		t.Fatal(err)
	}
	if err := q.Fail(ctx, q.DB(), addAccept(t, q, "b"), "first"); err != nil {
		t.Fatal(err)
	}
	ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
	if err == nil && len(ls) == 0 {
		c.Advance(time.Millisecond)
		ls, err = q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
	}
	if err != nil || len(ls) != 1 || ls[0].ID != "b" {
		t.Fatalf("accept b again: %v %v", trLeaseIDs(ls), err)
	}
	if err := q.Fail(ctx, q.DB(), ls[0], "second"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", ID: "c"}); err != nil {
		t.Fatal(err)
	}
	if err := q.Cancel(ctx, q.DB(), "email", "c"); err != nil {
		t.Fatal(err)
	}
	addAccept(t, q, "d")
	if err := q.Cancel(ctx, q.DB(), "email", "d"); err != nil {
		t.Fatal(err)
	}
	want0 := histMinute(t0, fdbq.Minute{Succeeded: 1, Failed: 1, Retried: 1, Canceled: 2})
	if got := historyAt(t, q, t0); got != want0 {
		t.Fatalf("minute 0: %+v, want %+v", got, want0)
	}

	// Minutes later: a job the monitor takes back twice, the second time
	// out of attempts; "c", requeued, and "a", added again, finish.
	c.Advance(2 * time.Minute)
	t1 := c.Now()
	addAccept(t, q, "e")
	if st, err := staleSweep(ctx, q, fdbq.MonitorOptions{Logger: quietLog}); err != nil || st.Recycled != 1 || st.Failed != 0 {
		t.Fatalf("first recycle: %+v %v", st, err)
	}
	ls, err = q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
	if err == nil && len(ls) == 0 {
		c.Advance(time.Millisecond)
		ls, err = q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
	}
	if err != nil || len(ls) != 1 || ls[0].ID != "e" {
		t.Fatalf("accept e again: %v %v", trLeaseIDs(ls), err)
	}
	if st, err := staleSweep(ctx, q, fdbq.MonitorOptions{Logger: quietLog}); err != nil || st.Recycled != 1 || st.Failed != 1 {
		t.Fatalf("second recycle: %+v %v", st, err)
	}
	if err := q.Requeue(ctx, q.DB(), "email", "c"); err != nil {
		t.Fatal(err)
	}
	ls, err = q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 || ls[0].ID != "c" {
		t.Fatalf("accept c requeued: %v %v", trLeaseIDs(ls), err)
	}
	if err := q.Finish(ctx, q.DB(), ls[0], nil); err != nil {
		t.Fatal(err)
	}
	if err := q.Finish(ctx, q.DB(), addAccept(t, q, "a"), nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "c"} {
		if err := q.Remove(ctx, q.DB(), "email", id); err != nil {
			t.Fatal(err)
		}
	}
	want1 := histMinute(t1, fdbq.Minute{Succeeded: 2, Failed: 1, Recycled: 1})
	h, err := q.History(ctx, q.DB(), "email", t0, t1)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Minutes) != 3 || h.Minutes[0] != want0 || h.Minutes[1] != histMinute(t0.Add(time.Minute), fdbq.Minute{}) || h.Minutes[2] != want1 {
		t.Fatalf("history %+v, want %+v, an empty minute, %+v", h.Minutes, want0, want1)
	}
}

// Two processes whose clocks disagree count each change in the minute of
// the clock of the process that made it.
func TestHistorySkewedClocks(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	ahead := fdbq.New(q.DB(), fdbq.Options{Now: func() time.Time { return c.Now().Add(5 * time.Minute) }})
	l := addAccept(t, q, "a")
	if err := ahead.Finish(ctx, ahead.DB(), l, nil); err != nil {
		t.Fatal(err)
	}
	if err := q.Finish(ctx, q.DB(), addAccept(t, q, "b"), nil); err != nil {
		t.Fatal(err)
	}
	if got, want := historyAt(t, q, c.Now()), histMinute(c.Now(), fdbq.Minute{Succeeded: 1}); got != want {
		t.Fatalf("this process's minute: %+v, want %+v", got, want)
	}
	later := c.Now().Add(5 * time.Minute)
	if got, want := historyAt(t, q, later), histMinute(later, fdbq.Minute{Succeeded: 1}); got != want {
		t.Fatalf("the minute of the process ahead: %+v, want %+v", got, want)
	}
}

// History refuses a span it would not read whole, a type never
// registered and a name that is none.
func TestHistoryRefused(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	now := c.Now()
	for _, tc := range []struct {
		name     string
		typ      string
		from, to time.Time
		want     error
	}{
		{"to before from", "email", now, now.Add(-time.Minute), fdbq.ErrInvalidJob},
		{"a day and a minute", "email", now.Add(-fdbq.MaxHistoryMinutes * time.Minute), now, fdbq.ErrInvalidJob},
		{"unknown type", "sms", now, now, fdbq.ErrUnknownType},
		{"bad name", "a\xff", now, now, fdbq.ErrInvalidJob},
	} {
		if _, err := q.History(ctx, q.DB(), tc.typ, tc.from, tc.to); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// A whole day is read, in spans of an hour.
	h, err := q.History(ctx, q.DB(), "email", now.Add(-(fdbq.MaxHistoryMinutes-1)*time.Minute), now)
	if err != nil || len(h.Minutes) != fdbq.MaxHistoryMinutes {
		t.Fatalf("a day: %d minutes, %v", len(h.Minutes), err)
	}
	for i, m := range h.Minutes {
		if want := now.Truncate(time.Minute).Add(time.Duration(i-fdbq.MaxHistoryMinutes+1) * time.Minute).UTC(); !m.At.Equal(want) {
			t.Fatalf("minute %d is %v, want %v", i, m.At, want)
		}
	}
}

// historyKeys is how many keys type "email"'s history holds.
func historyKeys(t *testing.T, db *kv.DB) int {
	t.Helper()
	kvs, err := kv.ReadTransact(context.Background(), db, func(tx kv.ReadTx) ([]kv.KeyValue, error) {
		return tx.GetRange(tuple.FromBytes(fdbq.DefaultPrefix).Sub(27, "email").Range(), kv.RangeOptions{})
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(kvs)
}

// The monitor clears the hours of history that ended the retention ago,
// keys that are not counters among them, and keeps the others; it wakes
// for them.
func TestHistoryTrimmed(t *testing.T) {
	q0, c := newQueue(t)
	q := fdbq.New(q0.DB(), fdbq.Options{Now: c.Now, HistoryRetention: time.Hour})
	ctx := context.Background()
	// At 10 past an hour.
	c.Advance(time.Duration(70-c.Now().UnixMilli()/60_000%60) % 60 * time.Minute)
	t0 := c.Now()
	if err := q.Finish(ctx, q.DB(), addAccept(t, q, "a"), nil); err != nil {
		t.Fatal(err)
	}
	sub := tuple.FromBytes(fdbq.DefaultPrefix).Sub(27, "email")
	junk := [][]byte{sub.MustPack(tuple.Tuple{"junk"}), sub.MustPack(tuple.Tuple{t0.UnixMilli()/3_600_000 - 5, "junk"})}
	if err := q.DB().Transact(ctx, func(tx kv.Tx) error {
		for _, k := range junk {
			tx.Set(k, []byte("x"))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Into the next hour.
	c.Advance(55 * time.Minute)
	t1 := c.Now()
	if err := q.Finish(ctx, q.DB(), addAccept(t, q, "b"), nil); err != nil {
		t.Fatal(err)
	}
	m := fdbq.NewMonitor(q, fdbq.MonitorOptions{Logger: quietLog})
	if _, err := m.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	// The junk lies before the hours kept (that of t0 and later): gone.
	if n := historyKeys(t, q.DB()); n != 2 {
		t.Fatalf("%d keys of history before the retention passed, want the minutes of t0 and t1", n)
	}
	// 1h55m after t0: its hour ended more than the retention ago, t1's
	// (1h05m ago) did not.
	c.Advance(time.Hour)
	if _, err := m.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := historyAt(t, q, t0); got != histMinute(t0, fdbq.Minute{}) {
		t.Fatalf("minute of t0 after its retention: %+v", got)
	}
	if got, want := historyAt(t, q, t1), histMinute(t1, fdbq.Minute{Succeeded: 1}); got != want {
		t.Fatalf("minute of t1: %+v, want %+v", got, want)
	}
	if n := historyKeys(t, q.DB()); n != 1 {
		t.Fatalf("%d keys of history left, want t1's", n)
	}
}

// An idle monitor wakes when the oldest hour of history passes its
// retention, and clears it; with nothing else to do it then makes no
// transactions.
func TestHistoryTrimWakesIdleMonitor(t *testing.T) {
	q0, c := newQueue(t)
	ctx := context.Background()
	if err := q0.Finish(ctx, q0.DB(), addAccept(t, q0, "a"), nil); err != nil {
		t.Fatal(err)
	}
	if err := q0.Remove(ctx, q0.DB(), "email", "a"); err != nil {
		t.Fatal(err)
	}
	// A retention that ends a few seconds from now, by a clock that
	// runs on real time from an hour and a bit after the finish.
	start := time.Now()
	base := c.Now().Truncate(time.Hour).Add(time.Hour)
	now := func() time.Time { return base.Add(time.Since(start)) }
	q := fdbq.New(q0.DB(), fdbq.Options{Now: now, HistoryRetention: 2 * time.Second})
	swept := make(chan fdbq.SweepStats, 100)
	m := fdbq.NewMonitor(q, fdbq.MonitorOptions{Logger: quietLog, Interval: 100 * time.Millisecond,
		OnSweep: func(st fdbq.SweepStats) { swept <- st }})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Stop(ctx)
	deadline := time.After(30 * time.Second)
	for historyKeys(t, q.DB()) != 0 {
		select {
		case <-swept:
		case <-deadline:
			t.Fatalf("the history was not cleared 30 s after it fell due; %d keys left", historyKeys(t, q.DB()))
		}
	}
}

// Keys in a type's history that are not counters fdbq writes are counted
// as unreadable and passed over; the counters among them still count.
func TestHistoryUnreadable(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	if err := q.Finish(ctx, q.DB(), addAccept(t, q, "a"), nil); err != nil {
		t.Fatal(err)
	}
	minute := c.Now().UnixMilli() / 60_000
	sub := tuple.FromBytes(fdbq.DefaultPrefix).Sub(27, "email")
	eight := binary.LittleEndian.AppendUint64(nil, 7)
	hour := minute / 60
	bad := []kv.KeyValue{
		{Key: sub.MustPack(tuple.Tuple{hour, int64(16), minute, int64(1)}), Value: eight},       // no such lane
		{Key: sub.MustPack(tuple.Tuple{hour, int64(-1), minute, int64(1)}), Value: eight},       // nor this
		{Key: sub.MustPack(tuple.Tuple{hour, int64(0), minute, int64(9)}), Value: eight},        // no such kind
		{Key: sub.MustPack(tuple.Tuple{hour, int64(2), minute, int64(1)}), Value: []byte("xy")}, // not a counter
		{Key: sub.MustPack(tuple.Tuple{hour, int64(2), minute + 60, int64(1)}), Value: eight},   // not of this hour
		{Key: sub.MustPack(tuple.Tuple{hour, int64(2), minute, int64(1), "more"}), Value: eight},
		{Key: sub.MustPack(tuple.Tuple{hour, "lane", minute, int64(2)}), Value: eight},
		{Key: append(sub.MustPack(tuple.Tuple{hour}), 0xff, 0x00), Value: eight},
	}
	good := kv.KeyValue{Key: sub.MustPack(tuple.Tuple{hour, int64(3), minute, int64(4)}), Value: binary.LittleEndian.AppendUint64(nil, 2)}
	if err := q.DB().Transact(ctx, func(tx kv.Tx) error {
		for _, e := range append(bad, good) {
			tx.Set(e.Key, e.Value)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	h, err := q.History(ctx, q.DB(), "email", c.Now(), c.Now())
	if err != nil {
		t.Fatal(err)
	}
	if want := histMinute(c.Now(), fdbq.Minute{Succeeded: 1, Retried: 2}); len(h.Minutes) != 1 || h.Minutes[0] != want || h.Unreadable != len(bad) {
		t.Fatalf("history %+v, want %+v and %d unreadable", h, want, len(bad))
	}
}

// An idle monitor wakes to clear hours of history past the retention
// behind a key of the history that is no counter, and clears that key
// with them: the key does not hide them.
func TestHistoryTrimmedBehindJunk(t *testing.T) {
	q0 := newRealClockQueue(t, embedded.Options{})
	q := fdbq.New(q0.DB(), fdbq.Options{HistoryRetention: time.Hour})
	ctx := context.Background()
	l := startMonitor(t, q, fdbq.MonitorOptions{})
	// A count of three hours ago, as a finish then wrote it, behind a key
	// before every hour's.
	sub := tuple.FromBytes(fdbq.DefaultPrefix).Sub(27, "email")
	then := time.Now().Add(-3 * time.Hour)
	minute := then.UnixMilli() / 60_000
	if err := q.DB().Transact(ctx, func(tx kv.Tx) error {
		tx.Add(sub.MustPack(tuple.Tuple{minute / 60, int64(0), minute, int64(1)}), 1)
		tx.Set(sub.MustPack(tuple.Tuple{"junk"}), []byte("x"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, want := historyAt(t, q, then), histMinute(then, fdbq.Minute{Succeeded: 1}); got != want {
		t.Fatalf("the count: %+v, want %+v", got, want)
	}
	addJob(t, q, fdbq.NewJob{ID: "wake"}) // a change: the monitor reads again
	for historyKeys(t, q.DB()) != 0 {
		recvWithin(t, l.swept, "a sweep clearing hours past the retention behind a key that is no counter")
	}
}
