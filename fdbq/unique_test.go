package fdbq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/kvtest"
)

func uniqueJob(data string, u fdbq.Unique) fdbq.NewJob {
	return fdbq.NewJob{Type: "email", Data: json.RawMessage(data), Unique: &u}
}

func mustAdd(t *testing.T, q *fdbq.Queue, j fdbq.NewJob) *fdbq.Job {
	t.Helper()
	got, err := q.Add(context.Background(), q.DB(), j)
	if err != nil {
		t.Fatalf("add %s: %v", j.Data, err)
	}
	return got
}

func checkUniqueEntries(t *testing.T, q *fdbq.Queue, want ...string) {
	t.Helper()
	ids, err := q.UniqueEntries(context.Background(), "email")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("unique index names %q, want %q", ids, want)
	}
}

func TestUniqueByData(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	a := mustAdd(t, q, uniqueJob(`{"to":"x","n":1}`, fdbq.Unique{}))
	if a.Added != fdbq.AddedNew {
		t.Fatalf("first add: %q", a.Added)
	}
	// The same data with its members in another order is a duplicate.
	b := mustAdd(t, q, uniqueJob(`{ "n":1, "to":"x" }`, fdbq.Unique{}))
	if b.Added != fdbq.AddedDuplicate || b.ID != a.ID || string(b.Data) != `{"to":"x","n":1}` {
		t.Fatalf("duplicate add: %q %s %s, want the job %s", b.Added, b.ID, b.Data, a.ID)
	}
	c := mustAdd(t, q, uniqueJob(`{"to":"x","n":2}`, fdbq.Unique{}))
	if c.Added != fdbq.AddedNew || c.ID == a.ID {
		t.Fatalf("other data: %q %s", c.Added, c.ID)
	}
	// A job without Unique is not held back by, nor holds back, a
	// unique one.
	d := mustAdd(t, q, fdbq.NewJob{Type: "email", Data: json.RawMessage(`{"to":"x","n":1}`)})
	if d.Added != "" || d.ID == a.ID {
		t.Fatalf("plain add: %q %s", d.Added, d.ID)
	}
	if n, _ := q.Count(ctx, q.DB(), "email", fdbq.Pending); n != 3 {
		t.Fatalf("%d pending, want 3", n)
	}
	if ids, _ := q.UniqueEntries(ctx, "email"); len(ids) != 2 {
		t.Fatalf("unique index %q, want 2 entries", ids)
	}
}

func TestUniqueByFields(t *testing.T) {
	q, _ := newQueue(t)
	by := fdbq.Unique{Fields: []string{"to", "lang"}}
	a := mustAdd(t, q, uniqueJob(`{"to":"x","lang":"en","body":"one"}`, by))
	for _, tc := range []struct {
		data string
		dup  bool
	}{
		{`{"lang":"en","to":"x","body":"two"}`, true},
		{`{"to":"x","lang":"fr","body":"one"}`, false},
		{`{"to":"x","body":"one"}`, false},               // lang absent
		{`{"to":"x","lang":null,"body":"one"}`, false},   // lang null, not absent
		{`{"to":"x","lang":"en","extra":[1,2,3]}`, true}, // other fields do not count
	} {
		got := mustAdd(t, q, uniqueJob(tc.data, by))
		if dup := got.Added == fdbq.AddedDuplicate && got.ID == a.ID; dup != tc.dup {
			t.Fatalf("%s: %q %s, want duplicate %v", tc.data, got.Added, got.ID, tc.dup)
		}
	}
	// The order of the field names does not matter.
	got := mustAdd(t, q, uniqueJob(`{"to":"x","lang":"en"}`, fdbq.Unique{Fields: []string{"lang", "to", "to"}}))
	if got.Added != fdbq.AddedDuplicate || got.ID != a.ID {
		t.Fatalf("fields in another order: %q %s", got.Added, got.ID)
	}
	for _, data := range []string{`[1]`, `"s"`, `null`, ``} {
		_, err := q.Add(context.Background(), q.DB(), uniqueJob(data, by))
		if !errors.Is(err, fdbq.ErrInvalidJob) {
			t.Fatalf("fields of data %q: %v, want ErrInvalidJob", data, err)
		}
	}
}

func TestUniqueOptionsAreChecked(t *testing.T) {
	q, _ := newQueue(t)
	for _, u := range []fdbq.Unique{
		{Window: -time.Second},
		{States: 1 << 6},
		{OnDuplicate: 7},
		{Fields: []string{""}},
		{Fields: make([]string, fdbq.MaxUniqueFields+1)},
	} {
		_, err := q.Add(context.Background(), q.DB(), uniqueJob(`{}`, u))
		if !errors.Is(err, fdbq.ErrInvalidJob) {
			t.Fatalf("%+v: %v, want ErrInvalidJob", u, err)
		}
	}
	checkUniqueEntries(t, q)
}

// finishOne accepts the only pending job of "email" and ends it.
func finishOne(t *testing.T, q *fdbq.Queue, how fdbq.AttemptEnd) *fdbq.Job {
	t.Helper()
	ctx := context.Background()
	ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 {
		t.Fatalf("accept: %v %v", ls, err)
	}
	if _, err := q.End(ctx, q.DB(), ls[0], fdbq.Ending{How: how, Cause: "x"}); err != nil {
		t.Fatal(err)
	}
	j, err := q.Get(ctx, q.DB(), "email", ls[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func TestUniqueStatesAndWindow(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	u := fdbq.Unique{Window: time.Hour}
	a := mustAdd(t, q, uniqueJob(`1`, u))
	ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 {
		t.Fatal(ls, err)
	}
	if got := mustAdd(t, q, uniqueJob(`1`, u)); got.Added != fdbq.AddedDuplicate || got.State != fdbq.Running {
		t.Fatalf("while running: %q %s", got.Added, got.State)
	}
	if err := q.Finish(ctx, q.DB(), ls[0], nil); err != nil {
		t.Fatal(err)
	}
	c.Advance(59 * time.Minute)
	if got := mustAdd(t, q, uniqueJob(`1`, u)); got.Added != fdbq.AddedDuplicate || got.ID != a.ID {
		t.Fatalf("succeeded 59 minutes ago, window 1h: %q %s", got.Added, got.ID)
	}
	if got := mustAdd(t, q, uniqueJob(`1`, fdbq.Unique{})); got.Added != fdbq.AddedDuplicate {
		t.Fatalf("no window: %q", got.Added)
	}
	c.Advance(time.Minute)
	b := mustAdd(t, q, uniqueJob(`1`, u))
	if b.Added != fdbq.AddedNew || b.ID == a.ID {
		t.Fatalf("succeeded an hour ago, window 1h: %q %s", b.Added, b.ID)
	}
	checkUniqueEntries(t, q, b.ID)

	// A failed job does not count by default; it does when named.
	b = finishOne(t, q, fdbq.AttemptCanceled)
	if b.Outcome != fdbq.Canceled {
		t.Fatalf("outcome %s", b.Outcome)
	}
	withCanceled := fdbq.Unique{States: fdbq.UniqueDefault | fdbq.UniqueCanceled}
	if got := mustAdd(t, q, uniqueJob(`1`, withCanceled)); got.Added != fdbq.AddedDuplicate || got.ID != b.ID {
		t.Fatalf("canceled counts when named: %q %s", got.Added, got.ID)
	}
	d := mustAdd(t, q, uniqueJob(`1`, u))
	if d.Added != fdbq.AddedNew || d.ID == b.ID {
		t.Fatalf("canceled does not count by default: %q %s", d.Added, d.ID)
	}
}

// TestUniqueRunningDoesNotCount: with States pending alone, a running
// job is no duplicate, and the new job takes the unique entry.
func TestUniqueRunningDoesNotCount(t *testing.T) {
	q, _ := newQueue(t)
	u := fdbq.Unique{States: fdbq.UniquePending}
	a := mustAdd(t, q, uniqueJob(`1`, u))
	if got := mustAdd(t, q, uniqueJob(`1`, u)); got.Added != fdbq.AddedDuplicate {
		t.Fatalf("pending: %q", got.Added)
	}
	ls, err := q.Accept(context.Background(), "email", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 {
		t.Fatal(ls, err)
	}
	b := mustAdd(t, q, uniqueJob(`1`, u))
	if b.Added != fdbq.AddedNew || b.ID == a.ID {
		t.Fatalf("running: %q %s", b.Added, b.ID)
	}
	checkUniqueEntries(t, q, b.ID)
}

func TestUniqueReplace(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	by := fdbq.Unique{Fields: []string{"user"}, OnDuplicate: fdbq.DuplicateReplace}
	a := mustAdd(t, q, uniqueJob(`{"user":7,"v":1}`, by))
	r := uniqueJob(`{"user":7,"v":2}`, by)
	r.Priority = 5
	got := mustAdd(t, q, r)
	if got.Added != fdbq.AddedReplaced || got.ID != a.ID || string(got.Data) != `{"user":7,"v":2}` || got.Priority != 5 {
		t.Fatalf("replace: %+v", got)
	}
	stored, err := q.Get(ctx, q.DB(), "email", a.ID)
	if err != nil || string(stored.Data) != `{"user":7,"v":2}` {
		t.Fatalf("stored after replace: %+v %v", stored, err)
	}
	if n, _ := q.Count(ctx, q.DB(), "email", fdbq.Pending); n != 1 {
		t.Fatalf("%d pending, want 1", n)
	}
	// A finished duplicate is added again, under its id.
	finishOne(t, q, fdbq.AttemptSucceeded)
	got = mustAdd(t, q, uniqueJob(`{"user":7,"v":3}`, by))
	if got.Added != fdbq.AddedReplaced || got.ID != a.ID || got.State != fdbq.Pending {
		t.Fatalf("replace a finished job: %+v", got)
	}
	checkUniqueEntries(t, q, a.ID)
}

func TestUniqueRefuse(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	by := fdbq.Unique{OnDuplicate: fdbq.DuplicateRefuse}
	a := mustAdd(t, q, uniqueJob(`"x"`, by))
	_, err := q.Add(ctx, q.DB(), uniqueJob(`"x"`, by))
	var de *fdbq.DuplicateError
	if !errors.Is(err, fdbq.ErrDuplicate) || !errors.As(err, &de) || de.ID != a.ID || de.State != fdbq.Pending {
		t.Fatalf("refuse: %v (%+v)", err, de)
	}
	// A batch with a refused job adds nothing.
	_, err = q.AddBatch(ctx, q.DB(), []fdbq.NewJob{{Type: "email", ID: "other"}, uniqueJob(`"x"`, by)})
	if !errors.Is(err, fdbq.ErrDuplicate) {
		t.Fatalf("batch: %v", err)
	}
	if _, err := q.Get(ctx, q.DB(), "email", "other"); !errors.Is(err, fdbq.ErrNotFound) {
		t.Fatalf("the batch's other job: %v", err)
	}
}

func TestUniqueInOneBatch(t *testing.T) {
	q, _ := newQueue(t)
	js, err := q.AddBatch(context.Background(), q.DB(), []fdbq.NewJob{
		uniqueJob(`{"a":1}`, fdbq.Unique{}),
		uniqueJob(`{"a":2}`, fdbq.Unique{}),
		uniqueJob(`{"a":1}`, fdbq.Unique{}),
		uniqueJob(`{"a":1}`, fdbq.Unique{OnDuplicate: fdbq.DuplicateReplace}),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []fdbq.Added{fdbq.AddedNew, fdbq.AddedNew, fdbq.AddedDuplicate, fdbq.AddedReplaced}
	for i, j := range js {
		if j.Added != want[i] {
			t.Fatalf("job %d: %q, want %q", i, j.Added, want[i])
		}
	}
	if js[2].ID != js[0].ID || js[3].ID != js[0].ID || js[1].ID == js[0].ID {
		t.Fatalf("ids %s %s %s %s", js[0].ID, js[1].ID, js[2].ID, js[3].ID)
	}
}

// TestUniqueEntryIsReleased: removing a job, retention sweeping it, or an
// add that gives its id other unique data clears the entry that named it,
// so the unique index holds no entry for a job that is gone.
func TestUniqueEntryIsReleased(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.Retention = time.Hour
	q, c := openTestQueue(t, nil, s)
	ctx := context.Background()
	a := mustAdd(t, q, uniqueJob(`"a"`, fdbq.Unique{}))
	if err := q.Remove(ctx, q.DB(), "email", a.ID); err != nil {
		t.Fatal(err)
	}
	checkUniqueEntries(t, q)

	b := mustAdd(t, q, uniqueJob(`"b"`, fdbq.Unique{}))
	finishOne(t, q, fdbq.AttemptSucceeded)
	c.Advance(2 * time.Hour)
	st, err := fdbq.NewMonitor(q, fdbq.MonitorOptions{Clock: c.Now}).Sweep(ctx)
	if err != nil || st.Expired != 1 {
		t.Fatalf("sweep: %+v %v", st, err)
	}
	checkUniqueEntries(t, q)
	if got := mustAdd(t, q, uniqueJob(`"b"`, fdbq.Unique{})); got.Added != fdbq.AddedNew || got.ID == b.ID {
		t.Fatalf("after the sweep: %q %s", got.Added, got.ID)
	}

	// The caller's id given to other unique data: the old entry goes.
	x := uniqueJob(`"x1"`, fdbq.Unique{})
	x.ID = "mine"
	mustAdd(t, q, x)
	x = uniqueJob(`"x2"`, fdbq.Unique{})
	x.ID = "mine"
	if got := mustAdd(t, q, x); got.Added != fdbq.AddedNew || string(got.Data) != `"x2"` {
		t.Fatalf("re-add of mine: %+v", got)
	}
	ids, _ := q.UniqueEntries(ctx, "email")
	if len(ids) != 2 {
		t.Fatalf("unique index %q, want the \"b\" job's and mine once", ids)
	}
	// A plain add of the id keeps its unique data.
	x = fdbq.NewJob{Type: "email", ID: "mine", Data: json.RawMessage(`"x3"`)}
	mustAdd(t, q, x)
	if got := mustAdd(t, q, uniqueJob(`"x2"`, fdbq.Unique{})); got.Added != fdbq.AddedDuplicate || got.ID != "mine" {
		t.Fatalf("after a plain add: %q %s", got.Added, got.ID)
	}
}

// rerun is a Transactor whose Transact runs fn to its commit and then
// runs it again in a new transaction: a retry loop that could not learn
// that its commit applied (FoundationDB's own Transact retries
// commit_unknown_result so, where kv.DB's commit markers are not used).
type rerun struct{ *kv.DB }

func (r rerun) Transact(ctx context.Context, fn func(kv.Tx) error) error {
	if err := r.DB.Transact(ctx, fn); err != nil {
		return err
	}
	return r.DB.Transact(ctx, fn)
}

// TestUniqueAddRunTwice: an add whose transaction function runs again
// after its commit applied answers what the first run did (added,
// replaced), not that the job is a duplicate of itself; the job's
// record carries the call's token (NewJob's LastAdd), which tells it.
func TestUniqueAddRunTwice(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	tr := rerun{q.DB()}
	a, err := q.Add(ctx, tr, uniqueJob(`1`, fdbq.Unique{}))
	if err != nil || a.Added != fdbq.AddedNew {
		t.Fatalf("add run twice: %v %v, want %q", a, err, fdbq.AddedNew)
	}
	r, err := q.Add(ctx, tr, uniqueJob(`1`, fdbq.Unique{OnDuplicate: fdbq.DuplicateReplace}))
	if err != nil || r.Added != fdbq.AddedReplaced || r.ID != a.ID {
		t.Fatalf("replace run twice: %v %v", r, err)
	}
	d, err := q.Add(ctx, tr, uniqueJob(`1`, fdbq.Unique{}))
	if err != nil || d.Added != fdbq.AddedDuplicate || d.ID != a.ID {
		t.Fatalf("duplicate run twice: %v %v", d, err)
	}
	checkUniqueEntries(t, q, a.ID)
}

// TestUniqueBatchRunTwice: a batch with a job and its duplicate, run
// again after its commit applied, answers added and duplicate again.
func TestUniqueBatchRunTwice(t *testing.T) {
	q, _ := newQueue(t)
	a, b := uniqueJob(`1`, fdbq.Unique{}), uniqueJob(`1`, fdbq.Unique{})
	a.ID, b.ID = "a1", "a2"
	got, err := q.AddBatch(context.Background(), rerun{q.DB()}, []fdbq.NewJob{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Added != fdbq.AddedNew || got[1].Added != fdbq.AddedDuplicate || got[1].ID != "a1" {
		t.Fatalf("answers %q %s, %q %s; want added a1, duplicate a1", got[0].Added, got[0].ID, got[1].Added, got[1].ID)
	}
}

// TestUniqueRefusesTextItCannotCompare: strings that encoding/json reads
// as U+FFFD (lone surrogates, bytes that are not UTF-8) would give
// distinct data one digest, so a unique job refuses them; a surrogate
// pair, other escapes and plain jobs are fine.
func TestUniqueRefusesTextItCannotCompare(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	for _, data := range []string{`"\ud800"`, `"\udfff"`, "\"\xff\"", `{"a":["x\ud83dy"]}`, `"\ud83d\u0041"`} {
		if _, err := q.Add(ctx, q.DB(), uniqueJob(data, fdbq.Unique{})); !errors.Is(err, fdbq.ErrInvalidJob) {
			t.Fatalf("unique data %q: %v, want ErrInvalidJob", data, err)
		}
	}
	for _, data := range []string{`"\ud83d\ude42"`, `"\\ud800"`, `"é\u00e9\n\""`, `{"\ud83d\ude42":1}`} {
		if got := mustAdd(t, q, uniqueJob(data, fdbq.Unique{})); got.Added != fdbq.AddedNew {
			t.Fatalf("unique data %s: %q", data, got.Added)
		}
	}
	if got := mustAdd(t, q, uniqueJob(`"\u00e9\u00e9\n\""`, fdbq.Unique{})); got.Added != fdbq.AddedDuplicate {
		t.Fatalf("the same text escaped otherwise: %q", got.Added)
	}
	mustAdd(t, q, fdbq.NewJob{Type: "email", Data: json.RawMessage(`"\ud800"`)})
}

// TestUniqueConcurrentAdders: 32 goroutines add one unique job at once,
// on a durable store and through the fault-injecting store (conflicts,
// too-old, commit_unknown_result applied or not): exactly one job
// exists, every answer names it, and exactly one says it added it.
func TestUniqueConcurrentAdders(t *testing.T) {
	const adders = 32
	rounds := 6
	if testing.Short() {
		rounds = 2
	}
	base := openDisk(t, t.TempDir())
	ctx := context.Background()
	if err := fdbq.New(base, fdbq.Options{}).SetType(ctx, base, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	var injected int64
	for round := range rounds {
		// The seed draws the faults (JOBSTAGE_SEED replays them; the
		// goroutines' interleaving is the scheduler's).
		seed := int64(jobtest.Seed(t))
		db, faults := base, (*kvtest.FaultyBackend)(nil)
		if round%2 == 1 {
			db, faults = kvtest.NewFaultyDB(base, kvtest.DefaultFaultOptions(seed))
		}
		q := fdbq.New(db, fdbq.Options{})
		for _, policy := range []fdbq.OnDuplicate{fdbq.DuplicateReturn, fdbq.DuplicateReplace} {
			data := fmt.Sprintf(`{"round":%d,"policy":%d}`, round, policy)
			answers := make([]*fdbq.Job, adders)
			errs := make([]error, adders)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range adders {
				wg.Go(func() {
					<-start
					j := uniqueJob(data, fdbq.Unique{OnDuplicate: policy})
					answers[i], errs[i] = q.Add(ctx, db, j)
				})
			}
			close(start)
			wg.Wait()
			var added int
			for i, err := range errs {
				if err != nil {
					t.Fatalf("round %d (seed %d, faults %v), adder %d: %v", round, seed, faults != nil, i, err)
				}
				switch answers[i].Added {
				case fdbq.AddedNew:
					added++
				case fdbq.AddedDuplicate, fdbq.AddedReplaced:
				default:
					t.Fatalf("round %d (seed %d): adder %d answered %q", round, seed, i, answers[i].Added)
				}
				if answers[i].ID != answers[0].ID {
					t.Fatalf("round %d (seed %d): adders answered jobs %s and %s", round, seed, answers[0].ID, answers[i].ID)
				}
				if policy == fdbq.DuplicateReturn && answers[i].Added == fdbq.AddedReplaced {
					t.Fatalf("round %d (seed %d): a return policy replaced", round, seed)
				}
			}
			if added != 1 {
				t.Fatalf("round %d (seed %d, faults %v), %s: %d adders say they added the job, want 1", round, seed, faults != nil, policy, added)
			}
		}
		if faults != nil {
			injected += faults.Counts().Injected()
		}
	}
	q := fdbq.New(base, fdbq.Options{})
	if n, _ := q.Count(ctx, base, "email", fdbq.Pending); int(n) != 2*rounds {
		t.Fatalf("%d pending jobs, want %d", n, 2*rounds)
	}
	ids, err := q.UniqueEntries(ctx, "email")
	if err != nil || len(ids) != 2*rounds {
		t.Fatalf("unique index: %d entries, want %d (%v)", len(ids), 2*rounds, err)
	}
	if injected == 0 {
		t.Fatal("the fault-injecting store injected no fault")
	}
}

// TestUniqueWindowSkewedClocks pins what the README says of Window: it
// runs from FinishedAt, which the finishing process's clock wrote, to the
// adding process's now. A finisher whose clock is an hour ahead makes
// its job count an hour longer; one an hour behind, an hour shorter.
func TestUniqueWindowSkewedClocks(t *testing.T) {
	for _, c := range []struct {
		name string
		skew time.Duration // of the finisher's clock
		dup  bool          // whether an add 40 minutes after the finish finds the job
	}{
		{"same clocks", 0, true},
		{"finisher ahead", time.Hour, true},
		{"finisher behind", -time.Hour, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			adder, clk := newQueue(t)
			finClock := &clock{now: clk.Now().Add(c.skew)}
			finisher := fdbq.New(adder.DB(), fdbq.Options{Now: finClock.Now})
			ctx := context.Background()
			u := fdbq.Unique{Window: time.Hour}
			first := mustAdd(t, adder, uniqueJob(`{"bill":1}`, u))
			// A finisher behind takes the job though its clock says it is not due.
			ls, err := finisher.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1, MaxScheduledAt: clk.Now().Add(2 * time.Hour)})
			if err != nil || len(ls) != 1 {
				t.Fatal(ls, err)
			}
			if err := finisher.Finish(ctx, adder.DB(), ls[0], nil); err != nil {
				t.Fatal(err)
			}
			clk.Advance(40 * time.Minute)
			got := mustAdd(t, adder, uniqueJob(`{"bill":1}`, u))
			if dup := got.Added == fdbq.AddedDuplicate && got.ID == first.ID; dup != c.dup {
				t.Fatalf("add 40 minutes after the finish: %s %s, want duplicate %v", got.Added, got.ID, c.dup)
			}
		})
	}
}
