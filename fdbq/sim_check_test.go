package fdbq_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// The rules the simulation checks, each over the history and the commit
// log (sim_history_test.go):
//
//   - acked-add: every add a call acknowledged is followed, in commit
//     order, by the job's finish (succeeded, failed or canceled) or its
//     removal (by Remove or by retention).
//   - transitions: every change of a job record is one the call that
//     made it may make (doc.go's state diagram): only Add creates a job
//     and only Accept starts one, under a lock no run of the job had; a
//     running job changes under its lock only by that lease's own calls,
//     by Add (flagged), Cancel, Remove or the monitor; no job finishes
//     twice without an add or requeue in between.
//   - answers: a call that answered an error (ErrHalt, ErrWrongState,
//     ErrNotFound or any other) committed nothing; a call that
//     succeeded committed at most once, and exactly once where its
//     success means a change; an accept's leases are the jobs it
//     started; a sweep's counts are what it committed.
//   - one-lease: a lease call answers ErrHalt only after its lease lost
//     the job, and never succeeds once it has; with the transitions rule,
//     at most one lease does work on a job, and a recycled one gets ErrHalt.
//   - stuck: a running job whose lease shows no activity is taken back
//     within its activity timeout plus the monitor's period (simStuckBound)
//     while any process stays up that long.
//   - clock: the monitor recycles a job only an activity timeout after its
//     last accept or heartbeat, by simulated time: by the wall clocks'
//     bound on their skew with the current monitor, by the monitor's own
//     clock's rate once it measures timeouts on MonitorOptions.Clock
//     (simClockRule).
//   - effects: a worker's own write in the transaction of its Finish
//     commits with the finish and only with it, as often as the log says.
//   - spin: no call makes more transactions than its work and the
//     store's failures call for, and none runs past simCallTimeout.
//   - counters: at every scan (every checkEvery steps and at the end) the
//     per-state counters equal the records counted by state and the index
//     entries counted by index, every index entry names a record in its
//     state at its time, and the commit log's copy of the records equals
//     the store's.

type simViolation struct {
	rule string
	job  simJobRef
	at   *simEntry // where in the history it shows; nil: at the end
	msg  string
}

func (s *sim) violate(rule string, job simJobRef, at *simEntry, format string, args ...any) {
	s.violations = append(s.violations, &simViolation{rule: rule, job: job, at: at, msg: fmt.Sprintf(format, args...)})
}

// simStats is what runs did.
type simStats struct {
	seeds, steps, calls, commits, ackedAdds, jobs, finished int
	recycled, earlyRecycles, earlyLive, crashes, jumps      int
	faults                                                  int64
	simTime, realTime                                       time.Duration
}

func (a *simStats) add(b simStats) {
	a.seeds += b.seeds
	a.steps += b.steps
	a.calls += b.calls
	a.commits += b.commits
	a.ackedAdds += b.ackedAdds
	a.jobs += b.jobs
	a.finished += b.finished
	a.recycled += b.recycled
	a.earlyRecycles += b.earlyRecycles
	a.earlyLive += b.earlyLive
	a.crashes += b.crashes
	a.jumps += b.jumps
	a.faults += b.faults
	a.simTime += b.simTime
	a.realTime += b.realTime
}

func (a simStats) text() string {
	return fmt.Sprintf("%d seeds, %d steps, %d calls, %d commits, %d acknowledged adds of %d jobs, %d finishes, %d recycled (%d before an activity timeout of the monitor's clock, %d of them live), %d crashes, %d clock jumps, %d faults injected, %v simulated in %v",
		a.seeds, a.steps, a.calls, a.commits, a.ackedAdds, a.jobs, a.finished, a.recycled, a.earlyRecycles, a.earlyLive, a.crashes, a.jumps, a.faults,
		a.simTime.Round(time.Second), a.realTime.Round(time.Millisecond))
}

type simResult struct {
	seed       uint64
	sim        *sim
	stats      simStats
	violations []*simViolation
	// early is the first recycle the clock rule of the new monitor
	// refuses, when it is not enforced.
	early *simViolation
}

func (r *simResult) summary() string { return r.stats.text() }

// runSim runs one seed and checks it.
func runSim(t testing.TB, seed uint64, cfg simConfig) *simResult {
	t.Helper()
	start := time.Now()
	s, err := newSim(seed, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	s.run()
	r := &simResult{seed: seed, sim: s}
	r.early = s.check()
	r.violations = s.violations
	r.stats = s.stats()
	r.stats.realTime = time.Since(start)
	return r
}

func (s *sim) stats() simStats {
	st := simStats{seeds: 1, steps: s.steps, commits: len(s.hist.log), simTime: s.now}
	for _, e := range s.hist.entries {
		switch {
		case e.op == "crash":
			st.crashes++
		case e.op == "clock":
			st.jumps++
		case e.class != "":
			st.calls++
			if (e.op == "add" || e.op == "addbatch") && e.class == "ok" {
				st.ackedAdds += len(e.jobs)
			}
		}
	}
	st.faults = s.faults
	for _, p := range s.procs {
		st.faults += p.faulty.Counts().Injected()
	}
	for _, c := range s.hist.log {
		for _, w := range c.writes {
			switch {
			case w.settings != nil || w.next == nil:
			case w.next.State == fdbq.Pending && (w.prev == nil || w.prev.State == fdbq.Finished):
				st.jobs++
			case w.next.State == fdbq.Finished && w.prev != nil && w.prev.State != fdbq.Finished:
				st.finished++
			}
			if w.prev != nil && w.next != nil && w.prev.State == fdbq.Running && w.next.LastLock == w.prev.Lock+":recycle" {
				st.recycled++
			}
		}
	}
	st.earlyRecycles, st.earlyLive = s.early, s.earlyLive
	return st
}

// report fails t with the first violation and the history that shows
// it, and lists the others.
func (r *simResult) report(t testing.TB) {
	t.Helper()
	if r.early != nil {
		t.Logf("seed %d: %s (not enforced: the monitor compares wall-clock deadlines; JOBSTAGE_SIM_STRICT_CLOCKS=1 enforces it)", r.seed, r.early.msg)
	}
	if len(r.violations) == 0 {
		return
	}
	// The other rules first, then the clock rule's live leases: the most
	// telling failure is the one shown.
	rank := func(v *simViolation) int {
		switch {
		case v.rule != "clock":
			return 0
		case strings.Contains(v.msg, "live lease"):
			return 1
		}
		return 2
	}
	slices.SortStableFunc(r.violations, func(a, b *simViolation) int { return rank(a) - rank(b) })
	v := r.violations[0]
	upTo := len(r.sim.hist.entries)
	if v.at != nil {
		upTo = v.at.n
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d breaks rule %q", r.seed, v.rule)
	if v.job.typ != "" {
		fmt.Fprintf(&b, " on job %s", v.job)
	}
	if v.at != nil {
		fmt.Fprintf(&b, " at #%d", v.at.n)
	}
	fmt.Fprintf(&b, ": %s\n", v.msg)
	if v.job.id != "" {
		b.WriteString(r.sim.hist.jobHistory(v.job, upTo, 50, simEpoch))
	} else if v.at != nil {
		b.WriteString("  " + v.at.line(r.sim.hist) + "\n")
	}
	if n := len(r.violations) - 1; n > 0 {
		fmt.Fprintf(&b, "and %d more:\n", n)
		for _, o := range r.violations[1:min(len(r.violations), 11)] {
			fmt.Fprintf(&b, "  %s %s: %s\n", o.rule, o.job, o.msg)
		}
	}
	strict := ""
	if r.sim.cfg.strictClocks && !r.sim.cfg.newMonitor {
		strict = "JOBSTAGE_SIM_STRICT_CLOCKS=1 "
	}
	test, _, _ := strings.Cut(t.Name(), "/")
	fmt.Fprintf(&b, "replay: JOBSTAGE_SEED=%d %sgo test -race ./fdbq -run '^%s$' -v", r.seed, strict, test)
	t.Error(b.String())
}

// historyText is the whole history, for comparing two runs.
func (r *simResult) historyText() string {
	var b strings.Builder
	h := r.sim.hist
	for _, e := range h.entries {
		b.WriteString(e.line(h) + "\n")
		for _, c := range e.commits {
			for _, w := range h.log[c].writes {
				b.WriteString(h.log[c].line(h, w, simEpoch) + "\n")
			}
		}
	}
	return b.String()
}

// --- the bounds ---

// simStuckBound is how long after a running job's last activity the
// monitors must have taken it back, while a process stays up. The
// monitor's new clock rule: a sweep after the activity (within a sweep
// period and a sweep's duration), then an activity timeout of its clock
// (at its slowest rate), then the next sweep. The current monitor
// compares the deadline a wall clock wrote with another's: up to twice
// the skew later, then the next sweep.
func (s *sim) simStuckBound() time.Duration {
	const sweepTakes = time.Second
	if s.cfg.newMonitor {
		return time.Duration(float64(simMaxTimeout)/(1-s.cfg.rateSkew)) + simSampleSpacing + 2*simSweepMax + 2*sweepTakes
	}
	return simMaxTimeout + 2*s.cfg.skew + simSweepMax + 2*sweepTakes
}

// simSampleSpacing is how far apart a monitor keeps the notes of its
// transactions (a quarter of its Interval, the default 1 s here): a note
// closer to the one before is merged into the next, so the note of a
// monitor's first sweep after an activity may count from up to this much
// later.
const simSampleSpacing = time.Second / 4

// dueSweep is the first sweep that had to take back a job that stopped
// showing activity, if one came. The current monitor: the first that
// began when even the slowest wall clock was past the deadline the
// fastest could have written (the activity timeout plus twice the skew
// after the last accept or heartbeat). The monitor of the new clock
// rule: the first of a monitor (one process, one start) that began an
// activity timeout of its clock, at its slowest rate, and the spacing of
// its notes after the end of an earlier sweep of its own that began after
// the last accept or heartbeat. Only sweeps that succeeded count.
func (s *sim) dueSweep(ep *simEpisode) *simEntry {
	d := s.maxTimeout(ep.job.typ, ep.activity-time.Second, s.now)
	seen := map[[2]int]time.Duration{} // monitor → end of its first sweep after the change
	for _, e := range s.hist.entries {
		if e.op != "sweep" || e.class != "ok" || e.at < ep.activity {
			continue
		}
		if !s.cfg.newMonitor {
			if e.at >= ep.activity+d+2*s.cfg.skew+5*time.Millisecond {
				return e
			}
			continue
		}
		m := [2]int{e.proc, e.gen}
		if first, ok := seen[m]; !ok {
			seen[m] = e.end
		} else if e.at >= first+time.Duration(float64(d)/(1-s.cfg.rateSkew))+simSampleSpacing {
			return e
		}
	}
	return nil
}

// simClockRule is the least simulated time from a job's last activity
// to its recycling, for an activity timeout d: the new rule (the
// monitor saw the activity, then its own clock advanced d) gives d at
// the clock's fastest rate; the current one, d less twice the wall
// clocks' skew. Both less what a transaction can take between reading
// the clock and committing (a delayed commit, the calls run meanwhile).
func (s *sim) simClockRule(d time.Duration, strict bool) time.Duration {
	slack := 2*s.cfg.maxDelay + 50*time.Millisecond
	if strict {
		return time.Duration(float64(d)/(1+s.cfg.rateSkew)) - slack
	}
	return d - 2*s.cfg.skew - slack
}

// --- the checks ---

// simEpisode is one run of a job under one lock, from the accept that
// started it to the change that ended it.
type simEpisode struct {
	job      simJobRef
	lock     string
	start    int           // commit index of the accept
	activity time.Duration // its last accept or heartbeat
	end      int           // commit index that ended it; -1: still running
	endAt    time.Duration
	how      string // finish, fail, resubmit, recycle, cancel, remove
	holder   string // recycle: the live worker that held it, if any
}

// check runs every rule over the finished run. It returns the first
// recycle that the new monitor's clock rule refuses when that rule is
// not enforced.
func (s *sim) check() *simViolation {
	type epKey struct {
		job  simJobRef
		lock string
	}
	episodes := map[epKey]*simEpisode{}
	var order []*simEpisode
	ends := map[simJobRef][]int{} // commits that finished or removed a job
	var early *simViolation
	s.early, s.earlyLive = 0, 0
	s.checkWorkflows(s.draining && s.settled())

	held := func(e *simEntry, job simJobRef, lock string) bool {
		return slices.Contains(e.held, simHeld{job, lock})
	}
	bounds := newSimBounds()
	for _, c := range s.hist.log {
		e := c.entry
		bounds.commit(s, c)
		for _, w := range c.writes {
			if w.settings != nil {
				continue
			}
			if e == nil {
				s.violate("transitions", w.job, nil, "c%d: a job was written outside any call", c.n)
				continue
			}
			op, prev, next := e.op, w.prev, w.next
			bad := func(format string, args ...any) {
				s.violate("transitions", w.job, e, "c%d by %s: %s → %s: %s", c.n, op,
					s.hist.describeJob(prev, simEpoch), s.hist.describeJob(next, simEpoch), fmt.Sprintf(format, args...))
			}
			if next == nil || next.State == fdbq.Finished && (prev == nil || prev.State != fdbq.Finished) {
				ends[w.job] = append(ends[w.job], c.n)
			}
			switch {
			case prev == nil && next == nil:
				bad("a job removed that was not there")
			case prev == nil:
				_, _, wfJob := s.workflowJob(w.job)
				wfJob = wfJob && next.Workflow != ""
				if next.State != fdbq.Pending || op != "add" && op != "addbatch" && !(wfJob && workflowCreates(op)) {
					bad("only Add creates a job, pending (and a workflow's, the call that adds it or finishes its last dependency)")
				}
			case next == nil:
				if op != "remove" && !(op == "sweep" && prev.State == fdbq.Finished) {
					bad("only Remove, and retention for a finished job, remove a job")
				}
			case prev.State == fdbq.Running:
				ep := episodes[epKey{w.job, prev.Lock}]
				if ep == nil {
					bad("running under a lock no accept gave")
					continue
				}
				if next.State == fdbq.Running {
					switch {
					case next.Lock != prev.Lock:
						bad("the lock changed while the job ran")
					case op == "heartbeat" && held(e, w.job, prev.Lock):
						ep.activity = c.at
					case (op == "add" || op == "addbatch") && next.Resubmitted:
					default:
						bad("a running job changed by a call that may not change it under this lock")
					}
					continue
				}
				how := strings.TrimPrefix(next.LastLock, prev.Lock+":")
				ok := false
				switch how {
				case "finish", "fail":
					ok = op == how && held(e, w.job, prev.Lock)
				case "resubmit":
					ok = (op == "resubmit" || op == "release") && held(e, w.job, prev.Lock)
				case "recycle":
					ok = op == "sweep"
				case "cancel":
					ok = (op == "cancel" || op == "cancelworkflow") && next.State == fdbq.Finished && next.Outcome == fdbq.Canceled
				}
				if !ok || next.LastLock == how {
					bad("the job left its lease by a call that may not take it")
				}
				ep.end, ep.endAt, ep.how, ep.holder = c.n, c.at, how, w.holder
			case next.State == fdbq.Running:
				if prev.State != fdbq.Pending || op != "accept" {
					bad("only Accept starts a pending job")
					continue
				}
				k := epKey{w.job, next.Lock}
				if episodes[k] != nil {
					bad("started a second time under one lock")
					continue
				}
				ep := &simEpisode{job: w.job, lock: next.Lock, start: c.n, activity: c.at, end: -1}
				episodes[k] = ep
				order = append(order, ep)
			case prev.State == fdbq.Pending:
				switch {
				case next.State == fdbq.Pending && (op == "add" || op == "addbatch"):
				case next.State == fdbq.Finished && (op == "cancel" || op == "cancelworkflow") && next.Outcome == fdbq.Canceled:
				default:
					bad("a pending job changed by a call that may not change it")
				}
			case prev.State == fdbq.Finished:
				switch {
				case next.State == fdbq.Finished:
					bad("a finished job finished again")
				case op == "add" || op == "addbatch":
				case op == "requeue" && prev.Outcome != fdbq.Succeeded:
				default:
					bad("a finished job made pending by a call that may not")
				}
			}
		}
		// A removal ends the run of the job it removed.
		for _, w := range c.writes {
			if w.settings == nil && w.next == nil && w.prev != nil && w.prev.State == fdbq.Running {
				if ep := episodes[epKey{w.job, w.prev.Lock}]; ep != nil {
					ep.end, ep.endAt, ep.how = c.n, c.at, "remove"
				}
			}
		}
	}

	// effects: a worker's own write commits with its Finish, and only
	// with it.
	for _, c := range s.hist.log {
		var finished []simJobRef
		for _, w := range c.writes {
			if w.prev != nil && w.next != nil && w.prev.State == fdbq.Running && w.next.LastLock == w.prev.Lock+":finish" {
				finished = append(finished, w.job)
			}
		}
		own := c.entry != nil && c.entry.op == "finish" && strings.Contains(c.entry.args, "own write")
		if !own {
			finished = nil
		}
		if !slices.Equal(c.effects, finished) {
			job := simJobRef{}
			if len(c.effects) > 0 {
				job = c.effects[0]
			} else if len(finished) > 0 {
				job = finished[0]
			}
			s.violate("effects", job, c.entry, "c%d committed the worker's own writes for %v beside the finishes of %v", c.n, c.effects, finished)
		}
	}

	// The calls' answers.
	for _, e := range s.hist.entries {
		if e.class == "" {
			continue
		}
		s.checkCall(e, func(job simJobRef, lock string) *simEpisode { return episodes[epKey{job, lock}] })
	}

	// acked-add. An add made while the job ran under a lock flags it
	// to run again: that run's own finish or failure does not end it,
	// only what comes after (or a cancel, or a removal).
	for _, e := range s.hist.entries {
		if (e.op != "add" && e.op != "addbatch") || e.class != "ok" {
			continue
		}
		from := e.logAtLastBegin
		if len(e.commits) > 0 {
			from = e.commits[0] + 1
		}
		for _, job := range e.jobs {
			ran := ""
			if at := s.stateBefore(job, from); at != nil && at.State == fdbq.Running {
				ran = at.Lock
			}
			done := false
			for _, c := range ends[job] {
				if c < from {
					continue
				}
				w := s.writeOf(c, job)
				if ran != "" && w.next != nil && w.prev.State == fdbq.Running && w.prev.Lock == ran && w.next.Outcome != fdbq.Canceled {
					s.violate("acked-add", job, e, "the add flagged the running job to run again, but c%d finished that run (%s)", c, w.next.Outcome)
					continue
				}
				done = true
				break
			}
			if !done {
				s.violate("acked-add", job, e, "the add was acknowledged, but the job never finished nor was removed after it (it is %s at the end)",
					s.hist.describeJob(s.shadow[job], simEpoch))
			}
		}
	}
	for _, job := range s.shadowOrder {
		if r := s.shadow[job]; r != nil && r.State != fdbq.Finished {
			s.violate("stuck", job, nil, "still %s after the drain", s.hist.describeJob(r, simEpoch))
		}
	}

	// stuck and clock.
	bound := s.simStuckBound()
	for _, ep := range order {
		end := ep.endAt
		if ep.end < 0 {
			end = s.now
		}
		if sw := s.dueSweep(ep); sw != nil && (ep.end < 0 || ep.end >= sw.logAtEnd) {
			var at *simEntry
			if ep.end >= 0 {
				at = s.entryAt(ep.end)
			}
			s.violate("stuck", ep.job, at, "running under %s from its last accept or heartbeat at %.3fs until %.3fs, through #%d, a sweep by %s at %.3fs that had to take it back",
				s.hist.lockName(ep.lock), ep.activity.Seconds(), end.Seconds(), sw.n, sw.actor, sw.at.Seconds())
		} else if deadline, ok := s.upThrough(ep.activity, bound); ok && end > deadline {
			var at *simEntry
			if ep.end >= 0 {
				at = s.entryAt(ep.end)
			}
			s.violate("stuck", ep.job, at, "running under %s from its last accept or heartbeat at %.3fs until %.3fs, past the bound of %v (activity timeout, the monitor's period)",
				s.hist.lockName(ep.lock), ep.activity.Seconds(), end.Seconds(), bound)
		}
		if ep.how != "recycle" {
			continue
		}
		d := s.minTimeout(ep.job.typ, ep.activity, ep.endAt)
		took := ep.endAt - ep.activity
		if least := s.simClockRule(d, false); took < least {
			s.violate("clock", ep.job, s.hist.log[ep.end].entry, "recycled %v after its last activity, before %v (activity timeout %v less twice the wall clocks' skew)", took, least, d)
		}
		if least := s.simClockRule(d, true); took < least {
			whose := "a dead lease (its worker crashed or hung)"
			if ep.holder != "" {
				whose = "the live lease of " + ep.holder + ", heartbeating every " + simHeartbeat.String() + " of simulated time"
				s.earlyLive++
			}
			v := &simViolation{rule: "clock", job: ep.job, at: s.hist.log[ep.end].entry,
				msg: fmt.Sprintf("recycled %s, %s, %v after its last activity, before the monitor's clock can have run its activity timeout of %v", ep.job, whose, took, d)}
			s.early++
			switch {
			case s.cfg.strictClocks:
				s.violations = append(s.violations, v)
			case early == nil || ep.holder != "" && !strings.Contains(early.msg, "live lease"):
				early = v
			}
		}
	}
	return early
}

// checkCall checks the answer of one call against what it committed.
func (s *sim) checkCall(e *simEntry, episode func(simJobRef, string) *simEpisode) {
	job := simJobRef{}
	if len(e.jobs) > 0 {
		job = e.jobs[0]
	} else if f := strings.Fields(e.args); len(f) > 0 && slices.Contains(simTypes, f[0]) {
		job.typ = f[0]
	}
	applied := len(e.commits)
	switch e.class {
	case "spin":
		s.violate("spin", job, e, "the call did not return within %v", simCallTimeout)
	case "ok":
		must := map[string]bool{"heartbeat": true, "finish": true, "fail": true, "resubmit": true, "cancel": true,
			"remove": true, "requeue": true, "pause": true, "resume": true, "settype": true}[e.op]
		if e.op == "accept" && len(e.held) > 0 {
			must = true
		}
		switch {
		case e.op == "sweep":
		case must && applied != 1:
			s.violate("answers", job, e, "succeeded, having committed %d times (exactly once is its promise)", applied)
		case applied > 1:
			s.violate("answers", job, e, "succeeded, having committed %d times", applied)
		case e.op == "accept" && len(e.held) == 0 && applied != 0:
			s.violate("answers", job, e, "accepted nothing but committed")
		}
	case "unknown":
		if e.op != "sweep" && applied > 1 {
			s.violate("answers", job, e, "committed %d times before its process died", applied)
		}
	default:
		if applied > 0 {
			s.violate("answers", job, e, "answered %s but committed %d times (an error means nothing committed)", e.class, applied)
		}
	}
	// spin: each transaction beyond the first is a retry of a failure,
	// or the check of a commit whose result was unknown.
	limit := 2 + 2*(e.failures+int(e.faults))
	switch e.op {
	case "sweep":
		limit += e.sweepBound
	case "accept":
		// Each look, a move of entries between the ready and scheduled
		// indexes, and a look again after it: at most 8 more looks.
		limit += 2 + 2*8
	}
	if e.attempts > limit {
		s.violate("spin", job, e, "%d transactions for %d failures of the store (at most %d)", e.attempts, e.failures+int(e.faults), limit)
	}
	switch e.op {
	case "accept":
		if e.class != "ok" {
			return
		}
		var started []simHeld
		for _, c := range e.commits {
			for _, w := range s.hist.log[c].writes {
				if w.next != nil && w.next.State == fdbq.Running && (w.prev == nil || w.prev.State != fdbq.Running) {
					started = append(started, simHeld{w.job, w.next.Lock})
				}
			}
		}
		got := slices.Clone(e.held)
		cmpHeld := func(a, b simHeld) int { return strings.Compare(a.job.String(), b.job.String()) }
		slices.SortFunc(started, cmpHeld)
		slices.SortFunc(got, cmpHeld)
		if !slices.Equal(started, got) {
			s.violate("answers", job, e, "returned leases on %v but started %v", heldText(s.hist, got), heldText(s.hist, started))
		}
	case "sweep":
		if e.class != "ok" || e.stats == nil {
			return
		}
		recycled, failed, expired := 0, 0, 0
		for _, c := range e.commits {
			for _, w := range s.hist.log[c].writes {
				switch {
				case w.settings != nil || w.prev == nil:
				case w.next == nil:
					expired++
				case w.prev.State == fdbq.Running && w.next.LastLock == w.prev.Lock+":recycle":
					recycled++
					if w.next.State == fdbq.Finished {
						failed++
					}
				}
			}
		}
		if recycled != e.stats.Recycled || failed != e.stats.Failed || expired != e.stats.Expired {
			s.violate("answers", job, e, "the sweep counted recycled %d failed %d expired %d, and committed %d, %d, %d",
				e.stats.Recycled, e.stats.Failed, e.stats.Expired, recycled, failed, expired)
		}
	case "heartbeat", "finish", "fail", "resubmit", "release":
		for _, h := range e.held {
			ep := episode(h.job, h.lock)
			if ep == nil {
				continue
			}
			lost := ep.end >= 0 && !slices.Contains(e.commits, ep.end)
			switch {
			case e.class == "halt" && (!lost || ep.end >= e.logAtEnd):
				s.violate("one-lease", h.job, e, "ErrHalt while lease %s still held the job", s.hist.lockName(h.lock))
			case e.class == "ok" && e.op != "release" && lost && ep.end < e.logAtBegin:
				s.violate("one-lease", h.job, e, "succeeded with lease %s, which had lost the job at c%d (%s)", s.hist.lockName(h.lock), ep.end, ep.how)
			}
		}
	}
}

func heldText(h *simHistory, hs []simHeld) string {
	var out []string
	for _, x := range hs {
		out = append(out, x.job.String()+"@"+h.lockName(x.lock))
	}
	return "[" + strings.Join(out, " ") + "]"
}

// upThrough returns the earliest time by which some process was up for
// d from at (or from its start after at), without a crash.
func (s *sim) upThrough(at, d time.Duration) (time.Duration, bool) {
	best, found := time.Duration(0), false
	for _, p := range s.procs {
		for _, iv := range p.ups {
			from, to := max(at, iv[0]), iv[1]
			if to < 0 {
				to = s.now
			}
			if from+d <= to && (!found || from+d < best) {
				best, found = from+d, true
			}
		}
	}
	return best, found
}

// minTimeout and maxTimeout are the least and the greatest activity
// timeout a type had from a to b (settings written at a count too: a
// transaction then may have read them or the ones before).
func (s *sim) minTimeout(typ string, a, b time.Duration) time.Duration {
	return s.timeoutIn(typ, a, b, func(x, y time.Duration) bool { return x < y })
}

func (s *sim) maxTimeout(typ string, a, b time.Duration) time.Duration {
	return s.timeoutIn(typ, a, b, func(x, y time.Duration) bool { return x > y })
}

func (s *sim) timeoutIn(typ string, a, b time.Duration, better func(x, y time.Duration) bool) time.Duration {
	h := s.typeHist[typ]
	d := time.Duration(0)
	for i, x := range h {
		inForce := x.at <= b && (i+1 == len(h) || h[i+1].at >= a)
		if inForce && (d == 0 || better(x.s.ActivityTimeout, d)) {
			d = x.s.ActivityTimeout
		}
	}
	return d
}

// writeOf is commit c's write of job.
func (s *sim) writeOf(c int, job simJobRef) simWrite {
	for _, w := range s.hist.log[c].writes {
		if w.job == job && w.settings == nil {
			return w
		}
	}
	panic(fmt.Sprintf("c%d did not write %s", c, job))
}

// stateBefore is a job's record after the commits before index from.
func (s *sim) stateBefore(job simJobRef, from int) *fdbq.StoredJob {
	for c := from - 1; c >= 0; c-- {
		for _, w := range s.hist.log[c].writes {
			if w.job == job && w.settings == nil {
				return w.next
			}
		}
	}
	return nil
}

// entryAt is the call that made commit c.
func (s *sim) entryAt(c int) *simEntry { return s.hist.log[c].entry }

// scan compares the store with the commit log's copy and checks its
// counters and indexes.
func (s *sim) scan() {
	jobs, problems, err := scanStore(context.Background(), s.plain, fdbq.DefaultPrefix)
	if err != nil {
		s.violate("counters", simJobRef{}, s.top(), "scan: %v", err)
		return
	}
	for _, p := range problems {
		s.violate("counters", p.job, s.lastEntry(), "%s", p.msg)
	}
	for _, job := range s.shadowOrder {
		if got, want := jobs[job], s.shadow[job]; !reflect.DeepEqual(got, want) {
			s.violate("counters", job, s.lastEntry(), "the store has %s, the commit log %s",
				s.hist.describeJob(got, simEpoch), s.hist.describeJob(want, simEpoch))
		}
	}
	if err := s.scanEffects(); err != nil {
		s.violate("effects", simJobRef{}, s.lastEntry(), "scan: %v", err)
	}
	for job := range jobs {
		if _, ok := s.shadow[job]; !ok {
			s.violate("counters", job, s.lastEntry(), "the store has a job the commit log never wrote")
		}
	}
}

// checkStampsCleared: with nothing running, one sweep leaves no stamp
// (they would pile up otherwise). It runs after the last scan: the sweep
// goes to the store directly, not through the commit log.
func (s *sim) checkStampsCleared() {
	ctx := context.Background()
	m := fdbq.NewMonitor(fdbq.New(s.plain, fdbq.Options{}), fdbq.MonitorOptions{Logger: quietLog})
	if _, err := m.Sweep(ctx); err != nil {
		s.violate("counters", simJobRef{}, nil, "the last sweep: %v", err)
		return
	}
	sub := tuple.FromBytes(fdbq.DefaultPrefix).Sub(13)
	kvs, err := kv.ReadTransact(ctx, s.plain, func(tx kv.ReadTx) ([]kv.KeyValue, error) {
		return tx.GetRange(sub.Range(), kv.RangeOptions{Limit: 10})
	})
	if err != nil {
		s.violate("counters", simJobRef{}, nil, "reading the stamps: %v", err)
		return
	}
	for _, e := range kvs {
		t, _ := sub.Unpack(e.Key)
		s.violate("counters", simJobRef{}, nil, "stamp %v left by a sweep with nothing running", t)
	}
}

// scanEffects compares the workers' own writes in the store with the
// commit log's.
func (s *sim) scanEffects() error {
	want := map[simJobRef]int64{}
	for _, c := range s.hist.log {
		for _, job := range c.effects {
			want[job]++
		}
	}
	sub := tuple.Sub("sim-effect")
	kvs, err := kv.ReadTransact(context.Background(), s.plain, func(tx kv.ReadTx) ([]kv.KeyValue, error) {
		return tx.GetRange(sub.Range(), kv.RangeOptions{})
	})
	if err != nil {
		return err
	}
	got := map[simJobRef]int64{}
	for _, e := range kvs {
		t, err := sub.Unpack(e.Key)
		if err != nil || len(t) != 2 {
			return fmt.Errorf("effect key %q", e.Key)
		}
		got[simJobRef{t[0].(string), t[1].(string)}] = kv.DecodeInt64(e.Value)
	}
	for _, job := range s.shadowOrder {
		if got[job] != want[job] {
			s.violate("effects", job, s.lastEntry(), "the store counts %d of the worker's own writes, the commit log %d", got[job], want[job])
		}
	}
	return nil
}

func (s *sim) lastEntry() *simEntry {
	if len(s.hist.entries) == 0 {
		return nil
	}
	return s.hist.entries[len(s.hist.entries)-1]
}

func (s *sim) setShadow(job simJobRef, j *fdbq.StoredJob) {
	if _, ok := s.shadow[job]; !ok {
		s.shadowOrder = append(s.shadowOrder, job)
	}
	s.shadow[job] = j
}

// storeProblem is what scanStore found wrong with one job.
type storeProblem struct {
	job simJobRef
	msg string
}

// scanStore reads every job of the queue under prefix in one transaction and checks that the per-state counters equal the records
// counted by state and the entries of each state's index, and that every
// index entry names a record in that state at the entry's time (a
// pending entry's copy of the record equal to it). It returns the
// records.
func scanStore(ctx context.Context, db *kv.DB, prefix []byte) (map[simJobRef]*fdbq.StoredJob, []storeProblem, error) {
	root := tuple.FromBytes(prefix)
	var problems []storeProblem
	bad := func(job simJobRef, format string, args ...any) {
		problems = append(problems, storeProblem{job, fmt.Sprintf(format, args...)})
	}
	jobs := map[simJobRef]*fdbq.StoredJob{}
	err := db.ReadTransact(ctx, func(tx kv.ReadTx) error {
		clear(jobs)
		problems = nil
		read := func(sub tuple.Subspace) ([]tuple.Tuple, [][]byte, error) {
			kvs, err := tx.GetRange(sub.Range(), kv.RangeOptions{})
			if err != nil {
				return nil, nil, err
			}
			var ts []tuple.Tuple
			var vs [][]byte
			for _, e := range kvs {
				t, err := sub.Unpack(e.Key)
				if err != nil {
					return nil, nil, fmt.Errorf("key %q: %w", e.Key, err)
				}
				ts, vs = append(ts, t), append(vs, e.Value)
			}
			return ts, vs, nil
		}
		recs, vals, err := read(root.Sub(1))
		if err != nil {
			return err
		}
		type typeState struct {
			typ   string
			state fdbq.State
		}
		byState := map[typeState]int64{}
		raw := map[simJobRef][]byte{}
		for i, t := range recs {
			job := simJobRef{t[0].(string), t[1].(string)}
			j, err := fdbq.DecodeStoredJob(vals[i], job.typ, job.id)
			if err != nil {
				bad(job, "record does not decode: %v", err)
				continue
			}
			jobs[job], raw[job] = j, vals[i]
			byState[typeState{job.typ, j.State}]++
		}
		indexed := map[simJobRef]int{}
		activeValue := map[simJobRef][]byte{}
		readyZones := map[simZone]bool{}
		for _, ix := range []struct {
			tag   int
			state fdbq.State
		}{{2, fdbq.Pending}, {11, fdbq.Pending}, {5, fdbq.Running}, {12, fdbq.Running}, {6, fdbq.Finished}} {
			ts, vs, err := read(root.Sub(ix.tag))
			if err != nil {
				return err
			}
			for i, t := range ts {
				job := simJobRef{t[0].(string), t[len(t)-1].(string)}
				indexed[job]++
				j := jobs[job]
				if j == nil {
					bad(job, "a %s index entry %v names no record", ix.state, t)
					continue
				}
				if j.State != ix.state {
					bad(job, "a %s index entry for a %s record", ix.state, j.State)
					continue
				}
				var at, want int64
				switch ix.state {
				case fdbq.Pending:
					// The ready index: (type, key, shard, -priority,
					// sched, id); the scheduled one: (type, sched,
					// -priority, key, shard, id).
					var prio, sched int64
					var key string
					if ix.tag == 11 {
						sched, prio, key = t[1].(int64), t[2].(int64), t[3].(string)
					} else {
						key, prio, sched = t[1].(string), t[3].(int64), t[4].(int64)
						readyZones[simZone{job.typ, key, t[2].(int64)}] = true
					}
					if key != j.Key {
						bad(job, "pending entry in a zone of key %q, record of key %q", key, j.Key)
					}
					if -prio != int64(j.Priority) {
						bad(job, "pending entry at priority %d, record at %d", -prio, j.Priority)
					}
					at, want = sched, j.ScheduledAt.UnixMilli()
					if len(vs[i]) > 0 && string(vs[i]) != string(raw[job]) {
						bad(job, "the pending entry's copy of the record differs from the record")
					}
				case fdbq.Running:
					if ix.tag == 5 {
						bad(job, "a running entry keyed by deadline, of earlier versions")
						continue
					}
					// (type, lane, timeout, read version, id)
					if t[2].(int64) != j.ActiveTimeoutMs {
						bad(job, "running entry of timeout %d ms, record of %d", t[2].(int64), j.ActiveTimeoutMs)
					}
					if lane := fdbq.LaneOf(job.id); t[1].(int64) != int64(lane) {
						bad(job, "running entry in lane %d, the id's is %d", t[1].(int64), lane)
					}
					at, want = t[3].(int64), j.ActiveVersion
					activeValue[job] = vs[i]
				case fdbq.Finished:
					// (type, lane, finished, id)
					if lane := fdbq.LaneOf(job.id); len(t) != 4 || t[1].(int64) != int64(lane) {
						bad(job, "finished entry %v not in the id's lane %d", t, lane)
						continue
					}
					at, want = t[2].(int64), j.FinishedAt.UnixMilli()
				}
				if at != want {
					bad(job, "%s entry at %d, record at %d", ix.state, at, want)
				}
			}
		}
		for job := range jobs {
			if indexed[job] != 1 {
				bad(job, "a record with %d index entries", indexed[job])
			}
		}
		// The stamp a running job's activity entry names (by its read
		// version and the token in its value): its renewal's commit,
		// which came after that read version. Stamps no entry names any
		// more may stay until a sweep.
		stamps, svs, err := read(root.Sub(13))
		if err != nil {
			return err
		}
		type stampKey struct {
			typ       string
			rv, token int64
		}
		stampAt := map[stampKey]int64{}
		for i, t := range stamps {
			// (type, lane, read version, token), the lane the token's.
			typ, _ := t[0].(string)
			var lane, rv, token int64
			ok := len(t) == 4
			if ok {
				lane, ok = t[1].(int64)
			}
			if ok {
				rv, ok = t[2].(int64)
			}
			if ok {
				token, ok = t[3].(int64)
			}
			ok = ok && lane == token%16
			switch {
			case !ok:
				bad(simJobRef{typ: typ}, "a stamp keyed %v", t)
			case len(svs[i]) != 10:
				bad(simJobRef{typ: typ}, "a stamp of %d bytes at read version %d", len(svs[i]), rv)
			default:
				stampAt[stampKey{typ, rv, token}] = kv.Versionstamp(svs[i]).CommitVersion()
			}
		}
		for job, j := range jobs {
			if j.State != fdbq.Running {
				continue
			}
			v := activeValue[job]
			if len(v) != 8 {
				bad(job, "a running job's activity entry holds %q, no stamp token", v)
				continue
			}
			token := int64(binary.BigEndian.Uint64(v))
			cv, ok := stampAt[stampKey{job.typ, j.ActiveVersion, token}]
			switch {
			case !ok:
				bad(job, "a running job whose renewal (read version %d, token %d) has no stamp", j.ActiveVersion, token)
			case cv <= j.ActiveVersion:
				bad(job, "renewal stamped at %d, not after its read version %d", cv, j.ActiveVersion)
			}
		}
		if err := checkZones(read, root, jobs, readyZones, bad); err != nil {
			return err
		}
		counts, vs, err := read(root.Sub(7))
		if err != nil {
			return err
		}
		// A count is the sum of its shards (type, state, shard) and of the
		// unsharded key (type, state) of stores written before shards.
		counted := map[typeState]bool{}
		sums := map[typeState]int64{}
		for i, t := range counts {
			k := typeState{t[0].(string), fdbq.State(t[1].(string))}
			if len(t) == 3 {
				if sh, ok := t[2].(int64); !ok || sh < 0 || sh >= 16 {
					bad(simJobRef{typ: k.typ}, "a %s counter keyed %v", k.state, t)
				}
			}
			counted[k] = true
			sums[k] += kv.DecodeInt64(vs[i])
		}
		for k, n := range sums {
			if n != byState[k] {
				bad(simJobRef{typ: k.typ}, "the %s counter says %d, the records %d", k.state, n, byState[k])
			}
		}
		for k, n := range byState {
			if !counted[k] && n != 0 {
				bad(simJobRef{typ: k.typ}, "no %s counter, %d records", k.state, n)
			}
		}
		return nil
	})
	sort.Slice(problems, func(i, j int) bool {
		return problems[i].job.String()+problems[i].msg < problems[j].job.String()+problems[j].msg
	})
	return jobs, problems, err
}

// simZone is a zone of a type's ready index.
type simZone struct {
	typ, key string
	shard    int64
}

// checkZones checks that every zone with ready jobs is in the index of
// zones with ready jobs (a zone left out of it is never accepted from:
// its jobs would be lost to the acceptors), and that each fairness key's
// running count (the sum of its shards) is the number of its running
// jobs.
func checkZones(read func(tuple.Subspace) ([]tuple.Tuple, [][]byte, error), root tuple.Subspace,
	jobs map[simJobRef]*fdbq.StoredJob, readyZones map[simZone]bool, bad func(simJobRef, string, ...any)) error {
	marks, _, err := read(root.Sub(15))
	if err != nil {
		return err
	}
	marked := map[simZone]bool{}
	for _, t := range marks {
		if len(t) != 3 {
			bad(simJobRef{}, "a zone mark keyed %v", t)
			continue
		}
		marked[simZone{t[0].(string), t[1].(string), t[2].(int64)}] = true
	}
	for z := range readyZones {
		if !marked[z] {
			bad(simJobRef{typ: z.typ}, "zone (%q, %d) has ready jobs and no mark", z.key, z.shard)
		}
	}
	counts, vs, err := read(root.Sub(16))
	if err != nil {
		return err
	}
	type typeKey struct{ typ, key string }
	sums, want := map[typeKey]int64{}, map[typeKey]int64{}
	for i, t := range counts {
		sums[typeKey{t[0].(string), t[1].(string)}] += kv.DecodeInt64(vs[i])
	}
	for job, j := range jobs {
		if j.State == fdbq.Running && j.Key != "" {
			want[typeKey{job.typ, j.Key}]++
		}
	}
	for k, n := range sums {
		if n != want[k] {
			bad(simJobRef{typ: k.typ}, "key %q: the running count says %d, the records %d", k.key, n, want[k])
		}
	}
	for k, n := range want {
		if _, ok := sums[k]; !ok {
			bad(simJobRef{typ: k.typ}, "key %q: no running count, %d running records", k.key, n)
		}
	}
	return nil
}

// simBounds follows, commit by commit, the running jobs of each type and
// of each fairness key, which the accept transaction holds to the type's
// MaxRunning and the keys' (the same in every settings of a run: see
// simKeyPolicies). A commit that starts a job must leave its type and key
// within their bounds, whatever failed, crashed or conflicted before.
type simBounds struct {
	byType map[string]int
	byKey  map[[2]string]int
}

func newSimBounds() *simBounds {
	return &simBounds{byType: map[string]int{}, byKey: map[[2]string]int{}}
}

func (b *simBounds) commit(s *sim, c *simCommit) {
	started := map[[2]string]simJobRef{}
	for _, w := range c.writes {
		if w.settings != nil {
			continue
		}
		was := w.prev != nil && w.prev.State == fdbq.Running
		is := w.next != nil && w.next.State == fdbq.Running
		if was {
			b.byType[w.job.typ]--
			b.byKey[[2]string{w.job.typ, w.prev.Key}]--
		}
		if is {
			b.byType[w.job.typ]++
			b.byKey[[2]string{w.job.typ, w.next.Key}]++
			if !was {
				started[[2]string{w.job.typ, w.next.Key}] = w.job
			}
		}
	}
	for tk, job := range started {
		if n := b.byType[tk[0]]; n > simTypeMaxRunning {
			s.violate("bounds", job, c.entry, "c%d started a job with %d of the type running, above its bound %d", c.n, n, simTypeMaxRunning)
		}
		if p, ok := simKeyPolicies[tk[1]]; ok && p.MaxRunning > 0 && b.byKey[tk] > p.MaxRunning {
			s.violate("bounds", job, c.entry, "c%d started a job with %d of key %s running, above its bound %d", c.n, b.byKey[tk], tk[1], p.MaxRunning)
		}
	}
}
