package fdbq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/kvtest"
	"github.com/jobstage/jobstage/kv/tuple"
)

// addManyPriorities adds n jobs of type "email" at priorities 1 to n, all
// scheduled after a delay, in batches of 1000; with due, each priority also
// gets a job due now.
func addManyPriorities(t testing.TB, q *fdbq.Queue, now time.Time, n int, delay time.Duration, due bool) {
	t.Helper()
	var jobs []fdbq.NewJob
	flush := func() {
		if _, err := q.AddBatch(context.Background(), q.DB(), jobs); err != nil {
			t.Fatal(err)
		}
		jobs = jobs[:0]
	}
	for i := 1; i <= n; i++ {
		jobs = append(jobs, fdbq.NewJob{Type: "email", ID: fmt.Sprintf("later%05d", i), Priority: i, ScheduledAt: now.Add(delay)})
		if due {
			jobs = append(jobs, fdbq.NewJob{Type: "email", ID: fmt.Sprintf("due%05d", i), Priority: i})
		}
		if len(jobs) >= 1000 {
			flush()
		}
	}
	if len(jobs) > 0 {
		flush()
	}
}

// acceptCounted runs one non-blocking accept of up to max jobs on q and
// returns what it took and what it read.
func acceptCounted(t *testing.T, q *fdbq.Queue, c *readCounts, max int) (ids []string, gets, ranges, keys int64) {
	t.Helper()
	g0, r0, k0 := c.snapshot()
	ls, err := q.Accept(context.Background(), "email", fdbq.AcceptOptions{Max: max})
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	g, r, k := c.snapshot()
	return leaseIDsOf(ls), g - g0, r - r0, k - k0
}

// Jobs not due yet, each at a priority of its own and all above the one
// due job, cost an accept nothing: it reads a handful of keys whatever
// their number. (It read one key for each priority.)
func TestAcceptReadsBoundedManyPriorities(t *testing.T) {
	q, clock := newQueue(t)
	const n = 10_000
	addManyPriorities(t, q, clock.Now(), n, time.Hour, false)
	addJob(t, q, fdbq.NewJob{ID: "due"})
	cdb, counts := countingDB(q.DB())
	cq := fdbq.New(cdb, fdbq.Options{Now: clock.Now})

	ids, gets, ranges, keys := acceptCounted(t, cq, counts, 1)
	if !slices.Equal(ids, []string{"due"}) {
		t.Fatalf("accepted %v, want [due]", ids)
	}
	if gets > 4 || ranges > 4 || keys > 4 {
		t.Fatalf("one accept over %d priorities of jobs not due read %d keys, %d ranges (%d keys): want at most 4 of each", n, gets, ranges, keys)
	}
	ids, gets, ranges, keys = acceptCounted(t, cq, counts, 1)
	if len(ids) != 0 {
		t.Fatalf("accepted %v with nothing due", ids)
	}
	if gets > 4 || ranges > 4 || keys > 4 {
		t.Fatalf("an accept that found nothing due read %d keys, %d ranges (%d keys): want at most 4 of each", gets, ranges, keys)
	}
}

// With a due job and a job not due at each of 10,000 priorities, an
// accept reads a window of due jobs, not a band at a time. (It read three
// ranges for each of 256 priority bands.)
func TestAcceptReadsBoundedManyPrioritiesAllDue(t *testing.T) {
	q, clock := newQueue(t)
	const n = 10_000
	addManyPriorities(t, q, clock.Now(), n, time.Hour, true)
	cdb, counts := countingDB(q.DB())
	cq := fdbq.New(cdb, fdbq.Options{Now: clock.Now})

	ids, gets, ranges, keys := acceptCounted(t, cq, counts, 1)
	if !slices.Equal(ids, []string{fmt.Sprintf("due%05d", n)}) {
		t.Fatalf("accepted %v, want the highest priority's due job", ids)
	}
	// The first entries of each of the default zones, merged (shardWindow:
	// half as many again as the window, and 2 more a zone), and the
	// zones' marks.
	if maxRanges, maxKeys := int64(4+fdbq.DefaultZones), int64(2*fdbq.DefaultWindow+2*fdbq.DefaultZones+4); gets > 4 || ranges > maxRanges || keys > maxKeys {
		t.Fatalf("one accept read %d keys, %d ranges (%d keys): want at most 4 keys, %d ranges and %d keys in them", gets, ranges, keys, maxRanges, maxKeys)
	}
}

// A pending job whose record, or the copy of it in its index entry, does
// not decode, or whose entry is not one fdbq writes, is skipped: Accept
// takes the others, logs the job once, and a strict accept (a window of
// one) is not stuck behind it.
func TestAcceptSkipsCorruptPendingJobs(t *testing.T) {
	root := tuple.FromBytes(fdbq.DefaultPrefix)
	big := json.RawMessage(`"` + strings.Repeat("x", 4000) + `"`)
	for _, tc := range []struct {
		name string
		data json.RawMessage
		// spoil breaks job "bad", added with priority 10 at sched, later
		// than now by later.
		spoil func(tx kv.Tx, sched int64)
		log   string
		later time.Duration
	}{
		{"copy in the entry", nil, func(tx kv.Tx, sched int64) {
			tx.Set(trJobKey("email", "bad"), []byte{0x01, 0x02, 0x99})
			tx.Set(root.MustPack(tuple.Tuple{2, "email", "", fdbq.ShardOf("bad", fdbq.DefaultZones), -10, sched, "bad"}), []byte{0x01, 0x02, 0x99})
		}, "bad", 0},
		{"copy in a scheduled entry", nil, func(tx kv.Tx, sched int64) {
			tx.Set(trJobKey("email", "bad"), []byte{0x01, 0x02, 0x99})
			tx.Set(root.MustPack(tuple.Tuple{11, "email", sched, -10, "", fdbq.ShardOf("bad", fdbq.DefaultZones), "bad"}), []byte{0x01, 0x02, 0x99})
		}, "bad", time.Minute},
		{"record", big, func(tx kv.Tx, _ int64) {
			tx.Set(trJobKey("email", "bad"), []byte("{not json"))
		}, "bad", 0},
		{"entry", nil, func(tx kv.Tx, sched int64) {
			tx.Clear(root.MustPack(tuple.Tuple{2, "email", "", fdbq.ShardOf("bad", fdbq.DefaultZones), -10, sched, "bad"}))
			tx.Set(root.MustPack(tuple.Tuple{2, "email", "", fdbq.ShardOf("bad", fdbq.DefaultZones), -10, "not a time", "bad"}), nil)
		}, "malformed", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log strings.Builder
			q, c := newLoggedQueue(t, slog.New(slog.NewTextHandler(&log, nil)))
			var at time.Time
			if tc.later > 0 {
				at = c.Now().Add(tc.later)
			}
			bad := addJob(t, q, fdbq.NewJob{ID: "bad", Priority: 10, Data: tc.data, ScheduledAt: at})
			addJob(t, q, fdbq.NewJob{ID: "good1", Priority: 5, Data: tc.data})
			addJob(t, q, fdbq.NewJob{ID: "good2", Data: tc.data})
			if err := q.DB().Transact(context.Background(), func(tx kv.Tx) error {
				tc.spoil(tx, bad.ScheduledAt.UnixMilli())
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			c.Advance(tc.later)
			if got := leaseIDsOf(acceptNoWait(t, q, fdbq.AcceptOptions{Max: 3})); !slices.Equal(got, []string{"good1", "good2"}) {
				t.Fatalf("accepted %v, want [good1 good2]", got)
			}
			if n := strings.Count(log.String(), "\n"); n != 1 || !strings.Contains(log.String(), tc.log) {
				t.Fatalf("logged %d lines, want one naming %q:\n%s", n, tc.log, log.String())
			}
			if got := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 3}); len(got) != 0 {
				t.Fatalf("accepted %v with only the bad job pending", leaseIDsOf(got))
			}
			c.Advance(time.Second)
			addJob(t, q, fdbq.NewJob{ID: "good3", Data: tc.data})
			if got := leaseIDsOf(acceptNoWait(t, q, fdbq.AcceptOptions{Max: 1, Window: 1})); !slices.Equal(got, []string{"good3"}) {
				t.Fatalf("strict accept took %v, want [good3]", got)
			}
			if n := strings.Count(log.String(), "\n"); n != 1 {
				t.Fatalf("logged %d lines, want the bad job once:\n%s", n, log.String())
			}
		})
	}
}

// indexCounts returns how many entries the type's ready index (P, 2) and
// scheduled index (P, 11) hold.
func indexCounts(t *testing.T, q *fdbq.Queue, typ string) (ready, scheduled int) {
	t.Helper()
	root := tuple.FromBytes(fdbq.DefaultPrefix)
	n := func(tag int) int {
		kvs, err := kv.ReadTransact(context.Background(), q.DB(), func(tx kv.ReadTx) ([]kv.KeyValue, error) {
			return tx.GetRange(root.Sub(tag, typ).Range(), kv.RangeOptions{})
		})
		if err != nil {
			t.Fatal(err)
		}
		return len(kvs)
	}
	return n(2), n(11)
}

// Versions before the scheduled index kept every pending job in (P, 2),
// the ready index, jobs not due yet among the due ones. An accept passes
// over those, moves them to the scheduled index a window at a time, and
// takes the due job below them; they are taken once due.
func TestAcceptEarlierLayout(t *testing.T) {
	// Those versions kept a type's jobs in one zone.
	s := fdbq.DefaultTypeSettings()
	s.Zones = 1
	q, c := openTestQueue(t, nil, s)
	root := tuple.FromBytes(fdbq.DefaultPrefix)
	const n = 600
	addManyPriorities(t, q, c.Now(), n, time.Hour, false)
	addJob(t, q, fdbq.NewJob{ID: "due"})
	// Where the earlier layout kept them.
	if err := q.DB().Transact(context.Background(), func(tx kv.Tx) error {
		sub := root.Sub(11, "email")
		kvs, err := tx.GetRange(sub.Range(), kv.RangeOptions{})
		if err != nil {
			return err
		}
		for _, e := range kvs {
			k, err := sub.Unpack(e.Key)
			if err != nil {
				return err
			}
			tx.Clear(e.Key)
			tx.Set(root.MustPack(tuple.Tuple{2, "email", k[2], k[3], k[1], k[0], k[4]}), e.Value)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if ready, scheduled := indexCounts(t, q, "email"); ready != n+1 || scheduled != 0 {
		t.Fatalf("%d entries in the ready index and %d in the scheduled one, want %d and 0", ready, scheduled, n+1)
	}
	if got := leaseIDsOf(acceptNoWait(t, q, fdbq.AcceptOptions{})); !slices.Equal(got, []string{"due"}) {
		t.Fatalf("accepted %v, want [due]", got)
	}
	if ready, scheduled := indexCounts(t, q, "email"); ready != 0 || scheduled != n {
		t.Fatalf("after an accept, %d entries in the ready index and %d in the scheduled one, want 0 and %d", ready, scheduled, n)
	}
	if got := acceptNoWait(t, q, fdbq.AcceptOptions{}); len(got) != 0 {
		t.Fatalf("accepted %v before it was due", leaseIDsOf(got))
	}
	if page, err := q.List(context.Background(), q.DB(), "email", fdbq.ListOptions{State: fdbq.Pending, Limit: 1000}); err != nil || len(page.Jobs) != n {
		t.Fatalf("listed %d pending jobs (%v), want %d", len(page.Jobs), err, n)
	}
	c.Advance(time.Hour)
	if got := leaseIDsOf(acceptNoWait(t, q, fdbq.AcceptOptions{Max: 2})); !slices.Equal(got, []string{fmt.Sprintf("later%05d", n), fmt.Sprintf("later%05d", n-1)}) {
		t.Fatalf("accepted %v once due, want the two highest priorities", got)
	}
}

// Clocks that disagree move when a job is taken by how much they
// disagree, and never lose one: the writer's clock decides the index a job
// goes to, the acceptor's whether it is due.
func TestAcceptClockSkew(t *testing.T) {
	q, c := newQueue(t)
	ahead := fdbq.New(q.DB(), fdbq.Options{Now: func() time.Time { return c.Now().Add(time.Hour) }})
	behind := fdbq.New(q.DB(), fdbq.Options{Now: func() time.Time { return c.Now().Add(-time.Hour) }})

	// A writer ahead indexes a job due in half an hour as due; a writer
	// behind indexes a job due now as not due.
	addJob(t, ahead, fdbq.NewJob{ID: "soon", ScheduledAt: c.Now().Add(30 * time.Minute)})
	addJob(t, behind, fdbq.NewJob{ID: "now", ScheduledAt: c.Now()})
	if got := leaseIDsOf(acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10})); !slices.Equal(got, []string{"now"}) {
		t.Fatalf("accepted %v, want [now]", got)
	}
	c.Advance(30 * time.Minute)
	if got := leaseIDsOf(acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10})); !slices.Equal(got, []string{"soon"}) {
		t.Fatalf("accepted %v half an hour on, want [soon]", got)
	}

	// An acceptor behind takes a job an hour late, one ahead an hour
	// early.
	addJob(t, q, fdbq.NewJob{ID: "due"})
	addJob(t, q, fdbq.NewJob{ID: "in30m", ScheduledAt: c.Now().Add(30 * time.Minute)})
	if got := acceptNoWait(t, behind, fdbq.AcceptOptions{Max: 10}); len(got) != 0 {
		t.Fatalf("an acceptor an hour behind took %v", leaseIDsOf(got))
	}
	if got := leaseIDsOf(acceptNoWait(t, ahead, fdbq.AcceptOptions{Max: 10})); !slices.Equal(got, []string{"due", "in30m"}) {
		t.Fatalf("an acceptor an hour ahead took %v, want [due in30m]", got)
	}
}

// When more jobs come due at once than an accept reads of the scheduled
// index, each accept moves the next ones to the ready index, so priority
// order is back after a few accepts, each reading a bounded number of
// keys.
func TestAcceptPromotesDueBacklog(t *testing.T) {
	q, c := newQueue(t)
	const n = 3 * fdbq.DefaultWindow
	jobs := make([]fdbq.NewJob, n)
	for i := range jobs {
		// The later, the higher: the highest priority is last by time.
		jobs[i] = fdbq.NewJob{Type: "email", ID: fmt.Sprintf("j%04d", i), Priority: i, ScheduledAt: c.Now().Add(time.Second + time.Duration(i)*time.Millisecond)}
	}
	if _, err := q.AddBatch(context.Background(), q.DB(), jobs); err != nil {
		t.Fatal(err)
	}
	c.Advance(2 * time.Second)
	cdb, counts := countingDB(q.DB())
	cq := fdbq.New(cdb, fdbq.Options{Now: c.Now})
	top := fmt.Sprintf("j%04d", n-1)
	for k := 1; ; k++ {
		ids, gets, ranges, keys := acceptCounted(t, cq, counts, 1)
		if len(ids) != 1 {
			t.Fatalf("accept %d took %v", k, ids)
		}
		// Point reads: four of its own, as it starts a job, the type's
		// interest count (doc.go, Waking), and the marks of the zones the
		// jobs it promotes go to (16 default zones of one key: 15 more).
		// Range reads: of the ready index, the key's zones' marks and the
		// first entries of each zone (shardWindow: half as many again as
		// the window, and 2 more a zone).
		if gets > 4+fdbq.DefaultZones || ranges > 6+fdbq.DefaultZones || keys > 4*fdbq.DefaultWindow+2*fdbq.DefaultZones+4 {
			t.Fatalf("accept %d read %d keys, %d ranges (%d keys)", k, gets, ranges, keys)
		}
		if ids[0] == top {
			break
		}
		if k == 3 {
			t.Fatalf("the highest priority not taken in %d accepts", k)
		}
	}
	pending, err := q.Count(context.Background(), q.DB(), "email", fdbq.Pending)
	if ready, scheduled := indexCounts(t, q, "email"); err != nil || int64(ready+scheduled) != pending {
		t.Fatalf("%d entries in the ready index and %d in the scheduled one, %d jobs pending (%v)", ready, scheduled, pending, err)
	}
}

// Jobs scheduled a little ahead come due in the scheduled index while 32
// workers take others: accepts take them from it and move them to the
// ready index as they do, and each job still runs once. 2,000 jobs (200
// under -short): a batch of 1000 comes due faster than the workers take
// it, so accepts move jobs.
func TestConcurrentAcceptScheduled(t *testing.T) {
	db := openDisk(t, t.TempDir())
	q := fdbq.New(db, fdbq.Options{})
	if err := q.SetType(context.Background(), db, concType, concSettings()); err != nil {
		t.Fatal(err)
	}
	r := concRun{jobs: concJobs() / 25, workers: 32, max: 16, addBatch: 1000, scheduled: 300 * time.Millisecond}
	start := time.Now()
	led := runConcurrent(t, q, r)
	logStats(t, db, r.jobs, time.Since(start))
	checkConcurrent(t, q, led)
}

// The same through a store that injects faults, commit_unknown_result
// included, into the accepts and into their moves.
func TestConcurrentAcceptScheduledFaults(t *testing.T) {
	inner := openDisk(t, t.TempDir())
	db, fb := kvtest.NewFaultyDB(inner, kvtest.DefaultFaultOptions(20260315))
	q := fdbq.New(db, fdbq.Options{})
	if err := q.SetType(context.Background(), db, concType, concSettings()); err != nil {
		t.Fatal(err)
	}
	r := concRun{jobs: concJobs() / 25, workers: 32, max: 16, addBatch: 250, groups: 4, scheduled: 300 * time.Millisecond}
	start := time.Now()
	led := runConcurrent(t, q, r)
	logStats(t, db, r.jobs, time.Since(start))
	t.Logf("faults: %+v", fb.Counts())
	fb.SetEnabled(false)
	checkConcurrent(t, q, led)
}

// An accept that serves several keys reads of each key's zones what that
// key's share needs, not the batch: with two keys of 1,000 jobs in 64
// zones each, a strict accept of 128 (a window of 128) takes 64 of each
// and reads each key's zones once, 5 entries a zone. (It counted the
// leases taken of the first key against the second, and read the
// second's zones on until 128 were before the cut: with these ids, when
// "b" came second.) The first accept of a new queue, twelve times: the
// keys' order is random, the reads of each key are not.
func TestAcceptReadsEachKeyForItsShare(t *testing.T) {
	ctx := context.Background()
	s := fdbq.DefaultTypeSettings()
	s.Zones = 64
	const n = 128
	for round := range 12 {
		q, _ := openTestQueue(t, nil, s)
		for _, key := range []string{"a", "b"} {
			var jobs []fdbq.NewJob
			for i := range 1000 {
				jobs = append(jobs, fdbq.NewJob{Type: "email", ID: fmt.Sprintf("%s%04d", key, i), Key: key})
			}
			if _, err := q.AddBatch(ctx, q.DB(), jobs); err != nil {
				t.Fatal(err)
			}
		}
		cdb, counts := countingDB(q.DB())
		cq := fdbq.New(cdb, fdbq.Options{Now: q.Now})
		ls, err := cq.Accept(ctx, "email", fdbq.AcceptOptions{Max: n, Window: 1})
		if err != nil || len(ls) != n {
			t.Fatalf("accepted %d jobs (%v), want %d", len(ls), err, n)
		}
		// Each key's zones: 1.5 × 128 / 64 + 2 = 5 entries each, 320 a
		// key; the marks of both keys besides.
		if _, _, keys := counts.snapshot(); keys > 2*320+2*64+8 {
			t.Fatalf("round %d: a strict accept of %d from two keys of 64 zones read %d keys, want at most %d", round, n, keys, 2*320+2*64+8)
		}
	}
}
