package fdbq_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// limitData is JSON data that takes exactly MaxDataSize bytes as stored:
// encoding/json writes each '<' as \u003c, so it is shorter as given.
func limitData() []byte {
	const escaped = (fdbq.MaxDataSize - 2) / 6
	return []byte(`"` + strings.Repeat("<", escaped) + strings.Repeat("x", fdbq.MaxDataSize-2-6*escaped) + `"`)
}

// limitSweep sweeps within a bound, so that a sweep that loops fails the
// test instead of hanging it, as a monitor of limitMonitor does: it notes
// the store's version, its own clock moves on by far more than any
// timeout, and it sweeps again, taking back every job not renewed since
// the call began. The stats are the second sweep's, with what the first
// changed added.
func limitSweep(t *testing.T, m *limitMonitor) (fdbq.SweepStats, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	// The second sweep's error says what the first's would.
	first, _ := m.Sweep(ctx)
	m.own.Advance(1000 * time.Hour)
	st, err := m.Sweep(ctx)
	st.Recycled += first.Recycled
	st.Failed += first.Failed
	st.Expired += first.Expired
	return st, err
}

// limitMonitor is a monitor with a clock of its own.
type limitMonitor struct {
	*fdbq.Monitor
	own *clock
}

func newLimitMonitor(q *fdbq.Queue, o fdbq.MonitorOptions) *limitMonitor {
	own := newClock()
	o.Clock = own.Now
	return &limitMonitor{fdbq.NewMonitor(q, o), own}
}

// limitFits checks that the job's data, result, error and progress are
// within MaxDataSize and its error is valid UTF-8.
func limitFits(t *testing.T, j *fdbq.Job) {
	t.Helper()
	if n := len(j.Data) + len(j.Result) + len(j.Error) + len(j.Progress); n > fdbq.MaxDataSize {
		t.Fatalf("%s takes %d bytes", j.ID, n)
	}
	if !utf8.ValidString(j.Error) {
		t.Fatalf("%s: error is not valid UTF-8: %q", j.ID, j.Error)
	}
}

// A job whose data is at the limit goes through every transition that
// adds nothing of the caller's: what jobstage adds, it cuts to fit.
func TestLimitsJobAtTheLimit(t *testing.T) {
	x := newTrQ(t)
	x.add(fdbq.NewJob{ID: "a", Data: limitData(), MaxAttempts: 3})
	if j := x.get("a"); len(j.Data) != fdbq.MaxDataSize {
		t.Fatalf("stored %d bytes of data, want %d", len(j.Data), fdbq.MaxDataSize)
	}
	m := newLimitMonitor(x.q, fdbq.MonitorOptions{})

	// Attempt 1: heartbeats, then fails with a long cause.
	l := x.acceptOne("a")
	trMust(t, "heartbeat", x.q.Heartbeat(x.ctx, x.q.DB(), l, fdbq.HeartbeatOptions{}))
	trMust(t, "heartbeat with data at the limit", x.q.Heartbeat(x.ctx, x.q.DB(), l, fdbq.HeartbeatOptions{Data: jsonString(fdbq.MaxDataSize, "y")}))
	trMust(t, "fail with a 100 KB cause", x.q.Fail(x.ctx, x.q.DB(), l, strings.Repeat("c", 100_000)))
	j := x.is("a", fdbq.Pending, "", 1)
	limitFits(t, j)
	if string(j.Data) != string(jsonString(fdbq.MaxDataSize, "y")) {
		t.Fatalf("data after fail: %d bytes", len(j.Data))
	}

	// Attempt 2: the monitor takes it back and counts the attempt.
	x.c.Advance(time.Hour)
	if l = x.acceptOne("a"); l.Attempts != 2 {
		t.Fatalf("attempt %d", l.Attempts)
	}
	x.c.Advance(activityTimeout + time.Millisecond)
	st, err := limitSweep(t, m)
	if err != nil || st.Recycled != 1 || st.Failed != 0 || st.Skipped != 0 {
		t.Fatalf("sweep: %+v, %v", st, err)
	}
	limitFits(t, x.is("a", fdbq.Pending, "", 2))

	// Attempt 3, the last: the monitor fails it for good.
	x.c.Advance(time.Hour)
	x.acceptOne("a")
	x.c.Advance(activityTimeout + time.Millisecond)
	st, err = limitSweep(t, m)
	if err != nil || st.Recycled != 1 || st.Failed != 1 {
		t.Fatalf("sweep of the last attempt: %+v, %v", st, err)
	}
	limitFits(t, x.is("a", fdbq.Finished, fdbq.Failed, 3))

	// Requeued, it finishes. A result that does not fit is the caller's,
	// and refused; failing the attempt with the reason, as consumer does,
	// is not.
	trMust(t, "requeue", x.q.Requeue(x.ctx, x.q.DB(), "email", "a"))
	l = x.acceptOne("a")
	errIs(t, "finish with a result", x.q.Finish(x.ctx, x.q.DB(), l, trJS(`"r"`)), fdbq.ErrDataTooLarge)
	x.is("a", fdbq.Running, "", 1)
	trMust(t, "finish", x.q.Finish(x.ctx, x.q.DB(), l, nil))
	limitFits(t, x.is("a", fdbq.Finished, fdbq.Succeeded, 1))

	x.add(fdbq.NewJob{ID: "b", Data: limitData(), MaxAttempts: 1})
	l = x.acceptOne("b")
	err = x.q.Finish(x.ctx, x.q.DB(), l, trJS(`"r"`))
	errIs(t, "finish with a result", err, fdbq.ErrDataTooLarge)
	trMust(t, "fail saying why", x.q.Fail(x.ctx, x.q.DB(), l, "result not stored: "+err.Error()))
	limitFits(t, x.is("b", fdbq.Finished, fdbq.Failed, 1))
}

// An error is cut to the room the job's data leaves, keeping its end, on
// a character boundary.
func TestLimitsFailCauseCutToTheRoomLeft(t *testing.T) {
	x := newTrQ(t)
	const room = 1000
	x.add(fdbq.NewJob{ID: "a", Data: jsonString(fdbq.MaxDataSize-room, "d")})
	for i, cause := range []string{
		strings.Repeat("é", 30_000) + "the end",     // the cut falls inside a character
		strings.Repeat("\xffa", 30_000) + "the end", // invalid bytes, each made three bytes long
		strings.Repeat("x", room-6) + "the end",     // one byte over
	} {
		l := x.acceptOne("a")
		trMust(t, "fail", x.q.Fail(x.ctx, x.q.DB(), l, cause))
		j := x.is("a", fdbq.Pending, "", i+1)
		limitFits(t, j)
		if !strings.HasPrefix(j.Error, "…") || !strings.HasSuffix(j.Error, "the end") || len(j.Error) < room-3 {
			t.Fatalf("cause %d: stored %d bytes: %.20q…%q", i, len(j.Error), j.Error, j.Error[max(0, len(j.Error)-10):])
		}
		if i == 0 && strings.ContainsRune(j.Error, utf8.RuneError) {
			t.Fatalf("cut inside a character: %.20q", j.Error)
		}
		x.c.Advance(time.Hour)
	}
	// A cause that fits is kept whole.
	l := x.acceptOne("a")
	cause := strings.Repeat("x", room-7) + "the end"
	trMust(t, "fail", x.q.Fail(x.ctx, x.q.DB(), l, cause))
	if j := x.get("a"); j.Error != cause {
		t.Fatalf("a cause that fits was cut to %d bytes", len(j.Error))
	}

	// Down to no room at all.
	for room := range 9 {
		id := fmt.Sprint("room", room)
		x.add(fdbq.NewJob{ID: id, Data: jsonString(fdbq.MaxDataSize-room, "d"), MaxAttempts: 1})
		trMust(t, "fail", x.q.Fail(x.ctx, x.q.DB(), x.acceptOne(id), "\xffé€𝄞\xff"))
		j := x.get(id)
		limitFits(t, j)
		if room <= len("…") && j.Error != "" || room > len("…") && !strings.HasPrefix(j.Error, "…") {
			t.Fatalf("room %d: error %q", room, j.Error)
		}
	}
}

// One job at the limit does not keep the jobs of its type that expire
// after it running: one sweep takes them all back.
func TestLimitsMonitorRecyclesTypeWithJobAtTheLimit(t *testing.T) {
	x := newTrQ(t)
	x.add(fdbq.NewJob{ID: "big", Data: limitData()})
	x.acceptOne("big")
	const n = 5
	for i := range n {
		x.c.Advance(time.Second)
		id := fmt.Sprintf("j%d", i)
		x.add(fdbq.NewJob{ID: id, Data: trJS(`{"n":1}`)})
		x.acceptOne(id)
	}
	x.c.Advance(activityTimeout + time.Millisecond)
	st, err := limitSweep(t, newLimitMonitor(x.q, fdbq.MonitorOptions{}))
	if err != nil || st.Recycled != n+1 || st.Skipped != 0 {
		t.Fatalf("sweep: %+v, %v", st, err)
	}
	limitFits(t, x.is("big", fdbq.Pending, "", 1))
	for i := range n {
		if j := x.is(fmt.Sprintf("j%d", i), fdbq.Pending, "", 1); !strings.Contains(j.Error, "activity timeout") {
			t.Fatalf("%s: error %q", j.ID, j.Error)
		}
	}
	x.wantCounts(n+1, 0, 0)
}

// limitState checks a job's state and attempts by Get alone: List, which
// x.is uses, reads the records an index lists, garbage too.
func limitState(x *trQ, id string, state fdbq.State, attempts int) {
	x.t.Helper()
	if j := x.get(id); j.State != state || j.Attempts != attempts {
		x.t.Fatalf("%s: %s after %d attempts, want %s after %d", id, j.State, j.Attempts, state, attempts)
	}
}

// limitLog collects what a monitor logs.
type limitLog struct{ bytes.Buffer }

func (l *limitLog) monitor(q *fdbq.Queue) *limitMonitor {
	return newLimitMonitor(q, fdbq.MonitorOptions{Logger: slog.New(slog.NewTextHandler(&l.Buffer, nil))})
}

// Whatever a sweep finds in the running index that it cannot act on, it
// skips, and goes on with the rest of the type, at every batch size.
func TestLimitsMonitorSkipsWhatItCannotRead(t *testing.T) {
	root := tuple.FromBytes(fdbq.DefaultPrefix)
	// The running index (12), and the deadline-keyed one of earlier
	// versions (5), which sweeps move to it.
	const activeTag, legacyTag, stampTag = 12, 5, 13
	for _, tc := range []struct {
		name string
		// spoil breaks what it likes of jobs "x" and "y", which expire
		// before the others, and says how many entries a sweep skips.
		spoil func(tx kv.Tx, before int64) int
		// left: how many of x and y still recycle; logs: what the log
		// says (nothing, when empty).
		left int
		logs string
	}{
		{"corrupt record", func(tx kv.Tx, _ int64) int {
			tx.Set(trJobKey("email", "x"), []byte{0x01, 0x02, 0x99})
			tx.Set(trJobKey("email", "y"), []byte("{not json"))
			return 2
		}, 0, "email/x"},
		{"record gone", func(tx kv.Tx, _ int64) int {
			tx.Clear(trJobKey("email", "x"))
			return 0 // nothing to change: the entry is passed over
		}, 1, ""},
		{"malformed entries", func(tx kv.Tx, before int64) int {
			var bad [][]byte
			for _, tag := range []int{activeTag, legacyTag} {
				bad = append(bad,
					root.MustPack(tuple.Tuple{tag, "email", []byte("not a time")}),
					root.MustPack(tuple.Tuple{tag, "email", int64(1)}),
					root.MustPack(tuple.Tuple{tag, "email", int64(2), "id", "extra"}),
					root.MustPack(tuple.Tuple{tag, "email", map[int]int64{activeTag: 3, legacyTag: before}[tag], 7}),
					append(root.MustPack(tuple.Tuple{tag, "email"}), 0x15, 0x01, 0xfe), // not a tuple
				)
			}
			for _, k := range bad {
				tx.Set(k, nil)
			}
			return len(bad)
		}, 2, "malformed index entry"},
		{"malformed activity stamp", func(tx kv.Tx, _ int64) int {
			// The stamps of x's and y's accepts (named by their entries),
			// values that are no versionstamp.
			sub := root.Sub(activeTag, "email")
			kvs, err := tx.GetRange(sub.Range(), kv.RangeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, e := range kvs {
				k, err := sub.Unpack(e.Key)
				if err != nil {
					t.Fatal(err)
				}
				// (lane, timeout, read version, id); a stamp is (lane of
				// its token, read version, token).
				if id := k[3].(string); id == "x" || id == "y" {
					token := int64(binary.BigEndian.Uint64(e.Value))
					tx.Set(root.MustPack(tuple.Tuple{stampTag, "email", token % 16, k[2].(int64), token}), []byte("short"))
					n++
				}
			}
			if n != 2 {
				t.Fatalf("%d activity entries of x and y", n)
			}
			return 2
		}, 0, "malformed activity stamp"},
	} {
		for _, batch := range []int{1, 2, 1000} {
			t.Run(fmt.Sprint(tc.name, "/batch=", batch), func(t *testing.T) {
				x := newTrQ(t)
				for _, id := range []string{"x", "y"} {
					x.add(fdbq.NewJob{ID: id})
					x.acceptOne(id)
				}
				var skipped int
				if err := x.q.DB().Transact(x.ctx, func(tx kv.Tx) error {
					skipped = tc.spoil(tx, x.c.Now().Add(time.Second).UnixMilli())
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				const n = 6
				for i := range n {
					x.c.Advance(time.Second)
					id := fmt.Sprintf("j%d", i)
					x.add(fdbq.NewJob{ID: id})
					x.acceptOne(id)
				}
				var log limitLog
				m := log.monitor(x.q)
				m.SetBatchSize(batch)
				x.c.Advance(time.Hour)
				st, err := limitSweep(t, m)
				if err != nil || st.Recycled != n+tc.left || st.Skipped != skipped || st.ByType["email"].Skipped != skipped {
					t.Fatalf("sweep: %+v, %v", st, err)
				}
				for i := range n {
					limitState(x, fmt.Sprintf("j%d", i), fdbq.Pending, 1)
				}
				if tc.logs == "" && log.Len() > 0 || !strings.Contains(log.String(), tc.logs) {
					t.Fatalf("log does not say %q:\n%s", tc.logs, log.String())
				}

				// What was skipped stays, is skipped again, and is logged
				// only once.
				logged := log.Len()
				st, err = limitSweep(t, m)
				if err != nil || st.Recycled != 0 || st.Skipped != skipped {
					t.Fatalf("second sweep: %+v, %v", st, err)
				}
				if log.Len() != logged {
					t.Fatalf("second sweep logged again:\n%s", log.String()[logged:])
				}
			})
		}
	}
}

// Entries passed over do not make a sweep read them again and again: more
// of them than the largest batch would otherwise fill every batch for good.
func TestLimitsMonitorPassesOverManyStaleEntries(t *testing.T) {
	x := newTrQ(t)
	const stale = 10_001 // more than the largest batch
	if err := x.q.DB().Transact(x.ctx, func(tx kv.Tx) error {
		root := tuple.FromBytes(fdbq.DefaultPrefix)
		for i := range stale {
			tx.Set(root.MustPack(tuple.Tuple{5, "email", int64(i + 1), fmt.Sprint("ghost", i)}), nil)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	x.add(fdbq.NewJob{ID: "a"})
	x.acceptOne("a")
	x.c.Advance(activityTimeout + time.Millisecond)
	st, err := limitSweep(t, newLimitMonitor(x.q, fdbq.MonitorOptions{}))
	if err != nil || st.Recycled != 1 {
		t.Fatalf("sweep: %+v, %v", st, err)
	}
	limitState(x, "a", fdbq.Pending, 1)
}

// A finished job whose record is garbage does not keep retention from
// the ones after it.
func TestLimitsMonitorExpiresPastCorruptRecord(t *testing.T) {
	x := newTrQ(t)
	for _, id := range []string{"corrupt", "a", "b"} {
		x.add(fdbq.NewJob{ID: id})
		trMust(t, "finish", x.q.Finish(x.ctx, x.q.DB(), x.acceptOne(id), nil))
		x.c.Advance(time.Second)
	}
	if err := x.q.DB().Transact(x.ctx, func(tx kv.Tx) error {
		tx.Set(trJobKey("email", "corrupt"), []byte("{not json"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	x.c.Advance(fdbq.DefaultRetention)
	st, err := limitSweep(t, newLimitMonitor(x.q, fdbq.MonitorOptions{Logger: slog.New(slog.DiscardHandler)}))
	if err != nil || st.Expired != 2 || st.Skipped != 1 {
		t.Fatalf("sweep: %+v, %v", st, err)
	}
	for _, id := range []string{"a", "b"} {
		if _, err := x.q.Get(x.ctx, x.q.DB(), "email", id); !errors.Is(err, fdbq.ErrNotFound) {
			t.Fatalf("%s after retention: %v", id, err)
		}
	}
}

// A type whose settings are garbage is reported, and the other types are
// swept.
func TestLimitsMonitorSweepsPastCorruptSettings(t *testing.T) {
	x := newTrQ(t)
	trMust(t, "set type", x.q.SetType(x.ctx, x.q.DB(), "aaa", fdbq.DefaultTypeSettings()))
	if err := x.q.DB().Transact(x.ctx, func(tx kv.Tx) error {
		tx.Set(tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{8, "aaa"}), []byte("garbage"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	x.add(fdbq.NewJob{ID: "a"})
	x.acceptOne("a")
	x.c.Advance(activityTimeout + time.Millisecond)
	st, err := limitSweep(t, newLimitMonitor(x.q, fdbq.MonitorOptions{}))
	if err == nil || !strings.Contains(err.Error(), `"aaa"`) {
		t.Fatalf("sweep error %v, want one naming the type", err)
	}
	if st.Recycled != 1 {
		t.Fatalf("sweep: %+v", st)
	}
	x.is("a", fdbq.Pending, "", 1)
}

// A count the record cannot read back — max attempts above
// math.MaxInt32, in the job or in its retry policy — is refused by Add,
// which writes nothing, instead of storing a job no one can read again.
func TestLimitsMaxAttemptsOutOfRange(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	policy := func(n int) *fdbq.RetryPolicy {
		return &fdbq.RetryPolicy{MaxAttempts: n, Backoff: fdbq.Constant, Base: time.Second}
	}
	for _, j := range []fdbq.NewJob{
		{Type: "email", ID: "max32", MaxAttempts: math.MaxInt32},
		{Type: "email", ID: "policy32", Retry: policy(math.MaxInt32)},
	} {
		if _, err := q.Add(ctx, q.DB(), j); err != nil {
			t.Fatalf("add %s: %v", j.ID, err)
		}
		if _, err := q.Get(ctx, q.DB(), "email", j.ID); err != nil {
			t.Errorf("get %s: %v", j.ID, err)
		}
	}
	for _, j := range []fdbq.NewJob{
		{Type: "email", ID: "max", MaxAttempts: math.MaxInt32 + 1},
		{Type: "email", ID: "maxint", MaxAttempts: math.MaxInt},
		{Type: "email", ID: "policy", Retry: policy(math.MaxInt32 + 1)},
	} {
		if _, err := q.Add(ctx, q.DB(), j); !errors.Is(err, fdbq.ErrInvalidJob) {
			t.Errorf("add %s: %v, want ErrInvalidJob", j.ID, err)
		}
		if _, err := q.Get(ctx, q.DB(), "email", j.ID); !errors.Is(err, fdbq.ErrNotFound) {
			t.Errorf("get %s after a refused add: %v, want ErrNotFound", j.ID, err)
		}
	}
	s := fdbq.DefaultTypeSettings()
	s.Retry.MaxAttempts = math.MaxInt32 + 1
	if err := s.Validate(); !errors.Is(err, fdbq.ErrInvalidJob) {
		t.Errorf("type settings with max attempts above MaxInt32: %v, want ErrInvalidJob", err)
	}
}
