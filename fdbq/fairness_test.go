package fdbq_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/kvtest"
	"github.com/jobstage/jobstage/kv/tuple"
)

// limitedQueue is a queue whose type "email" has settings s.
func limitedQueue(t *testing.T, s fdbq.TypeSettings) (*fdbq.Queue, *clock) {
	t.Helper()
	return openTestQueue(t, nil, s)
}

func addKeyed(t *testing.T, q *fdbq.Queue, key string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%03d", key, i)
		addJob(t, q, fdbq.NewJob{ID: id, Key: key})
		ids = append(ids, id)
	}
	return ids
}

func keysOf(ls []*fdbq.Lease) map[string]int {
	n := map[string]int{}
	for _, l := range ls {
		n[l.Key]++
	}
	return n
}

// A key's MaxRunning bounds its running jobs; other keys are not held
// back by it, and every way out of running (finish, fail, cancel, the
// monitor's recycle) frees a start.
func TestKeyMaxRunning(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.Keys = map[string]fdbq.KeyPolicy{"a": {MaxRunning: 2}}
	q, _ := limitedQueue(t, s)
	ctx := context.Background()
	addKeyed(t, q, "a", 10)
	addKeyed(t, q, "b", 5)
	ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 20})
	if got := keysOf(ls); got["a"] != 2 || got["b"] != 5 || len(ls) != 7 {
		t.Fatalf("accepted %v, want 2 of a and 5 of b", got)
	}
	if more := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 20}); len(more) != 0 {
		t.Fatalf("accepted %v past a's bound", leaseIDsOf(more))
	}
	var held []*fdbq.Lease
	for _, l := range ls {
		if l.Key == "a" {
			held = append(held, l)
		}
	}
	ends := []func(l *fdbq.Lease) error{
		func(l *fdbq.Lease) error { return q.Finish(ctx, q.DB(), l, nil) },
		func(l *fdbq.Lease) error { return q.Fail(ctx, q.DB(), l, "boom") },
	}
	for i, end := range ends {
		if err := end(held[i]); err != nil {
			t.Fatal(err)
		}
		next := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 20})
		if len(next) != 1 || next[0].Key != "a" {
			t.Fatalf("after end %d: accepted %v, want one of a", i, leaseIDsOf(next))
		}
		held[i] = next[0]
	}
	if err := q.Cancel(ctx, q.DB(), "email", held[0].ID); err != nil {
		t.Fatal(err)
	}
	if next := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 20}); len(next) != 1 || next[0].Key != "a" {
		t.Fatalf("after a cancel: accepted %v, want one of a", leaseIDsOf(next))
	}
}

// A job that the monitor recycles frees its key's start.
func TestKeyMaxRunningReleasedByRecycle(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.ActivityTimeout = time.Second
	s.KeyDefault = fdbq.KeyPolicy{MaxRunning: 1}
	q, c := limitedQueue(t, s)
	addKeyed(t, q, "a", 2)
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 2}); len(ls) != 1 {
		t.Fatalf("accepted %v, want one", leaseIDsOf(ls))
	}
	st, err := staleSweep(context.Background(), q, fdbq.MonitorOptions{})
	c.Advance(time.Hour) // the recycled job's retry is due
	if err != nil || st.Recycled != 1 {
		t.Fatalf("sweep: %+v, %v", st, err)
	}
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 2}); len(ls) != 1 {
		t.Fatalf("after the recycle: accepted %v, want one", leaseIDsOf(ls))
	}
}

// With MaxRunning 1, a key's jobs run one at a time and in the order they
// were added, across acceptors that run at once and through commits that
// conflict or come back unknown: in one zone, and spread over 16 zones,
// whose first entries an accept merges.
func TestKeySequence(t *testing.T) {
	for _, zones := range []int{1, 16} {
		t.Run(fmt.Sprintf("zones=%d", zones), func(t *testing.T) { testKeySequence(t, zones) })
	}
}

func testKeySequence(t *testing.T, zones int) {
	s := fdbq.DefaultTypeSettings()
	s.Keys = map[string]fdbq.KeyPolicy{"seq": {MaxRunning: 1, Zones: zones}}
	s.Zones = 8
	q, _ := limitedQueue(t, s)
	ids := addKeyed(t, q, "seq", 40)
	addKeyed(t, q, "other", 40)
	fdb, _ := kvtest.NewFaultyDB(q.DB(), kvtest.FaultOptions{Seed: 7, ConflictRate: 0.1, UnknownAppliedRate: 0.1, UnknownNotAppliedRate: 0.05})
	fq := fdbq.New(fdb, fdbq.Options{})
	ctx := context.Background()
	var mu sync.Mutex
	var order []string
	running := 0
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for {
				ls, err := fq.Accept(ctx, "email", fdbq.AcceptOptions{Max: 3})
				if err != nil {
					errs <- err
					return
				}
				if len(ls) == 0 {
					mu.Lock()
					done := len(order) == len(ids)
					mu.Unlock()
					if done {
						return
					}
					continue
				}
				for _, l := range ls {
					if l.Key == "seq" {
						mu.Lock()
						running++
						if running > 1 {
							errs <- fmt.Errorf("%d jobs of the sequence running", running)
						}
						order = append(order, l.ID)
						mu.Unlock()
					}
				}
				for _, l := range ls {
					if l.Key == "seq" {
						mu.Lock()
						running--
						mu.Unlock()
					}
					if err := fq.Finish(ctx, fdb, l, nil); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if !slices.Equal(order, ids) {
		t.Fatalf("the sequence ran in the order %v", order)
	}
}

// MaxStarts per Per is a rate kept in the store: the starts of a window
// are counted by every accept, and a new window opens once it ends.
func TestKeyRateLimit(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.KeyDefault = fdbq.KeyPolicy{MaxStarts: 3, Per: time.Second}
	q, c := limitedQueue(t, s)
	addKeyed(t, q, "a", 10)
	addJob(t, q, fdbq.NewJob{ID: "free"}) // no key: no bound
	got := 0
	for range 3 {
		for _, l := range acceptNoWait(t, q, fdbq.AcceptOptions{Max: 2}) {
			if l.Key == "a" {
				got++
			}
		}
	}
	if got != 3 {
		t.Fatalf("%d starts of a in one window, want 3", got)
	}
	c.Advance(999 * time.Millisecond)
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 5}); len(ls) != 0 {
		t.Fatalf("accepted %v before the window ended", leaseIDsOf(ls))
	}
	c.Advance(time.Millisecond)
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 5}); len(ls) != 3 {
		t.Fatalf("accepted %v in the next window, want 3", leaseIDsOf(ls))
	}
}

// The type's MaxRunning bounds every key together.
func TestTypeMaxRunning(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.MaxRunning = 4
	q, _ := limitedQueue(t, s)
	addKeyed(t, q, "a", 5)
	addKeyed(t, q, "b", 5)
	addJob(t, q, fdbq.NewJob{ID: "free"})
	ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 20})
	if len(ls) != 4 {
		t.Fatalf("accepted %d, want 4", len(ls))
	}
	if more := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 20}); len(more) != 0 {
		t.Fatalf("accepted %v past the type's bound", leaseIDsOf(more))
	}
	if err := q.Finish(context.Background(), q.DB(), ls[0], nil); err != nil {
		t.Fatal(err)
	}
	if more := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 20}); len(more) != 1 {
		t.Fatalf("accepted %v after a finish, want one", leaseIDsOf(more))
	}
}

// An accept held back by a key's bound waits on the key's running count,
// and a finish of one of its jobs wakes it: no polling.
func TestKeyMaxRunningWakesOnFinish(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.KeyDefault = fdbq.KeyPolicy{MaxRunning: 1}
	q, c := limitedQueue(t, s)
	addKeyed(t, q, "a", 2)
	first := acceptNoWait(t, q, fdbq.AcceptOptions{})
	if len(first) != 1 {
		t.Fatalf("accepted %v", leaseIDsOf(first))
	}
	ctx := context.Background()
	hq, hb := hookedQueue(q, c.Now)
	commits := signalCommits(hb)
	res := acceptInBackground(ctx, hq, "email", fdbq.AcceptOptions{Timeout: time.Hour})
	if err := recvWithin(t, commits, "the held-back accept"); err != nil {
		t.Fatal(err)
	}
	select {
	case out := <-res:
		t.Fatalf("an accept held back returned %v %v", leaseIDsOf(out.leases), out.err)
	default:
	}
	if err := q.Finish(ctx, q.DB(), first[0], nil); err != nil {
		t.Fatal(err)
	}
	out := recvWithin(t, res, "the accept woken by the finish")
	if out.err != nil || len(out.leases) != 1 || out.leases[0].ID != "a-001" {
		t.Fatalf("woken accept: %v %v", leaseIDsOf(out.leases), out.err)
	}
}

// Backlogged keys share accepts by their weights.
func TestKeyWeights(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.Keys = map[string]fdbq.KeyPolicy{"heavy": {Weight: 2}}
	q, _ := limitedQueue(t, s)
	for _, k := range []string{"a", "heavy", "b"} {
		if _, err := q.AddBatch(context.Background(), q.DB(), batchOf(k, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	n := map[string]int{}
	const accepts = 1200
	for range accepts {
		for k, c := range keysOf(acceptNoWait(t, q, fdbq.AcceptOptions{})) {
			n[k] += c
		}
	}
	// Expected 300, 600, 300; the binomial deviation is about 15 and 17.
	for k, want := range map[string]int{"a": 300, "heavy": 600, "b": 300} {
		if d := n[k] - want; d < -80 || d > 80 {
			t.Fatalf("shares %v, want about 1:2:1 of %d", n, accepts)
		}
	}
}

func batchOf(key string, n int) []fdbq.NewJob {
	jobs := make([]fdbq.NewJob, n)
	for i := range jobs {
		jobs[i] = fdbq.NewJob{Type: "email", ID: fmt.Sprintf("%s-%04d", key, i), Key: key}
	}
	return jobs
}

// A bad fairness key is refused before anything is written, as is a bad
// policy.
func TestKeyValidation(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	for _, key := range []string{"bad\x00key", "\xff", string(make([]byte, fdbq.MaxKeySize+1))} {
		if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "email", Key: key}); !isInvalid(err) {
			t.Errorf("key %q: %v, want ErrInvalidJob", key, err)
		}
	}
	s := fdbq.DefaultTypeSettings()
	for _, bad := range []func(*fdbq.TypeSettings){
		func(s *fdbq.TypeSettings) { s.Zones = fdbq.MaxZones + 1 },
		func(s *fdbq.TypeSettings) { s.MaxRunning = -1 },
		func(s *fdbq.TypeSettings) { s.KeyDefault.MaxStarts = 3 },
		func(s *fdbq.TypeSettings) { s.Keys = map[string]fdbq.KeyPolicy{"": {}} },
		func(s *fdbq.TypeSettings) { s.Keys = map[string]fdbq.KeyPolicy{"k": {Weight: -1}} },
	} {
		b := s
		bad(&b)
		if err := q.SetType(ctx, q.DB(), "email", b); !isInvalid(err) {
			t.Errorf("settings %+v: %v, want ErrInvalidJob", b, err)
		}
	}
}

func isInvalid(err error) bool { return errors.Is(err, fdbq.ErrInvalidJob) }

// Accepts that run at once, from queues of their own as processes would
// be, over a key whose jobs are spread over many zones, never together
// pass its bound: each reads the key's running count with a conflict.
func TestKeyMaxRunningAcrossZonesAndAcceptors(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.Keys = map[string]fdbq.KeyPolicy{"a": {MaxRunning: 3, Zones: 16}}
	q, c := limitedQueue(t, s)
	if _, err := q.AddBatch(context.Background(), q.DB(), batchOf("a", 200)); err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				p := fdbq.New(q.DB(), fdbq.Options{Now: c.Now})
				<-start
				if _, err := p.Accept(context.Background(), "email", fdbq.AcceptOptions{Max: 2}); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		ti, err := q.GetType(context.Background(), q.DB(), "email")
		if err != nil {
			t.Fatal(err)
		}
		if ti.Running != 3 {
			t.Fatalf("round %d: %d running, want the bound, 3", round, ti.Running)
		}
		page, err := q.List(context.Background(), q.DB(), "email", fdbq.ListOptions{State: fdbq.Running})
		if err != nil || len(page.Jobs) == 0 {
			t.Fatalf("list: %v", err)
		}
		if err := q.Finish(context.Background(), q.DB(), &fdbq.Lease{Job: *page.Jobs[0]}, nil); err == nil {
			t.Fatal("a finish without the lock succeeded")
		}
		if err := q.Cancel(context.Background(), q.DB(), "email", page.Jobs[0].ID); err != nil {
			t.Fatal(err)
		}
	}
}

// Remove of a running job whose record does not decode, but whose header
// does, releases its key's running count: the key's other jobs start.
func TestRemoveUnreadableRunningReleasesKey(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.KeyDefault = fdbq.KeyPolicy{MaxRunning: 1}
	q, _ := limitedQueue(t, s)
	ctx := context.Background()
	addKeyed(t, q, "a", 2)
	ls := acceptNoWait(t, q, fdbq.AcceptOptions{})
	if len(ls) != 1 {
		t.Fatalf("accepted %v", leaseIDsOf(ls))
	}
	key := unRoot.MustPack(tuple.Tuple{1, "email", ls[0].ID})
	raw := getKey(t, q.DB(), key)
	// The header intact, the rest cut short.
	unPlant(t, q.DB(), key, append(raw[:len(raw)-3:len(raw)-3], 0xff))
	if _, err := q.Get(ctx, q.DB(), "email", ls[0].ID); !errors.Is(err, fdbq.ErrCorrupt) {
		t.Fatalf("get of the spoilt record: %v", err)
	}
	if err := q.Remove(ctx, q.DB(), "email", ls[0].ID); err != nil {
		t.Fatal(err)
	}
	if more := acceptNoWait(t, q, fdbq.AcceptOptions{}); len(more) != 1 {
		t.Fatalf("after the remove: accepted %v, want the key's other job", leaseIDsOf(more))
	}
}

// A type with more zones with ready jobs than one read of the zone index
// takes is read a part at a time, and an accept that finds nothing in one
// part reads the next: no zone is hidden behind the part read last.
func TestManyZonesReadInParts(t *testing.T) {
	defer fdbq.SetMaxZoneScan(64)()
	for _, n := range []int{64, 65, 300} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			q, c := limitedQueue(t, fdbq.DefaultTypeSettings())
			ctx := context.Background()
			var jobs []fdbq.NewJob
			for i := range n {
				jobs = append(jobs, fdbq.NewJob{Type: "email", ID: fmt.Sprintf("j%05d", i), Key: fmt.Sprintf("k%05d", i)})
			}
			for len(jobs) > 0 {
				b := jobs[:min(len(jobs), 1000)]
				if _, err := q.AddBatch(ctx, q.DB(), b); err != nil {
					t.Fatal(err)
				}
				jobs = jobs[len(b):]
			}
			taken := 0
			for taken < n {
				ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 256, Timeout: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if len(ls) == 0 {
					t.Fatalf("an accept found nothing after %d of %d jobs", taken, n)
				}
				taken += len(ls)
				c.Advance(3 * time.Millisecond)
			}
		})
	}
}

// An accept that meets more zones than it reads in one transaction whose
// jobs it cannot take (after its MaxScheduledAt) reads them all once,
// then waits: it does not poll.
func TestManyBlindZonesDoNotPoll(t *testing.T) {
	q, c := limitedQueue(t, fdbq.DefaultTypeSettings())
	for i := range 40 {
		addJob(t, q, fdbq.NewJob{ID: fmt.Sprintf("j%02d", i), Key: fmt.Sprintf("k%02d", i)})
	}
	hq, hb := hookedQueue(q, c.Now)
	commits := signalCommits(hb)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := acceptInBackground(ctx, hq, "email", fdbq.AcceptOptions{Timeout: -1, MaxScheduledAt: c.Now().Add(-time.Hour)})
	// 40 zones, 8 a transaction: 5 rounds, then a wait.
	for range 5 {
		if err := recvWithin(t, commits, "a round of the accept"); err != nil {
			t.Fatal(err)
		}
	}
	quietTransactions(t, hq.DB(), "an accept that read every zone it cannot take from")
	notReturned(t, res, "the accept")
	addJob(t, q, fdbq.NewJob{ID: "early", Key: "k07", ScheduledAt: c.Now().Add(-2 * time.Hour)})
	out := recvWithin(t, res, "the accept woken by a job it can take")
	if out.err != nil || len(out.leases) != 1 || out.leases[0].ID != "early" {
		t.Fatalf("woken accept: %v %v", leaseIDsOf(out.leases), out.err)
	}
}

// An accept takes a key's jobs in order across the key's zones: with a
// window of Max (strict), exactly the first Max in priority, then
// scheduled, then id order; with the default window, jobs among the first
// window in that order. Jobs of random priorities and scheduled times,
// without a key in the type's 16 zones and in a key with 16 zones of its
// own, drained by accepts of random sizes. Seeded (JOBSTAGE_SEED).
func TestAcceptOrderAcrossZones(t *testing.T) {
	for _, seed := range modelSeedList(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d (rerun with JOBSTAGE_SEED=%d)", seed, seed)
			rng := rand.New(rand.NewPCG(seed, 11))
			s := fdbq.DefaultTypeSettings()
			s.Keys = map[string]fdbq.KeyPolicy{"k": {Zones: 16}}
			s.Zones = 16
			q, c := limitedQueue(t, s)
			for _, key := range []string{"", "k"} {
				type job struct {
					id    string
					prio  int
					sched time.Time
				}
				var jobs []job
				for i := range 100 + rng.IntN(400) {
					j := job{fmt.Sprintf("%s%04d", key, rng.IntN(10000)*10+i%10), rng.IntN(5) - 2, c.Now().Add(-time.Duration(rng.IntN(20)) * time.Second)}
					if slices.ContainsFunc(jobs, func(o job) bool { return o.id == j.id }) {
						continue
					}
					addJob(t, q, fdbq.NewJob{ID: j.id, Key: key, Priority: j.prio, ScheduledAt: j.sched})
					jobs = append(jobs, j)
				}
				slices.SortFunc(jobs, func(a, b job) int {
					return cmp.Or(cmp.Compare(b.prio, a.prio), a.sched.Compare(b.sched), strings.Compare(a.id, b.id))
				})
				var order []string
				for _, j := range jobs {
					order = append(order, j.id)
				}
				for len(order) > 0 {
					n := 1 + rng.IntN(5)
					strict := rng.IntN(2) == 0
					o := fdbq.AcceptOptions{Max: n}
					if strict {
						o.Window = n
					}
					got := leaseIDsOf(acceptNoWait(t, q, o))
					if len(got) != min(n, len(order)) {
						t.Fatalf("key %q: accept of %d took %v with %d pending", key, n, got, len(order))
					}
					window := order[:min(len(order), max(4*n, fdbq.DefaultWindow))]
					if strict {
						window = order[:len(got)]
					}
					for _, id := range got {
						if !slices.Contains(window, id) {
							t.Fatalf("key %q: accept (max %d, strict %v) took %s, not among the first %v", key, n, strict, id, window[:min(len(window), 8)])
						}
						order = slices.DeleteFunc(order, func(x string) bool { return x == id })
					}
				}
			}
		})
	}
}

// A transaction that marks many zones (a batch of adds over many keys and
// zones) bumps the type's watch key once: each zone activation waking the
// acceptors once a transaction, not once a zone, keeps the watch key from
// becoming a key written by nearly every add when zones outnumber the
// jobs in them (1,000 tenants of 16 zones each). A batch that marks no
// new zone bumps nothing; a batch of jobs scheduled for later, once.
func TestBatchMarkingManyZonesBumpsTheWatchKeyOnce(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	watch := tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{3, "email"})
	bumps := func() int64 {
		if v := rawGet(t, q, watch); v != nil {
			return kv.DecodeInt64(v)
		}
		return 0
	}
	var first []fdbq.NewJob
	for i := range 200 {
		first = append(first, fdbq.NewJob{Type: "email", ID: fmt.Sprintf("a%03d", i), Key: fmt.Sprint("tenant-", i%50)})
	}
	// The second batch: a job in each zone the first marked, none else.
	var second []fdbq.NewJob
	for _, j := range first {
		for n := 0; ; n++ {
			if id := fmt.Sprintf("b-%s-%d", j.ID, n); fdbq.ShardOf(id, fdbq.DefaultZones) == fdbq.ShardOf(j.ID, fdbq.DefaultZones) {
				second = append(second, fdbq.NewJob{Type: "email", ID: id, Key: j.Key})
				break
			}
		}
	}
	batch := func(jobs []fdbq.NewJob) {
		if _, err := q.AddBatch(ctx, q.DB(), jobs); err != nil {
			t.Fatal(err)
		}
	}
	before := bumps()
	batch(first)
	marks, err := kv.ReadTransact(ctx, q.DB(), func(tx kv.ReadTx) ([]kv.KeyValue, error) {
		return tx.GetRange(tuple.FromBytes(fdbq.DefaultPrefix).Sub(15, "email").Range(), kv.RangeOptions{})
	})
	if err != nil || len(marks) < 50 {
		t.Fatalf("200 jobs of 50 keys marked %d zones (%v)", len(marks), err)
	}
	if got := bumps() - before; got != 1 {
		t.Fatalf("a batch that marked many zones bumped the watch key %d times, want 1", got)
	}
	before = bumps()
	batch(second)
	if got := bumps() - before; got != 0 {
		t.Fatalf("a batch into marked zones bumped the watch key %d times, want 0", got)
	}
	// A batch of jobs scheduled for later bumps it once too.
	var later []fdbq.NewJob
	for i := range 100 {
		later = append(later, fdbq.NewJob{Type: "email", ID: fmt.Sprintf("later%03d", i), ScheduledAt: q.Now().Add(time.Hour)})
	}
	before = bumps()
	batch(later)
	if got := bumps() - before; got != 1 {
		t.Fatalf("a batch of 100 jobs scheduled for later bumped the watch key %d times, want 1", got)
	}
}

// Strict accepts of one key take exactly its first due jobs in order
// (priority, then scheduled time, then id) while the key's zone count
// changes between adds (16, 1, 4, 2: its jobs stay in the zones they were
// added to), jobs fall due as the clock moves, jobs are canceled and
// removed, and, for the odd seeds, every call goes through a store that
// injects conflicts and unknown commit results. Seeded (JOBSTAGE_SEED).
func TestAcceptOrderAcrossZoneChanges(t *testing.T) {
	for _, seed := range modelSeedList(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d (rerun with JOBSTAGE_SEED=%d)", seed, seed)
			rng := rand.New(rand.NewPCG(seed, 99))
			ctx := context.Background()
			s := fdbq.DefaultTypeSettings()
			zones := []int{16, 1, 4, 16, 2}
			s.Keys = map[string]fdbq.KeyPolicy{"k": {Zones: zones[0]}}
			q, c := limitedQueue(t, s)
			tr := kv.Transactor(q.DB())
			if seed%2 == 1 {
				fdb, _ := kvtest.NewFaultyDB(q.DB(), kvtest.FaultOptions{Seed: int64(seed), ConflictRate: 0.1, UnknownAppliedRate: 0.1, UnknownNotAppliedRate: 0.05})
				q = fdbq.New(fdb, fdbq.Options{Now: c.Now})
				tr = fdb
			}
			type job struct {
				id    string
				prio  int
				sched time.Time
			}
			pending := map[string]job{}
			n := 0
			for step := range 200 {
				switch r := rng.IntN(10); {
				case r < 4:
					for range 1 + rng.IntN(20) {
						n++
						j := job{fmt.Sprintf("j%05d", n), rng.IntN(3) - 1, c.Now().Add(time.Duration(rng.IntN(40)-20) * time.Second)}
						if _, err := q.Add(ctx, tr, fdbq.NewJob{Type: "email", ID: j.id, Key: "k", Priority: j.prio, ScheduledAt: j.sched}); err != nil {
							t.Fatal(err)
						}
						pending[j.id] = j
					}
				case r == 4 && len(pending) > 0:
					ids := slices.Sorted(maps.Keys(pending))
					id := ids[rng.IntN(len(ids))]
					var err error
					if rng.IntN(2) == 0 {
						err = q.Cancel(ctx, tr, "email", id)
					} else {
						err = q.Remove(ctx, tr, "email", id)
					}
					if err != nil {
						t.Fatal(err)
					}
					delete(pending, id)
				case r == 5:
					c.Advance(time.Duration(rng.IntN(10)) * time.Second)
				case r == 6:
					s.Keys = map[string]fdbq.KeyPolicy{"k": {Zones: zones[rng.IntN(len(zones))]}}
					if err := q.SetType(ctx, tr, "email", s); err != nil {
						t.Fatal(err)
					}
				default:
					var due []job
					for _, j := range pending {
						if !j.sched.After(c.Now()) {
							due = append(due, j)
						}
					}
					slices.SortFunc(due, func(a, b job) int {
						return cmp.Or(cmp.Compare(b.prio, a.prio), a.sched.Compare(b.sched), strings.Compare(a.id, b.id))
					})
					m, w := 1+rng.IntN(6), 1
					if rng.IntN(2) == 0 {
						w = m
					}
					ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: m, Window: w})
					if err != nil {
						t.Fatal(err)
					}
					got := slices.Sorted(slices.Values(leaseIDsOf(ls)))
					var want []string
					for _, j := range due[:min(m, len(due))] {
						want = append(want, j.id)
					}
					if slices.Sort(want); !slices.Equal(got, want) {
						t.Fatalf("step %d, zones %d: an accept of %d (window %d) took %v, want %v", step, s.Keys["k"].Zones, m, w, got, want)
					}
					for _, id := range got {
						delete(pending, id)
					}
				}
			}
		})
	}
}
