package fdbq_test

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
)

// The model test runs random operations against the queue and against a
// small in-memory reference model of the state machine of doc.go, and
// compares them after every operation. A failure names its seed; rerun it
// with -jobstage.seed=N or JOBSTAGE_SEED=N.
var modelSeedFlag = flag.Uint64("jobstage.seed", 0, "seed for TestModel (default: JOBSTAGE_SEED, else a fixed set)")

// Fixed seeds run by default, and the operations per seed: enough to reach
// every transition many times and stay within a few seconds under -race.
var modelSeeds = []uint64{1, 2, 3, 20260101, 0xdecafbad}

const modelOps = 400

func modelSeedList(t *testing.T) []uint64 {
	if *modelSeedFlag != 0 {
		return []uint64{*modelSeedFlag}
	}
	if s := os.Getenv("JOBSTAGE_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("JOBSTAGE_SEED=%q: %v", s, err)
		}
		return []uint64{n}
	}
	return modelSeeds
}

// modelTransitions are what every default run must reach.
var modelTransitions = []string{
	"add new", "add unchanged", "add reschedule", "add running", "add running unchanged", "add finished",
	"accept", "accept none", "accept paused",
	"heartbeat", "heartbeat halt",
	"finish", "finish resubmitted", "finish repeated", "finish halt",
	"fail retry", "fail last", "fail resubmitted", "fail repeated", "fail halt",
	"resubmit", "resubmit halt", "release", "release resubmitted",
	"cancel pending", "cancel running", "cancel finished", "cancel missing",
	"remove", "remove missing", "requeue", "requeue refused",
	"recycle", "recycle failed", "expire",
}

func TestModel(t *testing.T) {
	seeds := modelSeedList(t)
	total := map[string]int{}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d (rerun with JOBSTAGE_SEED=%d)", seed, seed)
			for k, v := range runModel(t, seed, modelOps) {
				total[k] += v
			}
		})
	}
	if t.Failed() || !slices.Equal(seeds, modelSeeds) {
		return
	}
	t.Logf("transitions reached: %v", total)
	for _, k := range modelTransitions {
		if total[k] == 0 {
			t.Errorf("the random runs never reached %q", k)
		}
	}
}

// --- the reference model ---

type mJob struct {
	state                   fdbq.State
	outcome                 fdbq.Outcome
	data, result, progress  string
	err                     string
	priority                int
	attempts, maxAttempts   int
	retry                   *fdbq.RetryPolicy
	lock, lastLock          string
	resubmit                bool
	resubmitAt              int64
	added, sched, started   int64
	heartbeat, finished, xp int64
	// renewed is the number of the operation that last renewed the job's
	// activity (accept, heartbeat): operations commit one after another,
	// so their numbers are in the order of their versions.
	renewed int
	// due: a pending job was due when last written, so it is in the ready
	// index (else in the scheduled index, which List lists after it).
	due bool
}

// mSample is a sweep's note of the store's version (the operation number
// it follows) and of the time, merged into the next as the monitor does
// when the next comes less than a quarter interval after it.
type mSample struct {
	op int
	at int64
}

type model struct {
	now     int64
	op      int // number of the current operation
	samples []mSample
	paused  bool
	s       fdbq.TypeSettings
	jobs    map[string]*mJob
	// start is the clock when the run began; hist the type's history:
	// the attempts that ended, by minute.
	start int64
	hist  map[int64]fdbq.Minute
}

// ended counts an attempt (or a cancel) that ended as kind now in the
// model's history.
func (m *model) ended(kind string) {
	minute := m.now / 60_000
	h := m.hist[minute]
	h.At = time.UnixMilli(minute * 60_000).UTC()
	switch kind {
	case "succeeded":
		h.Succeeded++
	case "failed":
		h.Failed++
	case "canceled":
		h.Canceled++
	case "retried":
		h.Retried++
	case "recycled":
		h.Recycled++
	default:
		panic("unknown kind " + kind)
	}
	m.hist[minute] = h
}

func (j *mJob) toPending(sched, now int64) {
	j.state, j.outcome, j.sched, j.finished, j.due = fdbq.Pending, "", sched, 0, sched <= now
	j.lock, j.xp, j.resubmit, j.resubmitAt = "", 0, false, 0
}

func (j *mJob) finish(o fdbq.Outcome, now int64) {
	j.state, j.outcome, j.finished = fdbq.Finished, o, now
	j.lock, j.xp, j.resubmit, j.resubmitAt = "", 0, false, 0
}

func modelDelay(p fdbq.RetryPolicy, attempt int) time.Duration {
	var d time.Duration
	switch p.Backoff {
	case fdbq.Constant:
		d = p.Base
	case fdbq.Linear:
		d = p.Base * time.Duration(attempt)
	default:
		panic("the model only knows exact backoffs")
	}
	if p.Max > 0 && d > p.Max {
		d = p.Max
	}
	return d
}

// retryOrFail: a running job's attempt failed (by Fail or by the monitor);
// it counts in the history as failed, if the job finishes, or as kind.
func (m *model) retryOrFail(j *mJob, kind string) {
	defer func() {
		if j.state == fdbq.Finished {
			m.ended("failed")
		} else {
			m.ended(kind)
		}
	}()
	p := m.s.Retry
	if j.retry != nil {
		p = *j.retry
	}
	maxAttempts := p.MaxAttempts
	if j.maxAttempts > 0 {
		maxAttempts = j.maxAttempts
	}
	switch {
	case j.resubmit:
		j.toPending(j.resubmitAt, m.now)
		j.attempts = 0
	case j.attempts < maxAttempts:
		j.toPending(m.now+modelDelay(p, j.attempts).Milliseconds(), m.now)
	default:
		j.finish(fdbq.Failed, m.now)
	}
}

// holding says what a worker call with lease l and exit finds: ok (it
// holds the job), done (this lease already made this exit: a retry, which
// succeeds and writes nothing), or neither (ErrHalt).
func (m *model) holding(l *fdbq.Lease, exit string) (j *mJob, ok, done bool) {
	j = m.jobs[l.ID]
	if j == nil {
		return nil, false, false
	}
	if j.state == fdbq.Running && j.lock == l.Lock {
		return j, true, false
	}
	if exit != "" && j.lastLock == l.Lock+":"+exit {
		return j, false, true
	}
	return j, false, false
}

func samePolicyPtr(a, b *fdbq.RetryPolicy) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// add is Add; noTime says the add gave no scheduled time (sched is then
// now), which leaves a pending job's time as it was.
func (m *model) add(id string, data string, sched int64, noTime bool, priority, maxAttempts int, retry *fdbq.RetryPolicy) string {
	j := m.jobs[id]
	if j == nil || j.state == fdbq.Finished {
		m.jobs[id] = &mJob{state: fdbq.Pending, data: data, priority: priority, maxAttempts: maxAttempts, retry: retry, added: m.now, sched: sched, due: sched <= m.now}
		if j != nil {
			return "add finished"
		}
		return "add new"
	}
	switch j.state {
	case fdbq.Pending:
		if noTime {
			sched = j.sched
		}
		if j.sched == sched && j.data == data && j.priority == priority && j.maxAttempts == maxAttempts && samePolicyPtr(j.retry, retry) {
			return "add unchanged"
		}
		j.sched, j.data, j.priority, j.maxAttempts, j.retry = sched, data, priority, maxAttempts, retry
		j.due = sched <= m.now
		return "add reschedule"
	default:
		if j.resubmit && j.resubmitAt == sched {
			return "add running unchanged"
		}
		j.resubmit, j.resubmitAt = true, sched
		return "add running"
	}
}

// due returns the ids Accept may take, in the pending index's order:
// highest priority first, then earliest scheduled, then id.
func (m *model) due(maxSched int64) []string {
	if m.paused {
		return nil
	}
	var ids []string
	for id, j := range m.jobs {
		if j.state == fdbq.Pending && j.sched <= maxSched {
			ids = append(ids, id)
		}
	}
	m.sortPending(ids)
	return ids
}

func (m *model) sortPending(ids []string) {
	slices.SortFunc(ids, func(a, b string) int {
		ja, jb := m.jobs[a], m.jobs[b]
		return cmp.Or(cmp.Compare(jb.priority, ja.priority), cmp.Compare(ja.sched, jb.sched), strings.Compare(a, b))
	})
}

// listed returns the ids in a state in its index's order.
func (m *model) listed(s fdbq.State) []string {
	var ids []string
	for id, j := range m.jobs {
		if j.state == s {
			ids = append(ids, id)
		}
	}
	switch s {
	case fdbq.Pending:
		// The ready index by zone, then priority, then the scheduled
		// index by time.
		var later []string
		ids = slices.DeleteFunc(ids, func(id string) bool {
			if !m.jobs[id].due {
				later = append(later, id)
				return true
			}
			return false
		})
		// By zone first: the ids' shards among the default zones.
		m.sortPending(ids)
		slices.SortStableFunc(ids, func(a, b string) int {
			return cmp.Compare(fdbq.ShardOf(a, fdbq.DefaultZones), fdbq.ShardOf(b, fdbq.DefaultZones))
		})
		slices.SortFunc(later, func(a, b string) int {
			ja, jb := m.jobs[a], m.jobs[b]
			return cmp.Or(cmp.Compare(ja.sched, jb.sched), cmp.Compare(jb.priority, ja.priority),
				cmp.Compare(fdbq.ShardOf(a, fdbq.DefaultZones), fdbq.ShardOf(b, fdbq.DefaultZones)), strings.Compare(a, b))
		})
		ids = append(ids, later...)
	case fdbq.Running:
		// The activity index by lane (a hash of the id), then renewal.
		slices.SortFunc(ids, func(a, b string) int {
			return cmp.Or(cmp.Compare(fdbq.LaneOf(a), fdbq.LaneOf(b)), cmp.Compare(m.jobs[a].renewed, m.jobs[b].renewed), strings.Compare(a, b))
		})
	case fdbq.Finished:
		slices.SortFunc(ids, func(a, b string) int {
			return cmp.Or(cmp.Compare(m.jobs[a].finished, m.jobs[b].finished), strings.Compare(a, b))
		})
	}
	return ids
}

// --- the run ---

type modelRun struct {
	t      *testing.T
	seed   uint64
	rng    *rand.Rand
	q      *fdbq.Queue
	c      *clock
	ctx    context.Context
	m      *model
	ids    []string
	leases []*fdbq.Lease
	log    []string
	n      int // data counter, so data differs between adds
	// hits counts the transitions reached, so a change that makes the
	// random walk miss some of them fails instead of passing vacuously.
	hits map[string]int
	// mon is the run's activity monitor: what its sweeps noted decides
	// what later sweeps take back.
	mon *fdbq.Monitor
	// lastAdd is repeated now and then: resubmits that change nothing
	// are rare among random adds.
	lastAdd *fdbq.NewJob
}

func (r *modelRun) logf(format string, args ...any) {
	r.log = append(r.log, fmt.Sprintf(format, args...))
}

func (r *modelRun) fatalf(format string, args ...any) {
	r.t.Helper()
	start := max(0, len(r.log)-25)
	r.t.Fatalf("seed %d, op %d: %s\nlast operations:\n  %s\nrerun with JOBSTAGE_SEED=%d",
		r.seed, len(r.log), fmt.Sprintf(format, args...), strings.Join(r.log[start:], "\n  "), r.seed)
}

// expectErr checks an operation's error against the model's verdict.
func (r *modelRun) expectErr(what string, got, want error) {
	r.t.Helper()
	if want == nil {
		if got != nil {
			r.fatalf("%s: unexpected error %v", what, got)
		}
		return
	}
	if !errors.Is(got, want) {
		r.fatalf("%s: got error %v, the model says %v", what, got, want)
	}
}

func runModel(t *testing.T, seed uint64, ops int) map[string]int {
	q, c := newQueue(t)
	holdChanges(t, q, "email")
	ctx := context.Background()
	s := fdbq.TypeSettings{
		ActivityTimeout: 10 * time.Second,
		Retry:           fdbq.RetryPolicy{MaxAttempts: 3, Backoff: fdbq.Constant, Base: 2 * time.Second},
		Retention:       time.Hour,
	}
	if err := q.SetType(ctx, q.DB(), "email", s); err != nil {
		t.Fatal(err)
	}
	r := &modelRun{
		t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x6a6f6273)), q: q, c: c, ctx: ctx,
		m:    &model{now: c.Now().UnixMilli(), start: c.Now().UnixMilli(), s: s, jobs: map[string]*mJob{}, hist: map[int64]fdbq.Minute{}},
		ids:  []string{"a", "b", "c", "d", "e", "f", "g", "h"},
		hits: map[string]int{},
		mon:  fdbq.NewMonitor(q, fdbq.MonitorOptions{Clock: c.Now}),
	}
	for i := 0; i < ops; i++ {
		r.m.op = i + 1
		r.step()
		r.check()
	}
	return r.hits
}

func (r *modelRun) raw(key []byte) []byte {
	r.t.Helper()
	v, err := kv.ReadTransact(r.ctx, r.q.DB(), func(tx kv.ReadTx) ([]byte, error) { return tx.Get(key) })
	if err != nil {
		r.fatalf("read %x: %v", key, err)
	}
	return v
}

func (r *modelRun) pick() string { return r.ids[r.rng.IntN(len(r.ids))] }

func (r *modelRun) lease() *fdbq.Lease {
	if len(r.leases) == 0 {
		return nil
	}
	if r.rng.IntN(3) > 0 {
		// Mostly a recent lease, which is likelier to still hold its job.
		n := min(3, len(r.leases))
		return r.leases[len(r.leases)-1-r.rng.IntN(n)]
	}
	return r.leases[r.rng.IntN(len(r.leases))]
}

func (r *modelRun) data() string {
	if r.rng.IntN(5) == 0 {
		return ""
	}
	r.n++
	return fmt.Sprintf(`{"v":%d}`, r.n%7) // repeats, so some resubmits change nothing
}

func (r *modelRun) advance(d time.Duration) {
	r.c.Advance(d)
	r.m.now = r.c.Now().UnixMilli()
}

func (r *modelRun) step() {
	m, ctx, db := r.m, r.ctx, r.q.DB()
	switch op := r.rng.IntN(100); {
	case op < 22: // add
		id := r.pick()
		data := r.data()
		offsets := []time.Duration{-2 * time.Second, 0, 0, 0, time.Second, 5 * time.Second}
		var at time.Time
		sched := m.now
		if r.rng.IntN(4) > 0 {
			off := offsets[r.rng.IntN(len(offsets))]
			at = time.UnixMilli(m.now).Add(off)
			sched = at.UnixMilli()
		}
		priority := []int{-1, 0, 0, 0, 1, 2}[r.rng.IntN(6)]
		maxAttempts := []int{0, 0, 0, 1, 2}[r.rng.IntN(5)]
		var retry *fdbq.RetryPolicy
		switch r.rng.IntN(6) {
		case 0:
			retry = &fdbq.RetryPolicy{MaxAttempts: 2, Backoff: fdbq.Constant, Base: time.Second}
		case 1:
			retry = &fdbq.RetryPolicy{MaxAttempts: 4, Backoff: fdbq.Linear, Base: 700 * time.Millisecond, Max: 2 * time.Second}
		}
		r.logf("add %s data=%s sched=%+dms prio=%d max=%d retry=%v", id, data, sched-m.now, priority, maxAttempts, retry)
		var raw []byte
		if data != "" {
			raw = []byte(data)
		}
		nj := fdbq.NewJob{Type: "email", ID: id, Data: raw, ScheduledAt: at, Priority: priority, MaxAttempts: maxAttempts, Retry: retry}
		if r.lastAdd != nil && r.rng.IntN(4) == 0 {
			nj = *r.lastAdd
			id, data, at, priority, maxAttempts, retry = nj.ID, string(nj.Data), nj.ScheduledAt, nj.Priority, nj.MaxAttempts, nj.Retry
			sched = m.now
			if !at.IsZero() {
				sched = at.UnixMilli()
			}
			r.logf("add again %s data=%s sched=%+dms prio=%d max=%d retry=%v", id, data, sched-m.now, priority, maxAttempts, retry)
		}
		r.lastAdd = &nj
		changeBefore := r.raw(trChangeKey("email"))
		j, err := r.q.Add(ctx, db, nj)
		r.expectErr("add", err, nil)
		kind := m.add(id, data, sched, at.IsZero(), priority, maxAttempts, retry)
		r.hits[kind]++
		// A resubmit that changes nothing writes nothing (doc.go).
		if moved := string(r.raw(trChangeKey("email"))) != string(changeBefore); moved == strings.HasSuffix(kind, "unchanged") {
			r.fatalf("%s: the change counter moved = %v", kind, moved)
		}
		r.compare("add's result", id, j)

	case op < 38: // accept
		n := 1 + r.rng.IntN(3)
		o := fdbq.AcceptOptions{Max: n, Window: n}
		strict := r.rng.IntN(4) > 0
		if !strict {
			o.Window = 0
		}
		maxSched := m.now
		if r.rng.IntN(5) == 0 {
			o.MaxScheduledAt = time.UnixMilli(m.now).Add(2 * time.Second)
			maxSched = o.MaxScheduledAt.UnixMilli()
		}
		r.logf("accept max=%d strict=%v maxSched=%+dms", n, strict, maxSched-m.now)
		ls, err := r.q.Accept(ctx, "email", o)
		r.expectErr("accept", err, nil)
		due := m.due(maxSched)
		switch {
		case m.paused:
			r.hits["accept paused"]++
		case len(due) == 0:
			r.hits["accept none"]++
		default:
			r.hits["accept"]++
		}
		got := trLeaseIDs(ls)
		want := due[:min(n, len(due))]
		if strict {
			if !slices.Equal(got, want) {
				r.fatalf("accept took %v, the model's due jobs in order are %v", got, due)
			}
		} else {
			window := due[:min(4*n, len(due))]
			if len(got) != len(want) {
				r.fatalf("accept took %v, want %d of %v", got, len(want), window)
			}
			for i, id := range got {
				if !slices.Contains(window, id) {
					r.fatalf("accept took %s, not among the window %v", id, window)
				}
				if i > 0 && slices.Index(due, got[i-1]) > slices.Index(due, id) {
					r.fatalf("accept returned %v out of index order %v", got, due)
				}
			}
		}
		for _, l := range ls {
			j := m.jobs[l.ID]
			j.state, j.lock, j.lastLock = fdbq.Running, l.Lock, ""
			j.attempts++
			j.started, j.heartbeat, j.xp = m.now, m.now, m.now+m.s.ActivityTimeout.Milliseconds()
			j.renewed = m.op
			j.err = ""
			r.compare("lease", l.ID, &l.Job)
			r.leases = append(r.leases, l)
		}
		if len(r.leases) > 12 {
			r.leases = r.leases[len(r.leases)-12:]
		}

	case op < 46: // heartbeat
		l := r.lease()
		if l == nil {
			return
		}
		var o fdbq.HeartbeatOptions
		if r.rng.IntN(2) == 0 {
			r.n++
			o.Data = []byte(fmt.Sprintf(`{"hb":%d}`, r.n))
		}
		if r.rng.IntN(2) == 0 {
			o.Progress = []byte(strconv.Itoa(r.rng.IntN(100)))
		}
		r.logf("heartbeat %s/%s data=%s progress=%s", l.ID, l.Lock[:6], o.Data, o.Progress)
		err := r.q.Heartbeat(ctx, db, l, o)
		j, ok, _ := m.holding(l, "")
		if !ok {
			r.hits["heartbeat halt"]++
			r.expectErr("heartbeat", err, fdbq.ErrHalt)
			return
		}
		r.hits["heartbeat"]++
		r.expectErr("heartbeat", err, nil)
		j.heartbeat, j.xp = m.now, m.now+m.s.ActivityTimeout.Milliseconds()
		j.renewed = m.op
		if o.Data != nil {
			j.data = string(o.Data)
		}
		if o.Progress != nil {
			j.progress = string(o.Progress)
		}

	case op < 55: // finish
		l := r.lease()
		if l == nil {
			return
		}
		var result string
		if r.rng.IntN(3) > 0 {
			result = fmt.Sprintf(`"r%d"`, r.rng.IntN(100))
		}
		r.logf("finish %s/%s result=%s", l.ID, l.Lock[:6], result)
		var raw []byte
		if result != "" {
			raw = []byte(result)
		}
		err := r.q.Finish(ctx, db, l, raw)
		j, ok, done := m.holding(l, "finish")
		switch {
		case done:
			r.hits["finish repeated"]++
			r.expectErr("repeated finish", err, nil)
		case !ok:
			r.hits["finish halt"]++
			r.expectErr("finish", err, fdbq.ErrHalt)
		default:
			r.expectErr("finish", err, nil)
			j.result, j.lastLock = result, l.Lock+":finish"
			if j.resubmit {
				r.hits["finish resubmitted"]++
				j.toPending(j.resubmitAt, m.now)
				j.attempts = 0
			} else {
				r.hits["finish"]++
				j.finish(fdbq.Succeeded, m.now)
				m.ended("succeeded")
			}
		}

	case op < 64: // fail
		l := r.lease()
		if l == nil {
			return
		}
		cause := fmt.Sprintf("cause %d", r.rng.IntN(100))
		r.logf("fail %s/%s %q", l.ID, l.Lock[:6], cause)
		err := r.q.Fail(ctx, db, l, cause)
		j, ok, done := m.holding(l, "fail")
		switch {
		case done:
			r.hits["fail repeated"]++
			r.expectErr("repeated fail", err, nil)
		case !ok:
			r.hits["fail halt"]++
			r.expectErr("fail", err, fdbq.ErrHalt)
		default:
			r.expectErr("fail", err, nil)
			j.err, j.lastLock = cause, l.Lock+":fail"
			resubmitted := j.resubmit
			m.retryOrFail(j, "retried")
			switch {
			case resubmitted:
				r.hits["fail resubmitted"]++
			case j.state == fdbq.Finished:
				r.hits["fail last"]++
			default:
				r.hits["fail retry"]++
			}
		}

	case op < 68: // resubmit by the worker
		l := r.lease()
		if l == nil {
			return
		}
		var at time.Time
		sched := m.now
		if r.rng.IntN(2) == 0 {
			at = time.UnixMilli(m.now).Add(time.Duration(r.rng.IntN(4)) * time.Second)
			sched = at.UnixMilli()
		}
		r.logf("resubmit %s/%s at %+dms", l.ID, l.Lock[:6], sched-m.now)
		err := r.q.Resubmit(ctx, db, l, at)
		j, ok, done := m.holding(l, "resubmit")
		switch {
		case done:
			r.expectErr("repeated resubmit", err, nil)
		case !ok:
			r.hits["resubmit halt"]++
			r.expectErr("resubmit", err, fdbq.ErrHalt)
		default:
			r.hits["resubmit"]++
			r.expectErr("resubmit", err, nil)
			j.lastLock = l.Lock + ":resubmit"
			j.toPending(sched, m.now)
			j.attempts = max(j.attempts-1, 0)
		}

	case op < 71: // release
		var ls []*fdbq.Lease
		for _, l := range r.leases {
			if r.rng.IntN(3) == 0 {
				ls = append(ls, l)
			}
		}
		r.logf("release %v", trLeaseIDs(ls))
		r.expectErr("release", r.q.Release(ctx, db, ls), nil)
		for _, l := range ls {
			j, ok, _ := m.holding(l, "resubmit")
			if !ok {
				continue
			}
			j.lastLock = l.Lock + ":resubmit"
			if j.resubmit {
				r.hits["release resubmitted"]++
				j.toPending(j.resubmitAt, m.now)
				j.attempts = 0
			} else {
				r.hits["release"]++
				j.toPending(j.sched, m.now)
				j.attempts = max(j.attempts-1, 0)
			}
		}

	case op < 76: // cancel
		id := r.pick()
		r.logf("cancel %s", id)
		err := r.q.Cancel(ctx, db, "email", id)
		j := m.jobs[id]
		switch {
		case j == nil:
			r.hits["cancel missing"]++
			r.expectErr("cancel", err, fdbq.ErrNotFound)
		case j.state == fdbq.Finished:
			r.hits["cancel finished"]++
			r.expectErr("cancel", err, fdbq.ErrWrongState)
		default:
			r.hits["cancel "+string(j.state)]++
			r.expectErr("cancel", err, nil)
			if j.state == fdbq.Running {
				j.lastLock = j.lock + ":cancel"
			}
			j.finish(fdbq.Canceled, m.now)
			m.ended("canceled")
		}

	case op < 79: // remove
		id := r.pick()
		r.logf("remove %s", id)
		err := r.q.Remove(ctx, db, "email", id)
		if m.jobs[id] == nil {
			r.hits["remove missing"]++
			r.expectErr("remove", err, fdbq.ErrNotFound)
		} else {
			r.hits["remove"]++
			r.expectErr("remove", err, nil)
			delete(m.jobs, id)
		}

	case op < 84: // requeue
		id := r.pick()
		r.logf("requeue %s", id)
		err := r.q.Requeue(ctx, db, "email", id)
		j := m.jobs[id]
		switch {
		case j == nil:
			r.expectErr("requeue", err, fdbq.ErrNotFound)
		case j.state != fdbq.Finished || j.outcome == fdbq.Succeeded:
			r.hits["requeue refused"]++
			r.expectErr("requeue", err, fdbq.ErrWrongState)
		default:
			r.hits["requeue"]++
			r.expectErr("requeue", err, nil)
			j.toPending(m.now, m.now)
			j.attempts = 0
		}

	case op < 87: // pause or resume
		if r.rng.IntN(3) == 0 {
			r.logf("pause")
			r.expectErr("pause", r.q.Pause(ctx, db, "email"), nil)
			m.paused = true
		} else {
			r.logf("resume")
			r.expectErr("resume", r.q.Resume(ctx, db, "email"), nil)
			m.paused = false
		}

	case op < 95: // the clock moves
		d := []time.Duration{time.Millisecond, 300 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second}[r.rng.IntN(5)]
		r.logf("advance %v", d)
		r.advance(d)

	default: // the activity monitor sweeps, often past a deadline
		switch r.rng.IntN(4) {
		case 0, 1:
			r.advance(m.s.ActivityTimeout + time.Millisecond)
		case 2:
			r.advance(m.s.Retention + time.Millisecond)
		}
		r.logf("sweep at %d", m.now)
		st, err := r.mon.Sweep(ctx)
		r.expectErr("sweep", err, nil)
		// The sweep notes the version and the time first; a job is
		// stale when a sample a timeout old or older came after its last
		// renewal.
		if n := len(m.samples); n > 0 && time.Duration(m.now-m.samples[n-1].at)*time.Millisecond < time.Second/4 {
			m.samples = m.samples[:n-1]
		}
		m.samples = append(m.samples, mSample{op: m.op, at: m.now})
		staleBefore := 0
		for _, sm := range m.samples {
			if sm.at <= m.now-m.s.ActivityTimeout.Milliseconds() {
				staleBefore = sm.op
			}
		}
		var recycled, failed, expired int
		for id, j := range m.jobs {
			switch {
			case j.state == fdbq.Running && j.renewed < staleBefore:
				j.err = "activity timeout: no heartbeat for " + m.s.ActivityTimeout.String()
				j.lastLock = j.lock + ":recycle"
				m.retryOrFail(j, "recycled")
				recycled++
				if j.state == fdbq.Finished {
					failed++
				}
			case j.state == fdbq.Finished && j.finished <= m.now-m.s.Retention.Milliseconds():
				delete(m.jobs, id)
				expired++
			}
		}
		r.hits["recycle"] += recycled - failed
		r.hits["recycle failed"] += failed
		r.hits["expire"] += expired
		if st.Recycled != recycled || st.Failed != failed || st.Expired != expired {
			r.fatalf("sweep did %+v, the model says recycled %d failed %d expired %d", st, recycled, failed, expired)
		}
	}
}

// check compares every job, the counts and the indexes with the model.
func (r *modelRun) check() {
	r.t.Helper()
	m, ctx, db := r.m, r.ctx, r.q.DB()
	type got struct {
		job *fdbq.Job
		err error
	}
	jobs, err := kv.ReadTransact(ctx, db, func(tx kv.ReadTx) (map[string]got, error) {
		out := map[string]got{}
		for _, id := range r.ids {
			j, err := r.q.Get(ctx, tx, "email", id)
			out[id] = got{j, err}
		}
		return out, nil
	})
	if err != nil {
		r.fatalf("reading jobs: %v", err)
	}
	for _, id := range r.ids {
		g := jobs[id]
		if m.jobs[id] == nil {
			if !errors.Is(g.err, fdbq.ErrNotFound) {
				r.fatalf("%s: the model has no such job, the store says %+v %v", id, g.job, g.err)
			}
			continue
		}
		if g.err != nil {
			r.fatalf("%s: %v", id, g.err)
		}
		r.compare("stored job", id, g.job)
	}
	info, err := r.q.GetType(ctx, db, "email")
	if err != nil {
		r.fatalf("get type: %v", err)
	}
	if info.Settings.Paused != m.paused {
		r.fatalf("paused %v, the model says %v", info.Settings.Paused, m.paused)
	}
	for _, s := range []fdbq.State{fdbq.Pending, fdbq.Running, fdbq.Finished} {
		want := m.listed(s)
		n, err := r.q.Count(ctx, db, "email", s)
		if err != nil || n != int64(len(want)) {
			r.fatalf("count %s = %d %v, the model has %d", s, n, err, len(want))
		}
		if ids := trListAll(r.t, r.q, "email", s, 1+r.rng.IntN(3)); !slices.Equal(ids, want) {
			r.fatalf("list %s = %v, the model's index order is %v", s, ids, want)
		}
	}
	if info.Pending+info.Running+info.Finished != int64(len(m.jobs)) {
		r.fatalf("type counts %+v, the model has %d jobs", info, len(m.jobs))
	}
	// The history of every minute since the run began (the last day's).
	from := max(m.start, m.now-(fdbq.MaxHistoryMinutes-1)*60_000)
	h, err := r.q.History(ctx, db, "email", time.UnixMilli(from), time.UnixMilli(m.now))
	if err != nil {
		r.fatalf("history: %v", err)
	}
	if h.Unreadable != 0 || len(h.Minutes) != int(m.now/60_000-from/60_000+1) {
		r.fatalf("history of %d minutes, %d unreadable keys, from %d to %d", len(h.Minutes), h.Unreadable, from, m.now)
	}
	for _, got := range h.Minutes {
		want := m.hist[got.At.UnixMilli()/60_000]
		want.At = got.At
		if got != want {
			r.fatalf("history of %s: %+v, the model says %+v", got.At.Format(time.RFC3339), got, want)
		}
	}
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// compare checks one job against the model.
func (r *modelRun) compare(what, id string, j *fdbq.Job) {
	r.t.Helper()
	w := r.m.jobs[id]
	if j == nil || w == nil {
		r.fatalf("%s %s: job %+v, model %+v", what, id, j, w)
	}
	diff := func(field string, got, want any) {
		r.t.Helper()
		if got != want {
			r.fatalf("%s %s: %s is %v, the model says %v\njob:   %+v\nmodel: %+v", what, id, field, got, want, *j, *w)
		}
	}
	diff("id", j.ID, id)
	diff("state", j.State, w.state)
	diff("outcome", j.Outcome, w.outcome)
	diff("attempts", j.Attempts, w.attempts)
	diff("data", string(j.Data), w.data)
	diff("result", string(j.Result), w.result)
	diff("progress", string(j.Progress), w.progress)
	diff("error", j.Error, w.err)
	diff("priority", j.Priority, w.priority)
	diff("max attempts", j.MaxAttempts, w.maxAttempts)
	diff("resubmitted", j.Resubmitted, w.resubmit)
	diff("added at", ms(j.AddedAt), w.added)
	diff("scheduled at", ms(j.ScheduledAt), w.sched)
	diff("started at", ms(j.StartedAt), w.started)
	diff("heartbeat at", ms(j.HeartbeatAt), w.heartbeat)
	diff("finished at", ms(j.FinishedAt), w.finished)
}
