package fdbq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/tuple"
)

// The fault table runs every public operation with each of the store's
// failures at its commit — a conflict, transaction_too_old,
// commit_unknown_result before and after applying, a delay — alone and
// with another client moving the job meanwhile (a worker accepts it, a
// producer adds it again, someone removes it, the monitor takes it back
// for another worker), and checks each answer
// against what doc.go promises: ErrHalt, ErrWrongState and ErrNotFound
// mean nothing of the call committed, success that it committed exactly
// once. It does so by comparison: the same setup, the same operation and
// the same interference without faults, in the order the fault implies —
// a commit that did not apply (or was delayed until the other client
// committed) is as if the other client went first, one that applied is
// as if the operation did — must give the same answer, the same number
// of commits (once or not at all), the same jobs and type settings, and
// a store whose counters equal its index scans (scanStore).

// ftBackend counts the commits that applied writes and fails the first
// one after arm with a fault, running between where the fault puts
// another client's move. A sweep's clearing of stamps no activity entry
// names, of expired claims and of minutes of history past retention is
// neither counted nor faulted: whether it
// has anything to clear depends on what the other client did before it
// (its own sweep clears them too), not on the fault, and the simulation
// and the monitor's tests check it.
type ftBackend struct {
	kv.Backend
	stamps  []byte // the prefix of the stamps' keys
	claims  []byte // the prefix of the claims' keys
	history []byte // the prefix of the types' history
	fault   string
	between func()
	hits    int // faults injected
	applied int // commits that applied writes
}

func (b *ftBackend) arm(fault string, between func()) { b.fault, b.between = fault, between }

func (b *ftBackend) Begin(ctx context.Context) (kv.Transaction, error) {
	tx, err := b.Backend.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &ftTx{writeTx: writeTx{Transaction: tx}, b: b}, nil
}

// ftTx notes its writes with writeTx (sim_history_test.go).
type ftTx struct {
	writeTx
	b *ftBackend
}

// ClearRange and Set pass the clearing of stamps and claims and the
// store's commit markers by, so that a commit that writes nothing else is
// not counted.
func (t *ftTx) ClearRange(r kv.Range) {
	if bytes.HasPrefix(r.Begin, t.b.stamps) || bytes.HasPrefix(r.Begin, t.b.claims) || bytes.HasPrefix(r.Begin, t.b.history) ||
		bytes.HasPrefix(r.Begin, kv.DefaultMarkerPrefix) {
		t.Transaction.ClearRange(r)
		return
	}
	t.writeTx.ClearRange(r)
}

func (t *ftTx) Set(key, value []byte) {
	if bytes.HasPrefix(key, kv.DefaultMarkerPrefix) {
		t.Transaction.Set(key, value)
		return
	}
	t.writeTx.Set(key, value)
}

func (t *ftTx) SetVersionstampedValue(key, value []byte) {
	if bytes.HasPrefix(key, kv.DefaultMarkerPrefix) {
		t.Transaction.SetVersionstampedValue(key, value)
		return
	}
	t.writeTx.SetVersionstampedValue(key, value)
}

func (t *ftTx) Clear(key []byte) {
	if bytes.HasPrefix(key, kv.DefaultMarkerPrefix) {
		t.Transaction.Clear(key)
		return
	}
	t.writeTx.Clear(key)
}

func (t *ftTx) commit() error { return t.countApplied(t.Transaction.Commit()) }
func (t *ftTx) countApplied(err error) error {
	t.b.applied += trBtoi(err == nil && t.wrote)
	return err
}
func (t *ftTx) fail(err *kv.Error, why string) *kv.Error {
	t.Transaction.Cancel()
	return err.WithDetail("fault table: %s", why)
}

func (t *ftTx) Commit() error {
	b := t.b
	fault := b.fault
	if fault == "" || !t.wrote {
		return t.commit()
	}
	b.fault = ""
	b.hits++
	between := func() {
		if b.between != nil {
			b.between()
		}
	}
	switch fault {
	case "conflict":
		between()
		return t.fail(kv.ErrNotCommitted, "conflict")
	case "transaction_too_old":
		between()
		return t.fail(kv.ErrTransactionTooOld, "too old")
	case "1021 before applying":
		between()
		return t.fail(kv.ErrCommitUnknownResult, "not applied")
	case "1021 after applying":
		if err := t.commit(); err != nil {
			return err
		}
		between()
		return kv.ErrCommitUnknownResult.WithDetail("fault table: applied")
	case "delay":
		// The other client commits while this commit is on its way: it
		// conflicts where it read what the other wrote, and is retried.
		time.Sleep(time.Millisecond)
		between()
		return t.commit()
	}
	panic("unknown fault " + fault)
}

var ftFaults = []string{"conflict", "transaction_too_old", "1021 before applying", "1021 after applying", "delay"}

// ftQ is one side of a comparison: a queue under its own prefix of the
// shared store, its clock, and another client of the same queue that
// makes the interfering moves.
type ftQ struct {
	t      *testing.T
	ctx    context.Context
	b      *ftBackend
	db     *kv.DB
	q      *fdbq.Queue
	other  *fdbq.Queue // the other client: no faults, not counted
	c      *clock
	prefix []byte
	lease  *fdbq.Lease // the setup's lease, for the worker calls
	// several: the call is several transactions (a sweep's batches and
	// its claims), each committing once.
	several bool
}

func newFtQ(t *testing.T, st kv.Backend, prefix string) *ftQ {
	b := &ftBackend{Backend: st}
	x := &ftQ{t: t, ctx: context.Background(), b: b, db: kv.NewDB(b, kv.Options{}), c: newClock(),
		prefix: tuple.Tuple{prefix}.MustPack()}
	b.stamps = append(bytes.Clone(x.prefix), tuple.Tuple{13}.MustPack()...)
	b.claims = append(bytes.Clone(x.prefix), tuple.Tuple{9}.MustPack()...)
	b.history = append(bytes.Clone(x.prefix), tuple.Tuple{27}.MustPack()...)
	x.q = fdbq.New(x.db, fdbq.Options{Now: x.c.Now, Prefix: x.prefix})
	x.other = fdbq.New(kv.NewDB(st, kv.Options{}), fdbq.Options{Now: x.c.Now, Prefix: x.prefix})
	s := fdbq.DefaultTypeSettings()
	s.Retry = fdbq.RetryPolicy{MaxAttempts: 2, Backoff: fdbq.Constant}
	trMust(t, "set type", x.q.SetType(x.ctx, x.db, "email", s))
	return x
}

func (x *ftQ) add(id, data string) {
	x.t.Helper()
	_, err := x.other.Add(x.ctx, x.other.DB(), fdbq.NewJob{Type: "email", ID: id, Data: trJS(data)})
	trMust(x.t, "setup: add "+id, err)
}

// accept takes one job for the setup's lease.
func (x *ftQ) accept() {
	x.t.Helper()
	ls, err := x.other.Accept(x.ctx, "email", fdbq.AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 {
		x.t.Fatalf("setup: accept: %v %v", trLeaseIDs(ls), err)
	}
	x.lease = ls[0]
}

// outcome is what a call answered, in a form the two sides compare.
func ftOutcome(err error) string {
	for _, e := range []error{fdbq.ErrHalt, fdbq.ErrWrongState, fdbq.ErrNotFound, fdbq.ErrUnknownType} {
		if errors.Is(err, e) {
			return "error " + e.Error()
		}
	}
	if err != nil {
		return "error " + err.Error()
	}
	return "ok"
}

func ftLeases(ls []*fdbq.Lease, err error) string {
	var parts []string
	for _, l := range ls {
		parts = append(parts, fmt.Sprintf("%s(attempt %d)", l.ID, l.Attempts))
	}
	return fmt.Sprintf("%s %v", ftOutcome(err), parts)
}

// state is the side's jobs and type, without what differs by chance
// between two runs (locks and add tokens are random): whether a job is
// held, and how its last lock left.
func (x *ftQ) state() string {
	x.t.Helper()
	jobs, problems, err := scanStore(x.ctx, x.other.DB(), x.prefix)
	if err != nil {
		x.t.Fatal(err)
	}
	for _, p := range problems {
		x.t.Errorf("counters and indexes: %s: %s", p.job, p.msg)
	}
	var lines []string
	for ref, j := range jobs {
		exit := j.LastLock[strings.LastIndex(j.LastLock, ":")+1:]
		norm := *j
		norm.Lock, norm.LastLock, norm.LastAdd = fmt.Sprint(j.Lock != ""), exit, ""
		// The job as Get shows it, its history of failed attempts too:
		// an attempt ended twice (a recycle or an ending run again after
		// a commit that applied) would be in it twice.
		b, _ := json.Marshal(norm)
		lines = append(lines, ref.id+" "+string(b))
	}
	slices.Sort(lines)
	info, err := x.other.GetType(x.ctx, x.other.DB(), "email")
	if err != nil {
		x.t.Fatal(err)
	}
	b, _ := json.Marshal(info)
	lines = append(lines, "type "+string(b))
	// The type's history, every minute of it that has counts: an ending
	// counted twice (a retry after a commit that applied) or counted by
	// a commit that did not apply would show here.
	now := x.c.Now()
	h, err := x.other.History(x.ctx, x.other.DB(), "email", now.Add(-23*time.Hour+time.Minute), now.Add(time.Hour))
	if err != nil {
		x.t.Fatal(err)
	}
	for _, m := range h.Minutes {
		if m != (fdbq.Minute{At: m.At}) {
			lines = append(lines, fmt.Sprintf("history %+v", m))
		}
	}
	return strings.Join(lines, "\n")
}

// ftInterference are the other client's moves, between the operation's
// commit and its retry.
var ftInterference = []struct {
	name string
	do   func(x *ftQ) string
}{
	{"alone", nil},
	{"another worker accepts the job", func(x *ftQ) string {
		return ftLeases(x.other.Accept(x.ctx, "email", fdbq.AcceptOptions{Max: 10}))
	}},
	{"a producer adds it again", func(x *ftQ) string {
		j, err := x.other.Add(x.ctx, x.other.DB(), fdbq.NewJob{Type: "email", ID: "a", Data: trJS(`{"again":true}`)})
		if err != nil {
			return ftOutcome(err)
		}
		return "ok " + string(j.State)
	}},
	{"someone removes it", func(x *ftQ) string { return ftOutcome(x.other.Remove(x.ctx, x.other.DB(), "email", "a")) }},
	{"the monitor takes it back and another worker accepts it", func(x *ftQ) string {
		// A process whose clock is a minute on: past the deadline, and
		// without moving the clock the operation reads.
		later := fdbq.New(x.other.DB(), fdbq.Options{Now: func() time.Time { return x.c.Now().Add(time.Minute) }, Prefix: x.prefix})
		st, err := fdbq.NewMonitor(later, fdbq.MonitorOptions{Logger: quietLog}).Sweep(x.ctx)
		return fmt.Sprintf("%s recycled %d; %s", ftOutcome(err), st.Recycled, ftLeases(later.Accept(x.ctx, "email", fdbq.AcceptOptions{Max: 10})))
	}},
}

type ftCase struct {
	name  string
	setup func(x *ftQ)
	op    func(x *ftQ) string
}

func ftCases() []ftCase {
	pending := func(x *ftQ) { x.add("a", `{"n":1}`) }
	running := func(x *ftQ) { pending(x); x.accept() }
	finished := func(x *ftQ) {
		running(x)
		trMust(x.t, "setup: finish", x.other.Finish(x.ctx, x.other.DB(), x.lease, nil))
	}
	canceled := func(x *ftQ) {
		pending(x)
		trMust(x.t, "setup: cancel", x.other.Cancel(x.ctx, x.other.DB(), "email", "a"))
	}
	lastAttempt := func(x *ftQ) {
		running(x)
		trMust(x.t, "setup: fail", x.other.Fail(x.ctx, x.other.DB(), x.lease, "first"))
		x.accept()
	}
	add := func(data string) func(x *ftQ) string {
		return func(x *ftQ) string {
			j, err := x.q.Add(x.ctx, x.db, fdbq.NewJob{Type: "email", ID: "a", Data: trJS(data)})
			if err != nil {
				return ftOutcome(err)
			}
			return fmt.Sprintf("ok %s resubmitted=%v", j.State, j.Resubmitted)
		}
	}
	worker := func(call func(x *ftQ) error) func(x *ftQ) string {
		return func(x *ftQ) string { return ftOutcome(call(x)) }
	}
	// end's answer leaves Ended.Replayed out: a retry after a commit that
	// applied answers it true (TestEndReplayed checks it).
	end := func(e fdbq.Ending) func(x *ftQ) string {
		return func(x *ftQ) string {
			d, err := x.q.End(x.ctx, x.db, x.lease, e)
			if err != nil {
				return ftOutcome(err)
			}
			return fmt.Sprintf("ok %s %s at=%d attempts=%d retried=%v", d.State, d.Outcome, d.At.UnixMilli(), d.Attempts, d.Retried)
		}
	}
	jobOp := func(call func(q *fdbq.Queue, ctx context.Context, tr kv.Transactor, typ, id string) error) func(x *ftQ) string {
		return func(x *ftQ) string { return ftOutcome(call(x.q, x.ctx, x.db, "email", "a")) }
	}
	sweep := func(x *ftQ) string {
		x.several = true
		st, err := fdbq.NewMonitor(x.q, fdbq.MonitorOptions{Logger: quietLog}).Sweep(x.ctx)
		return fmt.Sprintf("%s recycled %d failed %d expired %d", ftOutcome(err), st.Recycled, st.Failed, st.Expired)
	}
	settings := fdbq.TypeSettings{ActivityTimeout: time.Minute, Retry: fdbq.RetryPolicy{MaxAttempts: 3, Backoff: fdbq.Linear, Base: time.Second}}
	return []ftCase{
		{"Add new", func(*ftQ) {}, add(`{"n":2}`)},
		{"Add to a pending job", pending, add(`{"n":2}`)},
		{"Add to a running job", running, add(`{"n":2}`)},
		{"Add to a finished job", finished, add(`{"n":2}`)},
		{"AddBatch naming one id twice", pending, func(x *ftQ) string {
			js, err := x.q.AddBatch(x.ctx, x.db, []fdbq.NewJob{
				{Type: "email", ID: "a", Data: trJS(`{"n":2}`)},
				{Type: "email", ID: "b", Data: trJS(`{"n":3}`)},
				{Type: "email", ID: "a", Data: trJS(`{"n":4}`)},
			})
			var states []string
			for _, j := range js {
				states = append(states, string(j.State)+":"+string(j.Data))
			}
			return ftOutcome(err) + " " + strings.Join(states, ",")
		}},
		{"Accept", pending, func(x *ftQ) string {
			return ftLeases(x.q.Accept(x.ctx, "email", fdbq.AcceptOptions{Max: 2}))
		}},
		{"Heartbeat", running, worker(func(x *ftQ) error {
			return x.q.Heartbeat(x.ctx, x.db, x.lease, fdbq.HeartbeatOptions{Progress: trJS(`50`)})
		})},
		{"Finish", running, worker(func(x *ftQ) error { return x.q.Finish(x.ctx, x.db, x.lease, trJS(`"r"`)) })},
		{"Fail with attempts left", running, worker(func(x *ftQ) error { return x.q.Fail(x.ctx, x.db, x.lease, "boom") })},
		{"Fail the last attempt", lastAttempt, worker(func(x *ftQ) error { return x.q.Fail(x.ctx, x.db, x.lease, "boom") })},
		{"Resubmit", running, worker(func(x *ftQ) error { return x.q.Resubmit(x.ctx, x.db, x.lease, time.Time{}) })},
		{"End succeeding", running, end(fdbq.Ending{How: fdbq.AttemptSucceeded, Result: trJS(`"r"`)})},
		{"End failing, to retry at a time", running, end(fdbq.Ending{How: fdbq.AttemptFailed, Cause: "boom", At: time.UnixMilli(1_800_000_000_000)})},
		{"End failing the last attempt", lastAttempt, end(fdbq.Ending{How: fdbq.AttemptFailed, Cause: "boom"})},
		{"End canceling", running, end(fdbq.Ending{How: fdbq.AttemptCanceled, Cause: "no such user"})},
		{"End snoozing", running, end(fdbq.Ending{How: fdbq.AttemptSnoozed, At: time.UnixMilli(1_800_000_000_000)})},
		{"Release", running, worker(func(x *ftQ) error { return x.q.Release(x.ctx, x.db, []*fdbq.Lease{x.lease}) })},
		{"Cancel a pending job", pending, jobOp((*fdbq.Queue).Cancel)},
		{"Cancel a running job", running, jobOp((*fdbq.Queue).Cancel)},
		{"Remove", running, jobOp((*fdbq.Queue).Remove)},
		{"Requeue", canceled, jobOp((*fdbq.Queue).Requeue)},
		{"SetType", pending, func(x *ftQ) string { return ftOutcome(x.q.SetType(x.ctx, x.db, "email", settings)) }},
		{"Pause", pending, func(x *ftQ) string { return ftOutcome(x.q.Pause(x.ctx, x.db, "email")) }},
		{"Resume", func(x *ftQ) {
			pending(x)
			trMust(x.t, "setup: pause", x.other.Pause(x.ctx, x.other.DB(), "email"))
		}, func(x *ftQ) string { return ftOutcome(x.q.Resume(x.ctx, x.db, "email")) }},
		{"Monitor.Sweep taking back a job", func(x *ftQ) { running(x); x.c.Advance(time.Minute) }, sweep},
		{"Monitor.Sweep removing a finished job", func(x *ftQ) { finished(x); x.c.Advance(25 * time.Hour) }, sweep},
		{"DeclareType", pending, func(x *ftQ) string { return ftOutcome(x.q.DeclareType(x.ctx, x.db, "email", settings)) }},
	}
}

// TestFaultTable: every operation × every fault at its commit × every
// interference answers as the same calls without faults in the order the
// fault implies, committing as often (once or not at all).
func TestFaultTable(t *testing.T) {
	n := 0
	for _, tc := range ftCases() {
		// A store of each operation's own: one store for the whole table
		// piled up every case's deletions, and the last cases' scans
		// stepped over them all (the table took minutes, not seconds).
		st, err := embedded.Open("", embedded.Options{InMemory: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		for _, in := range ftInterference {
			// The runs without faults, one for each order, shared by the
			// faults that imply it.
			refs := map[bool]*ftResult{}
			for _, fault := range ftFaults {
				n++
				t.Run(tc.name+"/"+fault+"/"+in.name, func(t *testing.T) {
					applies := fault == "1021 after applying"
					if refs[applies] == nil {
						refs[applies] = ftReference(t, st, n, tc, in.do, applies)
					}
					ftCompare(t, ftFaulted(t, st, n, tc, fault, in.do), refs[applies], in.name)
				})
			}
		}
	}
}

// ftResult is what one side did.
type ftResult struct {
	answer  string // the operation's
	moved   string // the other client's
	applied int    // the operation's commits that applied writes
	hits    int    // faults injected
	several bool
	state   string
}

func ftFaulted(t *testing.T, st kv.Backend, n int, tc ftCase, fault string, interfere func(x *ftQ) string) *ftResult {
	x := newFtQ(t, st, fmt.Sprintf("faulted-%d", n))
	tc.setup(x)
	r := &ftResult{}
	x.b.applied = 0
	x.b.arm(fault, func() {
		if interfere != nil {
			r.moved = interfere(x)
		}
	})
	r.answer = tc.op(x)
	if x.b.hits == 0 && interfere != nil && r.moved == "" {
		// The operation wrote nothing (a sweep with nothing to do), so
		// no commit took the fault: the other client moves after it.
		r.moved = interfere(x)
	}
	x.b.arm("", nil)
	r.applied, r.hits, r.several, r.state = x.b.applied, x.b.hits, x.several, x.state()
	return r
}

// ftReference runs the case without faults: the other client's move
// after the operation (applies: the faulted commit applied) or before
// it (it did not, or it was delayed until after the other's).
func ftReference(t *testing.T, st kv.Backend, n int, tc ftCase, interfere func(x *ftQ) string, applies bool) *ftResult {
	x := newFtQ(t, st, fmt.Sprintf("reference-%d", n))
	tc.setup(x)
	r := &ftResult{}
	if interfere != nil && !applies {
		r.moved = interfere(x)
	}
	x.b.applied = 0
	r.answer = tc.op(x)
	r.applied = x.b.applied
	if interfere != nil && applies {
		r.moved = interfere(x)
	}
	r.state = x.state()
	return r
}

func ftCompare(t *testing.T, got, want *ftResult, inName string) {
	t.Helper()
	if want.applied > 0 && got.hits == 0 {
		t.Fatal("the operation committed without the fault")
	}
	if got.answer != want.answer {
		t.Errorf("answered %q, without the fault %q", got.answer, want.answer)
	}
	if got.applied != want.applied {
		t.Errorf("committed %d times, without the fault %d (answer %q)", got.applied, want.applied, got.answer)
	}
	if !strings.HasPrefix(got.answer, "ok") && got.applied != 0 {
		t.Errorf("answered %q but committed %d times: an error means nothing committed", got.answer, got.applied)
	}
	if got.applied > 1 && !got.several {
		t.Errorf("committed %d times: success means exactly once", got.applied)
	}
	if got.moved != want.moved {
		t.Errorf("the other client (%s) got %q, without the fault %q", inName, got.moved, want.moved)
	}
	if got.state != want.state {
		t.Errorf("the store differs from the run without the fault:\n%s\nwithout:\n%s", got.state, want.state)
	}
}
