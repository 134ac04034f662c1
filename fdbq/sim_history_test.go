package fdbq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// The simulation's history: an entry for every call a simulated process
// made (and for every crash, restart and clock jump), and a commit log of
// every transaction that applied a write, in commit order, with the job
// records it changed before and after. The commit log is taken below the
// fault injector, at the store itself, so it holds what really committed
// (a commit the injector then reported as commit_unknown_result
// included), attributed to the call whose transaction it was. The checks
// (sim_check_test.go) compare the calls' answers with it.

// simJobRef names a job.
type simJobRef struct{ typ, id string }

func (j simJobRef) String() string {
	if j.id == "" {
		return "type " + j.typ
	}
	return j.typ + "/" + j.id
}

// simEntry is one call of a simulated process, or an event of the
// environment (op "crash", "restart", "clock").
type simEntry struct {
	n          int
	at, end    time.Duration // sim time when it began and returned
	proc, gen  int
	actor      string
	depth      int // calls of other processes it ran inside of
	op, args   string
	jobs       []simJobRef
	lock       string    // the lease's lock, for lease operations
	held       []simHeld // the jobs and locks of a lease call, or what an accept got
	res        string
	err        error
	class      string // ok, halt, wrongstate, notfound, unknown (its process died, or its outcome is unknown), spin, other
	commits    []int  // the commit log's indexes of its applied writes
	attempts   int    // transactions it began
	failures   int    // of those, the ones the store failed (commit or begin)
	faults     int64  // faults the process's injector injected meanwhile
	logAtBegin int    // commit log length when it began
	// logAtLastBegin is the commit log length when its last transaction
	// began: what that transaction read is the store after those commits.
	logAtLastBegin int
	logAtEnd       int
	stats          *fdbq.SweepStats
	sweepBound     int // sweep: the transactions it may make
}

// simCommit is one transaction that applied writes.
type simCommit struct {
	n      int
	at     time.Duration
	entry  *simEntry // nil: setup
	writes []simWrite
	// effects are the jobs whose worker's own write (simEffectKey) the
	// transaction made, beside its Finish.
	effects []simJobRef
}

// simEffectKey is a worker's own write in the transaction of its
// Finish: a counter per job, outside the queue's keys, that must move
// with the job's finishes and with nothing else.
func simEffectKey(job simJobRef) []byte { return tuple.Tuple{"sim-effect", job.typ, job.id}.MustPack() }

// simWrite is one job record a commit changed: before and after (nil:
// absent), or one type's settings.
type simWrite struct {
	job        simJobRef
	prev, next *fdbq.StoredJob
	settings   *fdbq.TypeSettings // a type key written (job.id is empty)
	// holder, for a job the monitor took back, is the worker that still
	// held its lease, alive and heartbeating, when it did ("": none).
	holder string
}

// simHistory is the whole record of a run.
type simHistory struct {
	entries []*simEntry
	log     []*simCommit
	// names gives each lock a short name in the order the run meets them,
	// so that a replay prints the same names (locks are random).
	names map[string]string
}

func (h *simHistory) lockName(lock string) string {
	if lock == "" {
		return "-"
	}
	if n, ok := h.names[lock]; ok {
		return n
	}
	n := fmt.Sprintf("L%d", len(h.names)+1)
	h.names[lock] = n
	return n
}

// classify names what an error says about a call.
func classifyErr(err error, crashed bool) string {
	switch {
	case err == nil:
		return "ok"
	case crashed || errors.Is(err, errSimCrash) || errors.Is(err, kv.ErrCommitUnknownResult):
		return "unknown"
	case errors.Is(err, context.DeadlineExceeded):
		return "spin"
	case errors.Is(err, fdbq.ErrHalt):
		return "halt"
	case errors.Is(err, fdbq.ErrWrongState):
		return "wrongstate"
	case errors.Is(err, fdbq.ErrNotFound):
		return "notfound"
	}
	return "other"
}

// errSimCrash is what every store call of a crashed process answers.
var errSimCrash = errors.New("sim: the process crashed")

// describeJob is a record in a line of the history.
func (h *simHistory) describeJob(j *fdbq.StoredJob, base time.Time) string {
	if j == nil {
		return "absent"
	}
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%.3fs", t.Sub(base).Seconds())
	}
	switch j.State {
	case fdbq.Pending:
		s := fmt.Sprintf("pending(sched=%s att=%d", at(j.ScheduledAt), j.Attempts)
		if j.LastLock != "" {
			s += " last=" + h.exitName(j.LastLock)
		}
		return s + ")"
	case fdbq.Running:
		s := fmt.Sprintf("running(%s hb=%s exp=%s att=%d", h.lockName(j.Lock), at(j.HeartbeatAt), at(time.UnixMilli(j.ExpiresAt)), j.Attempts)
		if j.Resubmitted {
			s += " resubmit"
		}
		return s + ")"
	}
	s := fmt.Sprintf("finished(%s at=%s att=%d", j.Outcome, at(j.FinishedAt), j.Attempts)
	if j.LastLock != "" {
		s += " last=" + h.exitName(j.LastLock)
	}
	return s + ")"
}

// exitName is a record's last lock exit ("lock:finish") with the lock's
// short name.
func (h *simHistory) exitName(exit string) string {
	lock, how, _ := strings.Cut(exit, ":")
	return h.lockName(lock) + ":" + how
}

func (e *simEntry) line(h *simHistory) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d t=%.3fs %s%s %s", e.n, e.at.Seconds(), strings.Repeat("  ", e.depth), e.actor, e.op)
	if e.args != "" {
		b.WriteString(" " + e.args)
	}
	if e.lock != "" {
		b.WriteString(" lease=" + h.lockName(e.lock))
	}
	if e.class != "" {
		fmt.Fprintf(&b, " → %s", e.res)
		if e.end != e.at {
			fmt.Fprintf(&b, " (t=%.3fs", e.end.Seconds())
			if e.attempts > 1 {
				fmt.Fprintf(&b, ", %d transactions, %d failed", e.attempts, e.failures)
			}
			b.WriteString(")")
		}
	}
	return b.String()
}

func (c *simCommit) line(h *simHistory, w simWrite, base time.Time) string {
	who := "setup"
	if c.entry != nil {
		who = fmt.Sprintf("#%d", c.entry.n)
	}
	if w.settings != nil {
		return fmt.Sprintf("      c%d t=%.3fs by %s: type %s settings %s", c.n, c.at.Seconds(), who, w.job.typ, settingsText(*w.settings))
	}
	return fmt.Sprintf("      c%d t=%.3fs by %s: %s %s → %s", c.n, c.at.Seconds(), who, w.job,
		h.describeJob(w.prev, base), h.describeJob(w.next, base))
}

func settingsText(s fdbq.TypeSettings) string {
	return fmt.Sprintf("{timeout=%v retry=%s/%d/%v paused=%v retention=%v}", s.ActivityTimeout, s.Retry.Backoff, s.Retry.MaxAttempts, s.Retry.Base, s.Paused, s.Retention)
}

// jobHistory prints what the run did to one job, up to the entry upTo
// (and a few entries after it): every call that named it or wrote it,
// with the writes, and the crashes of the processes that held it; at
// most limit entries, the last ones.
func (h *simHistory) jobHistory(job simJobRef, upTo, limit int, base time.Time) string {
	relevant := func(e *simEntry) bool {
		if slices.Contains(e.jobs, job) {
			return true
		}
		for _, c := range e.commits {
			for _, w := range h.log[c].writes {
				if w.job == job {
					return true
				}
			}
		}
		return false
	}
	var picked []*simEntry
	after := 0
	for _, e := range h.entries {
		if !relevant(e) {
			continue
		}
		if e.n > upTo {
			if after++; after > 5 {
				break
			}
		}
		picked = append(picked, e)
	}
	if len(picked) > limit {
		picked = picked[len(picked)-limit:]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "history of %s (t is simulated time, the times in records the writer's wall clock; %d entries", job, len(picked))
	if len(picked) == limit {
		b.WriteString(", the last ones")
	}
	b.WriteString("):\n")
	for _, e := range picked {
		b.WriteString("  " + e.line(h) + "\n")
		for _, c := range e.commits {
			for _, w := range h.log[c].writes {
				if w.job == job {
					b.WriteString("  " + h.log[c].line(h, w, base) + "\n")
				}
			}
		}
	}
	return b.String()
}

// --- the store underneath: where commits are logged ---

// simKeys parses the keys of the queue's layout (doc.go) that the commit
// log follows: job records and type settings.
type simKeys struct {
	jobs, types tuple.Subspace
}

func newSimKeys() simKeys {
	root := tuple.FromBytes(fdbq.DefaultPrefix)
	return simKeys{jobs: root.Sub(1), types: root.Sub(8)}
}

// job returns the job a key names, if it is a job key.
func (k simKeys) job(key []byte) (simJobRef, bool) {
	if !k.jobs.Contains(key) {
		return simJobRef{}, false
	}
	t, err := k.jobs.Unpack(key)
	if err != nil || len(t) != 2 {
		return simJobRef{}, false
	}
	typ, ok1 := t[0].(string)
	id, ok2 := t[1].(string)
	return simJobRef{typ, id}, ok1 && ok2
}

func (k simKeys) typ(key []byte) (string, bool) {
	if !k.types.Contains(key) {
		return "", false
	}
	t, err := k.types.Unpack(key)
	if err != nil || len(t) != 1 {
		return "", false
	}
	name, ok := t[0].(string)
	return name, ok
}

// simKeyWrite is a transaction's last write to a key the log follows.
type simKeyWrite struct {
	key     []byte
	value   []byte
	cleared bool
}

// simLower sits between a process's fault injector and the shared store:
// it logs what commits, and crashes the process at commits.
type simLower struct {
	s   *sim
	p   *simProc
	gen int
}

func (b *simLower) Begin(ctx context.Context) (kv.Transaction, error) {
	if !b.p.aliveAt(b.gen) {
		return nil, errSimCrash
	}
	tx, err := b.s.store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	t := &simLowerTx{writeTx: writeTx{Transaction: tx}, b: b, e: b.s.top(), idx: map[string]int{}}
	t.onWrite = t.note
	t.onClearTo = func(r kv.Range) { t.ranges = append(t.ranges, r) }
	effects := tuple.Sub("sim-effect")
	t.onAdd = func(key []byte, _ int64) {
		if tup, err := effects.Unpack(key); err == nil && effects.Contains(key) && len(tup) == 2 {
			t.effects = append(t.effects, simJobRef{tup[0].(string), tup[1].(string)})
		}
	}
	return t, nil
}

// Close does nothing: the store is shared and outlives every process.
func (b *simLower) Close() error { return nil }

type simLowerTx struct {
	writeTx
	b       *simLower
	e       *simEntry
	writes  []simKeyWrite
	idx     map[string]int
	ranges  []kv.Range
	effects []simJobRef
}

// writeTx is a transaction that notes whether it wrote anything, and
// hands each set, clear and range clear to its hooks.
type writeTx struct {
	kv.Transaction
	wrote     bool
	onWrite   func(key, value []byte) // value nil: cleared
	onClearTo func(r kv.Range)
	onAdd     func(key []byte, delta int64)
}

func (t *writeTx) Set(key, value []byte) {
	t.wrote = true
	if t.onWrite != nil {
		if value == nil {
			value = []byte{}
		}
		t.onWrite(key, value)
	}
	t.Transaction.Set(key, value)
}

func (t *writeTx) Clear(key []byte) {
	t.wrote = true
	if t.onWrite != nil {
		t.onWrite(key, nil)
	}
	t.Transaction.Clear(key)
}

func (t *writeTx) ClearRange(r kv.Range) {
	t.wrote = true
	if t.onClearTo != nil {
		t.onClearTo(r)
	}
	t.Transaction.ClearRange(r)
}

func (t *writeTx) Atomic(op kv.MutationType, key, p []byte) {
	t.wrote = true
	t.Transaction.Atomic(op, key, p)
}

func (t *writeTx) Add(key []byte, delta int64) {
	t.wrote = true
	if t.onAdd != nil {
		t.onAdd(key, delta)
	}
	t.Transaction.Add(key, delta)
}

func (t *writeTx) SetVersionstampedKey(key, value []byte) {
	t.wrote = true
	t.Transaction.SetVersionstampedKey(key, value)
}

func (t *writeTx) SetVersionstampedValue(key, value []byte) {
	t.wrote = true
	t.Transaction.SetVersionstampedValue(key, value)
}

// note keeps the transaction's last write to a key the log follows.
func (t *simLowerTx) note(key, value []byte) {
	k := t.b.s.keys
	if _, ok := k.job(key); !ok {
		if _, ok := k.typ(key); !ok {
			return
		}
	}
	w := simKeyWrite{key: bytes.Clone(key), value: bytes.Clone(value), cleared: value == nil}
	if i, ok := t.idx[string(key)]; ok {
		t.writes[i] = w
		return
	}
	t.idx[string(key)] = len(t.writes)
	t.writes = append(t.writes, w)
}

func (t *simLowerTx) Commit() error {
	s, p := t.b.s, t.b.p
	if !p.aliveAt(t.b.gen) {
		t.Transaction.Cancel()
		return errSimCrash
	}
	if t.wrote && s.roll(s.cfg.crashBeforeCommit) {
		s.crash(p, "before a commit")
		t.Transaction.Cancel()
		return errSimCrash
	}
	if err := t.Transaction.Commit(); err != nil {
		return err
	}
	if t.wrote {
		s.logCommit(t)
		if s.roll(s.cfg.crashAfterCommit) {
			// The commit applied; the process dies before it learns so.
			s.crash(p, "after a commit applied")
			return errSimCrash
		}
	}
	return nil
}

// logCommit appends an applied transaction to the commit log and brings
// the shadow copy of the job records up to date.
func (s *sim) logCommit(t *simLowerTx) {
	c := &simCommit{n: len(s.hist.log), at: s.now, entry: t.e, effects: t.effects}
	for _, w := range t.writes {
		if job, ok := s.keys.job(w.key); ok {
			var next *fdbq.StoredJob
			if !w.cleared {
				j, err := fdbq.DecodeStoredJob(w.value, job.typ, job.id)
				if err != nil {
					s.violate("store", job, t.e, "a commit wrote a job record that does not decode: %v", err)
					continue
				}
				next = j
			}
			w := simWrite{job: job, prev: s.shadow[job], next: next}
			if w.prev != nil && next != nil && w.prev.State == fdbq.Running && next.LastLock == w.prev.Lock+":recycle" {
				w.holder = s.holder(job, w.prev.Lock)
			}
			c.writes = append(c.writes, w)
			s.setShadow(job, next)
			continue
		}
		name, _ := s.keys.typ(w.key)
		var ts fdbq.TypeSettings
		if w.cleared || json.Unmarshal(w.value, &ts) != nil {
			s.violate("store", simJobRef{typ: name}, t.e, "a commit wrote type settings that do not decode: %q", w.value)
			continue
		}
		c.writes = append(c.writes, simWrite{job: simJobRef{typ: name}, settings: &ts})
		s.typeHist[name] = append(s.typeHist[name], simSettingsAt{at: s.now, s: ts})
	}
	for _, r := range t.ranges {
		// fdbq clears no job records by range; a range that covers some
		// is logged like clears of each.
		for _, job := range s.shadowOrder {
			key := trJobKey(job.typ, job.id)
			if s.shadow[job] != nil && string(key) >= string(r.Begin) && string(key) < string(r.End) {
				c.writes = append(c.writes, simWrite{job: job, prev: s.shadow[job]})
				s.setShadow(job, nil)
			}
		}
	}
	s.hist.log = append(s.hist.log, c)
	// A commit that changes no job, type or effect (an accept's move of
	// index entries between the ready and scheduled indexes, a sweep's
	// clearing of claims) is no answer of the call's.
	if t.e != nil && (len(c.writes) > 0 || len(c.effects) > 0) {
		t.e.commits = append(t.e.commits, c.n)
	}
}

// holder returns the worker that holds a live lease on job under lock:
// its process is up and it is heartbeating the lease (not stalled).
func (s *sim) holder(job simJobRef, lock string) string {
	for _, p := range s.procs {
		for _, a := range p.actors {
			for _, l := range a.leases {
				if p.up && l.l.Lock == lock && l.l.Type == job.typ && l.l.ID == job.id &&
					(l.stallUntil == 0 || s.now < l.stallFrom) {
					return a.name
				}
			}
		}
	}
	return ""
}

// simUpper sits between a process's kv.DB and its fault injector: it
// counts each call's transactions, moves the simulated time, delays
// commits, and runs other processes' calls while a transaction is open,
// while its commit is delayed, and between a commit whose result is
// unknown and the retry.
type simUpper struct {
	s     *sim
	p     *simProc
	gen   int
	inner kv.Backend
}

func (b *simUpper) Begin(ctx context.Context) (kv.Transaction, error) {
	s := b.s
	e := s.top()
	if e != nil {
		e.attempts++
		e.logAtLastBegin = len(s.hist.log)
	}
	if !b.p.aliveAt(b.gen) {
		return nil, errSimCrash
	}
	s.advance(time.Millisecond)
	tx, err := b.inner.Begin(ctx)
	if err != nil {
		if e != nil {
			e.failures++
		}
		return nil, err
	}
	// The read version is taken: what other processes commit now, this
	// transaction does not see, and conflicts with where it reads it.
	s.interleave(s.cfg.beginInterleave)
	return &simUpperTx{Transaction: tx, b: b, e: e}, nil
}

func (b *simUpper) Close() error { return nil }

type simUpperTx struct {
	kv.Transaction
	b *simUpper
	e *simEntry
}

func (t *simUpperTx) Commit() error {
	s := t.b.s
	if s.roll(s.cfg.delayRate) {
		s.advance(time.Duration(s.rng.Int64N(int64(s.cfg.maxDelay))))
		s.interleave(0.5)
	}
	err := t.Transaction.Commit()
	if err != nil {
		if t.e != nil {
			t.e.failures++
		}
		if kv.IsMaybeCommitted(err) {
			// Between a commit that may have applied and the retry's
			// check: other clients move the job on.
			s.interleave(s.cfg.unknownInterleave)
		}
	}
	return err
}
