package fdbq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jobstage/jobstage/internal/lifecycle"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// MonitorOptions configure a Monitor.
type MonitorOptions struct {
	// Interval paces the monitor: it sweeps about an Interval after the
	// first deadline passes (a running job's activity timeout, a finished
	// job's retention, a claim's ClaimTTL), jittered by up to half of it
	// so that monitors in several processes spread out, and reads the
	// store at most about once an Interval however often jobs change.
	// While a type has running jobs it reads every Interval (or every
	// sixteenth of their shortest activity timeout, if longer), which is
	// how it learns of their renewals; while none has, it waits on
	// watches and a timer, and makes no transactions until something
	// changes or falls due, but the renewal of its holds on the change
	// keys every half minute (see Waking in the package doc). The timer runs on real
	// time: with an injected clock (Options.Now) the monitor learns that
	// the clock moved from the next change, or from a Sweep call. An entry
	// a sweep could not act on (a corrupt record) has it sweep every
	// Interval while it lasts. Default 1 s.
	Interval time.Duration
	// Clock measures the activity timeout (see Monitor): only its rate
	// matters, and it must not jump. Default time.Now, whose readings
	// carry the monotonic clock (the queue's Options.Now is a wall clock,
	// and is not used for this).
	Clock func() time.Time
	// ClaimTTL: accept claims (see Accept) older than this are deleted.
	// Default 5 min.
	ClaimTTL time.Duration
	Logger   *slog.Logger
	// OnSweep, if set, is called after each sweep with what it did.
	OnSweep func(SweepStats)
}

// SweepStats is what one sweep did.
type SweepStats struct {
	Recycled int // running jobs found stale (no renewal for their activity timeout) made pending again
	Failed   int // of those, jobs out of attempts, finished as failed
	Expired  int // finished jobs past retention removed
	// Skipped counts the due jobs the sweep could not change: a record or
	// index entry it cannot read, a record it cannot store. They are left
	// as they are, logged the first time, and tried again every sweep.
	Skipped int
	// ByType breaks the counts down by job type; every type the sweep
	// went through has an entry, zero or not.
	ByType map[string]TypeSweepStats
}

// TypeSweepStats is what one sweep did to one job type's jobs.
type TypeSweepStats struct {
	Recycled, Failed, Expired, Skipped int
}

func (st *SweepStats) add(typ string, recycled, failed, expired, skipped int) {
	st.Recycled += recycled
	st.Failed += failed
	st.Expired += expired
	st.Skipped += skipped
	if st.ByType == nil {
		st.ByType = map[string]TypeSweepStats{}
	}
	t := st.ByType[typ]
	t.Recycled += recycled
	t.Failed += failed
	t.Expired += expired
	t.Skipped += skipped
	st.ByType[typ] = t
}

// Monitor is the activity monitor: it takes back running jobs whose worker
// stopped heartbeating, and removes finished jobs past their type's
// retention. Monitors in several processes may run at once: every change is
// a transaction that re-checks the job, so a job is recycled once.
//
// No clock but the monitor's own decides that a job is stale. Accept and
// Heartbeat key a running job's activity entry by their transaction's
// read version and store the commit's versionstamp in the stamp of that
// read version (one key for all the renewals at it). Each of the
// monitor's transactions notes its read version and the time of its
// Clock after obtaining it; a job is recycled only when the stamp of its
// entry's read version is at most the version of a transaction the monitor made
// at least the job's activity timeout before the sweep's transaction
// began, by its Clock, and the entry is still the job's: then no renewal
// committed for at least the timeout, whatever the clocks of the workers
// or of other monitors say. A monitor that starts knows of no earlier
// transaction, so it recycles nothing during its first activity timeout;
// a dead job is taken back within its timeout, plus the monitor's reading
// pace while jobs run (an Interval, or a sixteenth of the timeout if that
// is longer), plus one to two Intervals, on the clock of the monitor that
// takes it.
//
// Sweeps go in batches whose size adapts like couch_jobs' (AIMD): start at
// 1000 jobs, +100 after a transaction that succeeds, ×0.75 after each
// attempt that fails (too old, too large, a conflict, including the
// attempts the store's retry loop retries), at least 1, so a sweep stays
// inside FoundationDB's 5 s and 10 MB limits whatever the backlog.
//
// A job the monitor cannot change (its record or index entry does not
// decode, its record cannot be stored) is skipped, and the rest of its
// batch and type go on: one bad job must not keep every job of its type
// that expires after it running for good. A type whose settings do not
// decode is skipped the same way, and reported in Sweep's error.
type Monitor struct {
	q    *Queue
	opts MonitorOptions

	life lifecycle.Lifecycle
	// stopLoop ends the loop Start began: set by Start, called by Stop
	// (the lifecycle orders them).
	stopLoop func()

	mu    sync.Mutex
	batch int
	// skipped holds the index entries recent sweeps skipped, each with the
	// number of the last sweep that did, so that a job is logged when it
	// is first skipped rather than at every sweep.
	skipped map[string]uint64
	sweeps  uint64
	// seen is what the monitor's transactions learned (see sample);
	// longest is the longest activity timeout seen, how far back it
	// must remember.
	seen    samples
	longest time.Duration
	clock   func() time.Time
	// holds are the monitor's holds on the change keys of idle types
	// (see idle); its loop alone uses them.
	holds map[string]*interestHold
}

// NewMonitor returns a stopped monitor.
func NewMonitor(q *Queue, o MonitorOptions) *Monitor {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.ClaimTTL <= 0 {
		o.ClaimTTL = 5 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	clock := o.Clock
	if clock == nil {
		clock = time.Now
	}
	return &Monitor{q: q, opts: o, life: lifecycle.Lifecycle{Name: "fdbq.Monitor"}, batch: 1000, skipped: map[string]uint64{},
		seen: samples{spacing: o.Interval / 4}, clock: clock, holds: map[string]*interestHold{}}
}

// sample notes what tx tells of the store's versions: the commits at its
// read version or before had happened by now, on the monitor's clock.
func (m *Monitor) sample(tx kv.ReadTx) error {
	rv, err := tx.ReadVersion()
	if err != nil {
		return err
	}
	at := m.clock()
	m.mu.Lock()
	defer m.mu.Unlock()
	// Samples a quarter interval apart, or farther for long timeouts, so
	// that maxSamples cover the longest twice over and thinning (which
	// would leave old samples ever farther apart) is for bursts alone.
	horizon := m.longest + 2*m.opts.Interval
	m.seen.spacing = max(m.opts.Interval/4, 2*horizon/maxSamples)
	m.seen.note(rv, at)
	m.seen.prune(at.Add(-horizon))
	return nil
}

// timeoutSeen makes the monitor remember samples for jobs of timeout d.
func (m *Monitor) timeoutSeen(d time.Duration) {
	m.mu.Lock()
	m.longest = max(m.longest, d)
	m.mu.Unlock()
}

func (m *Monitor) sampleBefore(t time.Time) (versionSample, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen.before(t)
}

func (m *Monitor) dueAt(cv int64, timeout time.Duration) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen.dueAt(cv, timeout)
}

// Start runs sweeps in the background until Stop. A monitor runs once:
// Start fails if it was started or stopped before. ctx's values reach the
// sweeps; its end does not stop them (Stop does).
func (m *Monitor) Start(ctx context.Context) error {
	return m.life.Start(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		m.stopLoop = func() {
			cancel()
			<-done
		}
		go m.loop(ctx, done)
		return nil
	})
}

// Stop ends the background sweeps and waits for the one running, or for
// ctx (ctx's error then; the sweep still ends). Stopping a stopped monitor
// does nothing; stopping one that never started keeps it from starting.
// It is safe from any goroutine, any number of times.
func (m *Monitor) Stop(ctx context.Context) error {
	return m.life.Stop(ctx, func(_ context.Context, started bool) error {
		if started {
			m.stopLoop()
		}
		return nil
	})
}

// loop sweeps, then waits until a sweep has something to do: the first
// deadline of the store's indexes (a running job going stale, a
// finished job's retention, a claim's ClaimTTL) or a change that can bring
// an earlier one (a job's change to a type with no running job, the
// registry key that registering a type bumps), reading again at its pace
// while jobs run (see nextDue). While no job runs and nothing is due or
// changes it makes no transactions at all.
func (m *Monitor) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	defer m.releaseInterest(nil)
	// failures counts the rounds in a row that failed; each doubles the
	// pause before the next, so a store that keeps failing is not read
	// every interval.
	failures := 0
	sweep := true
	for {
		if !m.pause(ctx, failures) {
			return
		}
		if sweep {
			st, err := m.Sweep(ctx)
			if err != nil && ctx.Err() == nil {
				m.opts.Logger.Warn("fdbq: activity monitor sweep failed", "err", err)
			}
			if m.opts.OnSweep != nil {
				m.opts.OnSweep(st)
			}
			if err != nil && !onlyTypeErrors(err) {
				// The store failed; a type whose settings do not decode
				// is no reason to slow the monitor for the others.
				failures++
				continue
			}
		}
		var err error
		sweep, err = m.idle(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			m.opts.Logger.Warn("fdbq: activity monitor cannot wait for its next deadline; sweeping instead", "err", err)
			failures++
			// A sweep needs no watch: with none to be had (too many
			// watches), the monitor still sweeps, at the failures' pace.
			sweep = true
			continue
		}
		failures = 0
	}
}

// pause waits before the monitor's next read of the store: the interval,
// jittered by up to half of it so that monitors in several processes
// spread out and so that changes in a busy store make one read an
// interval, doubled for each failed round in a row (up to 64 times). It
// reports false when ctx ended.
func (m *Monitor) pause(ctx context.Context, failures int) bool {
	base := m.opts.Interval
	for i := 0; i < min(failures, 6); i++ {
		if next := base * 2; next > base {
			base = next
		}
	}
	t := time.NewTimer(base/2 + time.Duration(rand.Int64N(int64(base))))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// idle waits until the first deadline passes (true: sweep), or until a
// change calls for reading the deadlines again (false). Every entry of the
// indexes counts, also one a sweep skipped (a record it cannot read): such
// an entry has the monitor sweep every interval while it lasts, which is
// the price of never trusting the clock to say that an entry was seen
// before (an accept that read the clock before a sweep can commit after
// it, and clocks step back).
//
// A hold it has just taken calls for a read at once, not after a pause:
// a type that became busy meanwhile would otherwise have every change of
// it bump its change key until the next read lets the hold go.
func (m *Monitor) idle(ctx context.Context) (bool, error) {
	for range maxHoldRereads {
		sweep, again, err := m.idleOnce(ctx)
		if !again || err != nil {
			return sweep, err
		}
	}
	return false, nil
}

// maxHoldRereads bounds the reads one idle makes at once because it took
// (or wrote again) a hold: another monitor clearing the holds as stale
// each time must not keep this one reading.
const maxHoldRereads = 4

// idleOnce is one read of idle; again reports that it took or restored a
// hold, so that its read may have missed a change that bumped no key.
func (m *Monitor) idleOnce(ctx context.Context) (sweep, again bool, err error) {
	w, err := m.nextDue(ctx)
	if err != nil {
		return false, false, err
	}
	defer w.cancel()
	renew, again, err := m.holdInterest(ctx, w.idleTypes)
	if w.has && w.wait <= 0 {
		return true, false, nil // a sweep reads everything anyway
	}
	if err != nil || again {
		return false, again, err
	}
	if renew > 0 {
		w.rereadIn(renew)
	}
	var reread <-chan time.Time
	if w.reread > 0 && (!w.has || w.reread < w.wait) {
		t := time.NewTimer(w.reread)
		defer t.Stop()
		reread = t.C
	}
	var timer <-chan time.Time
	if w.has {
		t := time.NewTimer(timerMs(w.wait.Milliseconds() + 1))
		defer t.Stop()
		timer = t.C
	}
	fired := make(chan int, 1) // the index of the watch in w.watches
	for i, wt := range w.watches {
		// Each goroutine ends when its watch is ready: fired, failed, or
		// cancelled by w.cancel.
		go func() {
			<-wt.Ready()
			select {
			case fired <- i:
			default:
			}
		}()
	}
	select {
	case <-ctx.Done():
		return false, false, ctx.Err()
	case <-timer:
		return true, false, nil
	case <-reread:
		return false, false, nil
	case i := <-fired:
		// The monitor reads everything again after its pause, so it lets
		// go of the hold of the type whose change woke it until then:
		// held through the pause, a type that has just become busy would
		// have every change of it bump its change key for up to one and
		// a half Intervals. The read takes it again if the type is still
		// idle.
		if typ := w.changeOf[i]; typ != "" {
			m.letGo(typ)
		}
		return false, false, w.watches[i].Wait(ctx)
	}
}

// holdInterest makes the monitor's holds on change keys those of types:
// it takes a hold on each it lacks and lets go of the others. again
// reports that it took one, or wrote again one that another monitor had
// cleared, so that the monitor reads again: its last read may have missed
// a change that bumped no key. renew is when the
// first hold must be renewed (0: none held).
func (m *Monitor) holdInterest(ctx context.Context, types []string) (renew time.Duration, again bool, err error) {
	want := make(map[string]bool, len(types))
	for _, typ := range types {
		want[typ] = true
	}
	m.releaseInterest(want)
	hs := make([]*interestHold, 0, len(types))
	for _, typ := range types {
		h := m.holds[typ]
		if h == nil {
			h = m.q.refInterest(typ)
			m.holds[typ], again = h, true
		}
		hs = append(hs, h)
	}
	restored, err := m.q.renewInterests(ctx, hs)
	if err != nil {
		m.releaseInterest(nil)
		return 0, false, err
	}
	again = again || restored
	for _, h := range hs {
		if d := h.renewIn(); renew == 0 || d < renew {
			renew = max(d, time.Millisecond)
		}
	}
	return renew, again, nil
}

// letGo lets go of the monitor's hold on typ, if it has one.
func (m *Monitor) letGo(typ string) {
	if h := m.holds[typ]; h != nil {
		delete(m.holds, typ)
		m.q.releaseInterests([]*interestHold{h})
	}
}

// releaseInterest lets go of the monitor's holds on the types not in keep.
func (m *Monitor) releaseInterest(keep map[string]bool) {
	var hs []*interestHold
	for typ, h := range m.holds {
		if !keep[typ] {
			hs = append(hs, h)
			delete(m.holds, typ)
		}
	}
	if len(hs) > 0 {
		m.q.releaseInterests(hs)
	}
}

// monitorWait is what an idle monitor waits for.
type monitorWait struct {
	wait    time.Duration // from when it was read until the first deadline passes
	has     bool          // false: nothing has a deadline
	watches []kv.Watch
	// changeOf names, for each of watches, the type whose change key it
	// watches ("": another key).
	changeOf []string
	// reread, if set, is when to read again without a sweep: types
	// have running jobs (see pollEvery), or holds are to be renewed.
	reread time.Duration
	// idleTypes are the types without running jobs, whose change keys
	// the monitor holds and watches (see idle).
	idleTypes []string
}

func (w *monitorWait) rereadIn(d time.Duration) {
	d = max(d, time.Millisecond)
	if w.reread == 0 || d < w.reread {
		w.reread = d
	}
}

// pollEvery is how often the monitor reads while a type has running jobs,
// shortest being the shortest activity timeout among them and current
// the type's setting: an Interval, or a sixteenth of the shorter of the
// two if that is longer. A running job's change bumps no key the monitor
// could watch (a key every job wrote would be the type's hot spot), so
// it learns of renewals by its own reads: each notes a version and the
// time (see sample), and a job that stopped renewing is found stale at
// most this much after its timeout, plus the pause. The same read finds
// what running jobs bring: finished jobs to keep, claims to clear.
func (m *Monitor) pollEvery(shortest, current time.Duration) time.Duration {
	if current > 0 {
		shortest = min(shortest, current)
	}
	return max(m.opts.Interval, shortest/16)
}

func (w *monitorWait) after(d time.Duration) {
	if !w.has || d < w.wait {
		w.wait, w.has = d, true
	}
}

// afterMs notes a deadline of the queue's clock, in Unix ms: one that
// has passed is due at once, one further off than a time.Duration holds
// (a clock centuries ahead wrote it) as far off as one does.
func (w *monitorWait) afterMs(deadline, now int64) {
	if deadline <= now {
		w.after(0)
		return
	}
	// Exact, as deadline > now, though deadline-now may not fit an int64.
	ms := uint64(deadline) - uint64(now)
	w.after(time.Duration(min(ms, uint64(math.MaxInt64/time.Millisecond))) * time.Millisecond)
}

// activityWindow is how many of the first activity entries of each
// timeout group an idle monitor reads for its timer: entries are in the
// order of their renewals' read versions, their commits in nearly that
// order.
const activityWindow = 16

// add notes a watch of the wait, on typ's change key or ("") another.
func (w *monitorWait) add(wt kv.Watch, changeOf string) {
	w.watches = append(w.watches, wt)
	w.changeOf = append(w.changeOf, changeOf)
}

func (w *monitorWait) cancel() {
	for _, wt := range w.watches {
		wt.Cancel()
	}
}

// nextDue reads, in one transaction, the first deadline of the indexes,
// and watches what can bring an earlier one: the change key of each type
// with no running job (which idle holds, so that a job's change to it
// bumps the key) and the registry key (a type registered, or its settings
// changed). A type with running jobs is read again at its pace
// (pollEvery) instead. At most one watch a type, so the monitor leaves
// most of the store's watches to acceptors and waiters.
func (m *Monitor) nextDue(ctx context.Context) (*monitorWait, error) {
	q := m.q
	var w *monitorWait
	return kv.Transact(ctx, q.db, func(tx kv.Tx) (*monitorWait, error) {
		if w != nil {
			w.cancel() // of an attempt that failed
		}
		w = &monitorWait{}
		if err := m.sample(tx); err != nil {
			return nil, err
		}
		defer func() {
			for _, typ := range w.idleTypes {
				w.add(tx.Watch(q.k.change(typ)), typ)
			}
		}()
		clock, now := m.clock(), q.nowMs()
		snap := tx.Snapshot()
		types, err := m.types(snap)
		if err != nil {
			return nil, err
		}
		w.add(tx.Watch(q.k.registry()), "")
		for _, t := range types {
			if t.err != nil {
				continue // not swept; its settings are reported by Sweep
			}
			shortest, busy, err := m.activityDue(snap, t, clock, w)
			if err != nil {
				return nil, err
			}
			if busy {
				w.rereadIn(m.pollEvery(shortest, t.Settings.ActivityTimeout))
			} else {
				w.idleTypes = append(w.idleTypes, t.Name)
			}
			if stale, next, wrong, err := q.staleInterest(snap, t.Name, now); err != nil {
				return nil, err
			} else if len(stale) > 0 || wrong {
				w.after(0)
			} else if next != 0 {
				w.afterMs(next, now)
			}
			// Stamps no entry names any more are cleared by a sweep.
			if cut, some, ok, err := m.stampCut(snap, nil, t.Name); err != nil {
				return nil, err
			} else if ok {
				for _, r := range m.stampsBelow(t.Name, cut, some) {
					kvs, err := snap.GetRange(r, kv.RangeOptions{Limit: 1})
					if err != nil {
						return nil, err
					}
					if len(kvs) > 0 {
						w.after(0)
						break
					}
				}
			}
			if at, ok, err := q.firstEventAt(snap, t.Name); err != nil {
				return nil, err
			} else if ok {
				w.afterMs(at+q.eventRetention.Milliseconds(), now)
			}
			if at, ok, err := q.historyDue(snap, t.Name); err != nil {
				return nil, err
			} else if ok {
				w.afterMs(at, now)
			}
			if t.Settings.Retention > 0 {
				r := t.Settings.Retention.Milliseconds()
				for lane := range activityLanes {
					at, ok, err := firstEntry(snap, q.k.finishedLane(t.Name, lane))
					if err != nil {
						return nil, err
					}
					if ok {
						w.afterMs(at+r, now)
					}
				}
			}
		}
		ttl := m.opts.ClaimTTL.Milliseconds()
		at, ok, err := firstEntry(snap, q.k.claims())
		if err != nil {
			return nil, err
		}
		if ok {
			w.afterMs(at+ttl, now)
		}
		return w, nil
	})
}

// activityDue notes when the first of a type's running jobs becomes stale
// if nothing renews it: when the sweep's range reaches its entry (a sample
// after its renewal's read version is the type's activity timeout old) and
// its renewal's commit is its own timeout old (see Monitor). An entry
// left by an earlier version (deadline-keyed) is due at once, to be moved.
// An entry whose value does not decode does not wake the monitor; sweeps
// find it when they run for other reasons.
func (m *Monitor) activityDue(snap kv.ReadTx, t sweepType, clock time.Time, w *monitorWait) (shortest time.Duration, busy bool, err error) {
	q := m.q
	if kvs, err := snap.GetRange(q.k.legacyActiveType(t.Name).Range(), kv.RangeOptions{Limit: 1}); err != nil || len(kvs) > 0 {
		w.after(0)
		return 0, true, err
	}
	groups, _, err := m.activeGroups(snap, t.Name)
	if err != nil || len(groups) == 0 {
		return 0, false, err
	}
	shortest = time.Duration(math.MaxInt64)
	for _, g := range groups {
		timeout := time.Duration(g.timeoutMs) * time.Millisecond
		m.timeoutSeen(timeout)
		shortest = min(shortest, timeout)
		sub := q.k.activeGroup(t.Name, g)
		kvs, err := snap.GetRange(sub.Range(), kv.RangeOptions{Limit: activityWindow})
		if err != nil {
			return 0, true, err
		}
		for _, e := range kvs {
			at, _, ok := parseIndexEntry(sub, e.Key)
			if !ok {
				continue
			}
			key, ok := q.k.stampOf(t.Name, at, e.Value)
			if !ok {
				continue
			}
			b, err := snap.Get(key)
			if err != nil {
				return 0, true, err
			}
			vs, ok := parseActivity(b)
			if !ok {
				continue
			}
			due, ok := m.dueAt(vs.CommitVersion(), timeout)
			if !ok {
				// This transaction's own sample knows of every entry it
				// reads, unless a concurrent one beat it: look again soon.
				w.after(m.opts.Interval)
				continue
			}
			w.after(due.Sub(clock))
		}
	}
	return shortest, true, nil
}

// maxGroups bounds the timeout groups of a type's running jobs that one
// sweep or wait goes through: a type has one group per activity timeout
// its running jobs were given, so more than this many means settings
// changed again and again while jobs ran; the rest are reached as the
// first ones empty.
const maxGroups = 256

// activeGroups returns the groups of a type's running jobs (a lane and a
// timeout), in order, one read each, and the keys that belong to no group
// (malformed: a sweep skips them).
func (m *Monitor) activeGroups(tx kv.ReadTx, typ string) ([]group, [][]byte, error) {
	sub := m.q.k.activeType(typ)
	r := sub.Range()
	var groups []group
	var bad [][]byte
	for len(groups) < maxGroups && len(bad) < maxGroups {
		kvs, err := tx.GetRange(r, kv.RangeOptions{Limit: 1})
		if err != nil || len(kvs) == 0 {
			return groups, bad, err
		}
		key := kvs[0].Key
		g, _, _, ok := parseActiveEntry(sub, key)
		if !ok {
			bad = append(bad, key)
			r.Begin = kv.KeyAfter(key)
			continue
		}
		groups = append(groups, g)
		r.Begin = m.q.k.activeGroup(typ, g).Range().End
	}
	return groups, bad, nil
}

// stampCut returns the oldest read version of a type's activity entries
// (none: the type has no entry), from the first entry of each timeout
// group, read from read. conflict, if not nil, gets the ranges in which a
// renewal at an older read version would land: before each group's first
// entry (with the gap since the last group) and after the last group. A
// transaction that adds them as read conflicts fails if such a renewal
// commits meanwhile, and only then: the writes at or after a first entry
// (heartbeats of the oldest jobs, accepts) cannot lower the cut. Keys that
// do not parse as an entry of fdbq's, and entries of no job, are passed
// over (they name no stamp), up to a budget of reads. ok is false when it
// cannot tell: more than maxGroups groups, or more than the budget of
// such keys.
func (m *Monitor) stampCut(read kv.ReadTx, conflict func(kv.Range), typ string) (cut int64, some, ok bool, err error) {
	q := m.q
	sub := q.k.activeType(typ)
	r := sub.Range()
	from := r.Begin // where the current group's search began
	groups := 0
	for reads := 0; reads < 2*maxGroups+2; reads++ {
		kvs, err := read.GetRange(r, kv.RangeOptions{Limit: activityWindow})
		if err != nil {
			return 0, false, false, err
		}
		if len(kvs) == 0 {
			if conflict != nil {
				conflict(kv.Range{Begin: from, End: r.End})
			}
			return cut, some, true, nil
		}
		var head []byte
		var g group
		var rv int64
		for _, e := range kvs {
			var ok bool
			var id string
			if g, rv, id, ok = parseActiveEntry(sub, e.Key); !ok {
				continue
			}
			b, err := read.Get(q.k.job(typ, id))
			if err != nil {
				return 0, false, false, err
			}
			if b != nil {
				head = e.Key
				break
			}
		}
		if head == nil {
			r.Begin = kv.KeyAfter(kvs[len(kvs)-1].Key)
			continue
		}
		if groups++; groups > maxGroups {
			return 0, false, false, nil
		}
		if !some || rv < cut {
			cut, some = rv, true
		}
		if conflict != nil {
			conflict(kv.Range{Begin: from, End: head})
		}
		r.Begin = q.k.activeGroup(typ, g).Range().End
		from = r.Begin
	}
	return 0, false, false, nil
}

// parseActiveEntry parses a key of the activity index as fdbq writes it:
// (lane, timeout_ms, read_version, id), the lane the id's and timeout_ms
// in (0, maxTimeoutMs].
func parseActiveEntry(sub tuple.Subspace, key []byte) (g group, rv int64, id string, ok bool) {
	t, err := sub.Unpack(key)
	if err != nil || len(t) != 4 {
		return group{}, 0, "", false
	}
	lane, ok0 := t[0].(int64)
	timeoutMs, ok1 := t[1].(int64)
	rv, ok2 := t[2].(int64)
	id, ok3 := t[3].(string)
	ok = ok0 && ok1 && ok2 && ok3 && timeoutMs > 0 && timeoutMs <= maxTimeoutMs && lane == int64(laneOf(id))
	return group{lane: int(lane), timeoutMs: timeoutMs}, rv, id, ok
}

// stampsBelow returns the ranges of a type's stamps that no activity entry
// names, given what stampCut returned: one a lane.
func (m *Monitor) stampsBelow(typ string, cut int64, some bool) []kv.Range {
	if !some {
		return []kv.Range{m.q.k.stampType(typ).Range()}
	}
	return m.q.k.stampsBelow(typ, cut)
}

// dropStamps clears the stamps of read versions older than every activity
// entry of a type: no running job's entry names them, and a renewal at
// one of them that commits later writes its stamp again.
func (m *Monitor) dropStamps(ctx context.Context, typ string) error {
	return m.q.db.Transact(ctx, func(tx kv.Tx) error {
		cut, some, ok, err := m.stampCut(tx.Snapshot(), tx.AddReadConflictRange, typ)
		if err != nil || !ok {
			return err
		}
		for _, r := range m.stampsBelow(typ, cut, some) {
			kvs, err := tx.Snapshot().GetRange(r, kv.RangeOptions{Limit: 1})
			if err != nil {
				return err
			}
			if len(kvs) > 0 {
				tx.ClearRange(r)
			}
		}
		return nil
	})
}

// firstEntry returns the time of the first entry of sub, an index whose
// keys start with a time in ms.
func firstEntry(snap kv.ReadTx, sub tuple.Subspace) (int64, bool, error) {
	kvs, err := snap.GetRange(sub.Range(), kv.RangeOptions{Limit: 1})
	if err != nil || len(kvs) == 0 {
		return 0, false, err
	}
	t, err := sub.Unpack(kvs[0].Key)
	var at int64
	ok := err == nil && len(t) > 0
	if ok {
		at, ok = t[0].(int64)
	}
	if !ok {
		return 0, false, fmt.Errorf("fdbq: malformed index entry %q", kvs[0].Key)
	}
	return at, true, nil
}

// Sweep runs one sweep over every type now. The jobs it skips are counted,
// not errors; the error says which types it could not get through (the
// store failed, or their settings do not decode), after trying them all.
//
// Its first transaction reads, for every type, whether it has anything a
// sweep works on (running jobs, finished jobs past the retention, stamps,
// entries of an earlier version), and the sweep spends transactions only
// on what it found: a type with none of these costs it no transaction, so
// the transactions of a sweep grow with the busy types, not with the
// registered ones. What it misses this way was written after that read,
// so it was renewed after every sample the sweep has: the next sweep
// finds it.
func (m *Monitor) Sweep(ctx context.Context) (SweepStats, error) {
	var st SweepStats
	m.startSweep()
	type found struct {
		types  []sweepType
		claims bool
	}
	ttl := m.opts.ClaimTTL.Milliseconds()
	f, err := kv.ReadTransact(ctx, m.q.db, func(tx kv.ReadTx) (found, error) {
		if err := m.sample(tx); err != nil {
			return found{}, err
		}
		types, err := m.types(tx)
		if err != nil {
			return found{}, err
		}
		now := m.q.nowMs()
		for i := range types {
			if types[i].err == nil {
				if err := m.survey(tx, &types[i], now); err != nil {
					return found{}, err
				}
			}
		}
		claims, err := anyIn(tx, rangeUpTo(m.q.k.claims(), now-ttl))
		return found{types, claims}, err
	})
	if err != nil {
		return st, err
	}
	var errs []error
	for _, t := range f.types {
		if t.err != nil {
			errs = append(errs, &typeError{t.err})
			continue
		}
		m.timeoutSeen(t.Settings.ActivityTimeout)
		st.add(t.Name, 0, 0, 0, 0)
		if t.legacy {
			if err := m.migrate(ctx, t.Name, &st); err != nil {
				errs = append(errs, err)
			}
		}
		if len(t.groups) > 0 || len(t.bad) > 0 {
			if err := m.recycle(ctx, t.Name, t.Settings, t.groups, t.bad, &st); err != nil {
				errs = append(errs, err)
			}
		}
		for _, lane := range t.expiring {
			if err := m.expire(ctx, t.Name, lane, t.Settings.Retention, &st); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if f.claims {
		cut := m.q.nowMs() - ttl
		if err := m.q.db.Transact(ctx, func(tx kv.Tx) error {
			// Looked at again: another monitor may have cleared them since.
			r := rangeUpTo(m.q.k.claims(), cut)
			if some, err := anyIn(tx.Snapshot(), r); err != nil || !some {
				return err
			}
			tx.ClearRange(r)
			return nil
		}); err != nil {
			errs = append(errs, err)
		}
	}
	// Clearing stamps is housekeeping: one that fails is tried again at
	// the next sweep, and slows no recycling down.
	for _, t := range f.types {
		if t.err == nil && t.stamps {
			if err := m.dropStamps(ctx, t.Name); err != nil && ctx.Err() == nil {
				m.opts.Logger.Warn("fdbq: activity monitor could not clear stamps", "type", t.Name, "err", err)
			}
		}
		if t.err == nil && t.oldEvents {
			if err := m.q.trimEvents(ctx, t.Name, m.q.eventRetention); err != nil && ctx.Err() == nil {
				m.opts.Logger.Warn("fdbq: activity monitor could not trim the event log", "type", t.Name, "err", err)
			}
		}
		if t.err == nil && t.oldHistory {
			if err := m.q.trimHistory(ctx, t.Name); err != nil && ctx.Err() == nil {
				m.opts.Logger.Warn("fdbq: activity monitor could not trim the history", "type", t.Name, "err", err)
			}
		}
		if t.err == nil && t.staleInterest {
			if err := m.q.clearStaleInterest(ctx, t.Name); err != nil && ctx.Err() == nil {
				m.opts.Logger.Warn("fdbq: activity monitor could not clear interest entries", "type", t.Name, "err", err)
			}
		}
	}
	return st, errors.Join(errs...)
}

// survey reads in tx what a sweep has to work on for type t (see Sweep),
// now being the queue's clock in ms.
func (m *Monitor) survey(tx kv.ReadTx, t *sweepType, now int64) error {
	k := m.q.k
	var err error
	if t.legacy, err = anyIn(tx, k.legacyActiveType(t.Name).Range()); err != nil {
		return err
	}
	if t.groups, t.bad, err = m.activeGroups(tx, t.Name); err != nil {
		return err
	}
	if t.stamps, err = anyIn(tx, k.stampType(t.Name).Range()); err != nil {
		return err
	}
	if r := t.Settings.Retention; r > 0 {
		for lane := range activityLanes {
			some, err := anyIn(tx, rangeUpTo(k.finishedLane(t.Name, lane), now-r.Milliseconds()))
			if err != nil {
				return err
			}
			if some {
				t.expiring = append(t.expiring, lane)
			}
		}
	}
	at, ok, err := m.q.firstEventAt(tx, t.Name)
	if err != nil {
		return err
	}
	t.oldEvents = ok && at < now-m.q.eventRetention.Milliseconds()
	if t.oldHistory, err = m.q.oldHistory(tx, t.Name, now); err != nil {
		return err
	}
	stale, _, wrong, err := m.q.staleInterest(tx, t.Name, now)
	t.staleInterest = len(stale) > 0 || wrong
	return err
}

// anyIn reports whether r holds a key.
func anyIn(tx kv.ReadTx, r kv.Range) (bool, error) {
	kvs, err := tx.GetRange(r, kv.RangeOptions{Limit: 1})
	return len(kvs) > 0, err
}

// typeError is a sweep's error about one type's key or settings: what the
// store holds causes it, not a failure of the store, so the monitor does
// not slow down for it.
type typeError struct{ err error }

func (e *typeError) Error() string { return e.err.Error() }
func (e *typeError) Unwrap() error { return e.err }

// onlyTypeErrors reports whether every error err joins is a typeError.
func onlyTypeErrors(err error) bool {
	var te *typeError
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !errors.As(e, &te) {
				return false
			}
		}
		return true
	}
	return errors.As(err, &te)
}

// sweepType is a registered type as a sweep reads it: its settings, or
// why they cannot be read.
type sweepType struct {
	TypeDef
	err error
	// What Sweep's first transaction found (see survey):
	// legacy: running jobs of an earlier version to move (see migrate);
	// groups and bad: the timeout groups of its activity index and the
	// keys in it that belong to none (see activeGroups); stamps: any
	// renewal stamp.
	// expiring: the lanes of the finished index with a job past the
	// retention; staleInterest: an interest entry its holder stopped
	// renewing.
	// oldEvents: its event log has events past the retention;
	// oldHistory: its history has minutes past the retention.
	legacy, stamps, staleInterest, oldEvents, oldHistory bool
	expiring                                             []int
	groups                                               []group
	bad                                                  [][]byte
}

// types reads the registered types and their settings, as registry does
// (not the per-state counts Types adds), but a type whose key or settings
// do not decode comes with its error instead of failing the whole read,
// so that it keeps the monitor from no other type.
func (m *Monitor) types(tx kv.ReadTx) ([]sweepType, error) {
	sub := m.q.k.types()
	kvs, err := tx.GetRange(sub.Range(), kv.RangeOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]sweepType, 0, len(kvs))
	for _, e := range kvs {
		t, err := sub.Unpack(e.Key)
		name, ok := "", false
		if err == nil && len(t) == 1 {
			name, ok = t[0].(string)
		}
		if !ok {
			out = append(out, sweepType{err: fmt.Errorf("fdbq: malformed type key %q", e.Key)})
			continue
		}
		s, err := decodeSettings(e.Value, name)
		out = append(out, sweepType{TypeDef: TypeDef{Name: name, Settings: s}, err: err})
	}
	return out, nil
}

// startSweep numbers a new sweep and forgets the skipped entries that the
// previous one did not skip (fixed, removed or done since).
func (m *Monitor) startSweep() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweeps++
	for k, n := range m.skipped {
		if n+1 < m.sweeps {
			delete(m.skipped, k)
		}
	}
}

// skip logs a job a sweep could not change, unless the previous sweep
// skipped it too and logged it then (or before).
func (m *Monitor) skip(typ string, key []byte, err error) {
	m.mu.Lock()
	_, known := m.skipped[string(key)]
	m.skipped[string(key)] = m.sweeps
	m.mu.Unlock()
	if !known {
		m.opts.Logger.Warn("fdbq: activity monitor cannot change a job and leaves it as it is; it tries again every sweep",
			"type", typ, "err", err)
	}
}

// batchSize and adapt implement the AIMD batch size.
func (m *Monitor) batchSize() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.batch
}

func (m *Monitor) adapt(ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ok {
		m.batch = min(m.batch+100, 10_000)
	} else {
		m.batch = max(m.batch*3/4, 1)
	}
}

// shrinkForRetry counts a failed attempt of a sweep transaction and
// returns the smaller batch to retry it with. The store's retry loop
// retries transaction_too_old itself, so without this a batch too big to
// finish in time would fail the same way on every retry.
func (m *Monitor) shrinkForRetry() int {
	m.adapt(false)
	return m.batchSize()
}

// recycle makes running jobs stale by the monitor's samples (see Monitor)
// pending again (counting the attempt), or failed when out of attempts.
//
// It goes through the type's activity index a timeout group at a time. In
// a group of timeout d, the range read goes up to the version of the
// latest sample d old: an entry after it was renewed by a transaction that
// read later, so committed later; of the entries before, a job is taken
// back if its renewal committed at that sample's version or before.
// groups and bad are the type's groups and the keys that belong to none,
// as activeGroups read them in the sweep's first transaction.
func (m *Monitor) recycle(ctx context.Context, typ string, s TypeSettings, groups []group, bad [][]byte, st *SweepStats) error {
	q := m.q
	for _, key := range bad {
		m.skip(typ, key, fmt.Errorf("fdbq: malformed index entry %q", key))
	}
	st.add(typ, 0, 0, 0, len(bad))
	act := func(tx kv.Tx, id string, rec *record) (string, error) {
		next := *rec
		// Cut to the room the job's data leaves, so that a job at the
		// size limit can be taken back too.
		next.failAttempt("activity timeout: no heartbeat for "+(time.Duration(rec.activityTimeoutMs())*time.Millisecond).String(), q.nowMs())
		next.LastLock = rec.Lock + ":recycle"
		q.retryOrFail(&next, s)
		next.attemptEnd, next.attemptEndAt = histRecycled, q.nowMs()
		if err := q.put(tx, typ, id, rec, &next); err != nil {
			return "", err
		}
		return string(next.State), nil
	}
	var errs []error
	for _, g := range groups {
		timeout := time.Duration(g.timeoutMs) * time.Millisecond
		m.timeoutSeen(timeout)
		sub := q.k.activeGroup(typ, g)
		plan := func() (sweepPlan, bool) {
			// Read before the batch's transaction obtains its read
			// version: at least this much time has passed when it reads.
			now := m.clock()
			sm, ok := m.sampleBefore(now.Add(-timeout))
			if !ok {
				return sweepPlan{}, false
			}
			return sweepPlan{
				end: rangeUpTo(sub, sm.rv-1).End,
				match: func(tx kv.Tx, e kv.KeyValue, id string, at int64, rec *record) (bool, error) {
					if rec.legacy || rec.ActiveVersion != at || rec.activityTimeoutMs() != g.timeoutMs {
						return false, nil
					}
					key, ok := q.k.stampOf(typ, at, e.Value)
					if !ok {
						return false, fmt.Errorf("fdbq: malformed activity entry of %s/%s: value %q", typ, id, e.Value)
					}
					b, err := tx.Get(key)
					if err != nil {
						return false, err
					}
					vs, ok := parseActivity(b)
					if !ok {
						return false, fmt.Errorf("fdbq: malformed activity stamp of %s/%s at %d: %q", typ, id, at, b)
					}
					return vs.CommitVersion() <= sm.rv, nil
				},
			}, true
		}
		counts, err := m.sweepIndex(ctx, typ, sub, Running, plan, act)
		st.add(typ, counts[string(Pending)]+counts[string(Finished)], counts[string(Finished)], 0, counts[skippedJob])
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// migrate moves the activity entries of jobs that started running under an
// earlier version of fdbq, keyed by a deadline of the worker's clock, to
// the version-keyed index, as if the job had heartbeated now: such a job
// is taken back an activity timeout after its first sweep by this
// version, unless it heartbeats.
func (m *Monitor) migrate(ctx context.Context, typ string, st *SweepStats) error {
	q := m.q
	sub := q.k.legacyActiveType(typ)
	plan := func() (sweepPlan, bool) {
		return sweepPlan{
			end: sub.Range().End,
			match: func(_ kv.Tx, _ kv.KeyValue, _ string, at int64, rec *record) (bool, error) {
				return rec.legacy && rec.ExpiresAt == at, nil
			},
		}, true
	}
	counts, err := m.sweepIndex(ctx, typ, sub, Running, plan,
		func(tx kv.Tx, id string, rec *record) (string, error) {
			next := *rec
			next.renew = true
			return "moved", q.put(tx, typ, id, rec, &next)
		})
	st.add(typ, 0, 0, 0, counts[skippedJob])
	return err
}

// expire removes the finished jobs of a lane older than the retention.
func (m *Monitor) expire(ctx context.Context, typ string, lane int, retention time.Duration, st *SweepStats) error {
	q := m.q
	sub := q.k.finishedLane(typ, lane)
	plan := func() (sweepPlan, bool) {
		return sweepPlan{
			end: rangeUpTo(sub, q.nowMs()-retention.Milliseconds()).End,
			match: func(_ kv.Tx, _ kv.KeyValue, _ string, at int64, rec *record) (bool, error) {
				return rec.FinishedAt == at, nil
			},
		}, true
	}
	counts, err := m.sweepIndex(ctx, typ, sub, Finished, plan,
		func(tx kv.Tx, id string, rec *record) (string, error) {
			return "removed", q.drop(tx, typ, id, rec)
		})
	st.add(typ, 0, 0, counts["removed"], counts[skippedJob])
	return err
}

// skippedJob is what sweepIndex names a job it could not change.
const skippedJob = "skipped"

// sweepPlan is what one batch of sweepIndex works through: the entries
// before end, and of those the ones whose job (in the state, and read in
// the batch's transaction) match says is due; an error from match skips
// the entry as one the sweep cannot read.
type sweepPlan struct {
	end   []byte
	match func(tx kv.Tx, e kv.KeyValue, id string, at int64, rec *record) (bool, error)
}

// sweepIndex works through the entries (time or version, id) of one of a
// type's ordered indexes, as plan says for each batch (false: nothing to
// do now), in batches of the AIMD size, one transaction each. For every
// entry whose job is still in state and due, act changes the job and names
// what it did; sweepIndex returns how often each name came up in batches
// that committed.
//
// Entries are read without conflicts; each one acted on gets a read
// conflict, so monitors in several processes conflict only on the jobs
// both took, and the retry finds them done.
//
// A job that cannot be changed, because its entry or record does not
// decode or act fails for it, is skipped (named skippedJob, and logged)
// and the batch goes on without it: act must therefore fail before it
// writes anything, as put does (it encodes the record first). Each batch
// starts after the last entry of the one before, since skipped entries
// stay in the index: a sweep reads each entry once, and a batch of
// entries it cannot act on does not make it read them again and again.
func (m *Monitor) sweepIndex(ctx context.Context, typ string, sub tuple.Subspace, state State,
	plan func() (sweepPlan, bool), act func(tx kv.Tx, id string, rec *record) (string, error)) (map[string]int, error) {
	q := m.q
	total := map[string]int{}
	begin := sub.Range().Begin
	for {
		p, ok := plan()
		if !ok {
			return total, nil
		}
		r := kv.Range{Begin: begin, End: p.end}
		if r.Empty() {
			return total, nil // the bound went back past where this sweep got to
		}
		n := m.batchSize()
		more := false
		attempts := 0
		var counts map[string]int
		var last []byte
		var skipped []skippedEntry
		err := q.db.Transact(ctx, func(tx kv.Tx) error {
			if attempts++; attempts > 1 {
				n = m.shrinkForRetry()
			}
			counts = map[string]int{}
			skipped = skipped[:0]
			kvs, err := tx.Snapshot().GetRange(r, kv.RangeOptions{Limit: n})
			if err != nil {
				return err
			}
			more = len(kvs) == n
			if len(kvs) > 0 {
				last = kvs[len(kvs)-1].Key
			}
			for _, e := range kvs {
				id, rec, problem, err := m.sweepDue(tx, typ, sub, state, p, e)
				if err != nil {
					return err
				}
				if problem != nil {
					skipped = append(skipped, skippedEntry{e.Key, problem})
					continue
				}
				if rec == nil {
					continue
				}
				what, err := act(tx, id, rec)
				if err != nil {
					if !jobProblem(err) {
						return err
					}
					skipped = append(skipped, skippedEntry{e.Key, fmt.Errorf("fdbq: job %s/%s: %w", typ, id, err)})
					continue
				}
				counts[what]++
			}
			return nil
		})
		m.adapt(err == nil)
		if err != nil {
			if n > 1 && errors.Is(err, kv.ErrTransactionTooLarge) {
				continue // a smaller batch next time round
			}
			return total, err
		}
		for k, v := range counts {
			total[k] += v
		}
		for _, e := range skipped {
			m.skip(typ, e.key, e.err)
		}
		total[skippedJob] += len(skipped)
		if !more {
			return total, nil
		}
		begin = kv.KeyAfter(last)
	}
}

// sweepDue reads, in a sweep batch's transaction, the job that index entry
// e of sub names, and returns its id and record when the job is in state
// and plan p says it is due; a nil record when it is not (the job is gone,
// in another state, or not due). A problem is why the entry is to be
// skipped, as one the sweep cannot read: its key is not one fdbq writes,
// its record does not decode, or p.match failed for it with an error of
// the job's own. err is the store's, which ends the batch.
//
// Every entry whose key parses gets a read conflict, and its record is
// read with one, whether the sweep then acts on the job or not.
func (m *Monitor) sweepDue(tx kv.Tx, typ string, sub tuple.Subspace, state State, p sweepPlan, e kv.KeyValue) (id string, rec *record, problem, err error) {
	at, id, ok := parseIndexEntry(sub, e.Key)
	if !ok {
		return "", nil, fmt.Errorf("fdbq: malformed index entry %q", e.Key), nil
	}
	tx.AddReadConflictKey(e.Key)
	b, err := tx.Get(m.q.k.job(typ, id))
	if err != nil {
		return "", nil, nil, err
	}
	if b == nil {
		return "", nil, nil, nil
	}
	rec, err = decodeRecord(b, typ, id)
	if err != nil {
		return "", nil, err, nil
	}
	if rec.State != state {
		return "", nil, nil, nil
	}
	due, err := p.match(tx, e, id, at, rec)
	if err != nil {
		if !jobProblem(err) {
			return "", nil, nil, err
		}
		return "", nil, err, nil
	}
	if !due {
		return "", nil, nil, nil
	}
	return id, rec, nil, nil
}

// skippedEntry is an index entry whose job a sweep could not change, and
// why.
type skippedEntry struct {
	key []byte
	err error
}

// parseIndexEntry reads the time and id of an entry of sub, a
// time-ordered index, or reports false when the key is not one fdbq
// writes.
func parseIndexEntry(sub tuple.Subspace, key []byte) (at int64, id string, ok bool) {
	t, err := sub.Unpack(key)
	if err != nil || len(t) != 2 {
		return 0, "", false
	}
	at, ok1 := t[0].(int64)
	id, ok2 := t[1].(string)
	return at, id, ok1 && ok2
}

// jobProblem reports whether err, from changing one job in a sweep, is
// that job's own problem (say, a record too large to store) rather than
// the store's or the transaction's, which must end the batch.
func jobProblem(err error) bool {
	var ke *kv.Error
	return !errors.As(err, &ke) && !errors.Is(err, kv.ErrClosed) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
