package fdbq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/kvtest"
)

// The simulation runs the whole jobs layer as several processes sharing
// one store (plain jobs, and workflows: sim_workflow_test.go), in the manner of FoundationDB's simulation testing: each
// process has a producer, workers, an activity monitor and an operator,
// its own wall clock (skewed, jumping back and forth), a monotonic clock
// for its monitor, and its own fault injector (kvtest.FaultyBackend:
// conflicts, transaction_too_old on commits and reads, commit_unknown_result
// before and after applying, delays). Processes crash — every lease they
// hold is lost, a commit may have applied just before — and restart.
//
// One goroutine runs it all, one call at a time, in simulated time, and
// every random choice comes from one seeded source (the fault injectors
// are seeded from it), so a seed replays its run exactly. Concurrency is
// simulated: while a transaction is open, while its commit is delayed,
// and between a commit whose result is unknown and the retry, calls of
// other processes run (the store then sees truly concurrent
// transactions, and real conflicts). Accepts take their window in strict
// order (Window = Max) and retry policies are exact (constant, linear),
// since fdbq's random picks and jitter draw from a source no test can
// seed; the lock tokens and commit-marker ids are random too, but they
// decide nothing the run depends on (locks are printed by short names in
// the order the run meets them). What is left to the embedded store's
// goroutines (its committer, its transaction lifetime timer) cannot
// change an answer here: every commit is waited for, and no transaction
// lives anywhere near its lifetime. TestSimReplay checks that two runs of
// a seed give the same history.
//
// The run is recorded (sim_history_test.go) and checked at the end
// (sim_check_test.go). A failure prints the seed, the broken rule and the
// history of the job that broke it; JOBSTAGE_SEED=<n> replays that seed.
//
//	go test -race ./fdbq -run 'TestSim$'                          # CI seeds
//	JOBSTAGE_SEED=12 go test -race ./fdbq -run 'TestSim$' -v      # one seed
//	JOBSTAGE_SIM_SECONDS=600 go test ./fdbq -run 'TestSim$' -v -timeout 0
//	                                            # soak: new seeds for 10 min
//
// JOBSTAGE_SIM_LENGTH=<s> sets the simulated seconds of each seed's run
// (CI: 40); JOBSTAGE_SIM_HISTORY=<path> writes each seed's whole history
// to <path>.<seed>. JOBSTAGE_SIM_STRICT_CLOCKS=1 holds the current monitor to the
// clock rule it is to meet once it measures the activity timeout on its
// own clock (see simClockRule).

// simCISeeds run by default.
var simCISeeds = []uint64{1, 2, 3, 4}

// simEpoch is where simulated time starts.
var simEpoch = time.UnixMilli(1_700_000_000_000)

// simTypes are the job types of every run.
var simTypes = []string{"sim-a", "sim-b"}

// simFairnessKeys are the fairness keys the jobs of a run take ("": none), and
// simKeyPolicies their bounds, the same in every settings a run writes, so
// that the check holds every commit to them (simTypeMaxRunning likewise).
var (
	simFairnessKeys = []string{"", "", "k1", "k2", "k3"}
	simKeyPolicies  = map[string]fdbq.KeyPolicy{
		"k1": {MaxRunning: 1, Zones: 1},
		"k2": {MaxRunning: 2, Weight: 2},
	}
	simTypeMaxRunning = 5
)

// Activity timeouts a type takes; workers heartbeat every third of the
// shortest one, by simulated time (not by their skewed wall clocks).
var simTimeouts = []time.Duration{2 * time.Second, 3 * time.Second, 4 * time.Second}

const (
	simMinTimeout = 2 * time.Second
	simMaxTimeout = 4 * time.Second
	simHeartbeat  = simMinTimeout / 3
	// simSweepMin and simSweepMax bound the simulated time between two
	// sweeps of a process's monitor.
	simSweepMin = 300 * time.Millisecond
	simSweepMax = 700 * time.Millisecond
	// simCallTimeout bounds one call in real time: a call that has not
	// returned by then spins.
	simCallTimeout = 20 * time.Second
)

// simConfig is what a run does; seeds draw the rest.
type simConfig struct {
	procs    int
	length   time.Duration // simulated time of the random phase
	drainMax time.Duration // simulated time the drain may take
	ids      int           // job ids per type
	// skew bounds each wall clock's offset from simulated time; a jump
	// sets a new offset within it, forward or back.
	skew     time.Duration
	rateSkew float64 // monitor clocks run at 1±rateSkew

	crashRate, jumpRate                 float64 // per environment step
	crashBeforeCommit, crashAfterCommit float64 // per commit
	delayRate                           float64 // per commit: delayed in simulated time
	maxDelay                            time.Duration
	beginInterleave, unknownInterleave  float64 // chance that others run there
	maxDepth                            int     // nesting of calls run inside calls
	checkEvery                          int     // top-level steps between store scans

	// vary lets each seed draw how many processes and job ids its run
	// has, and how often calls run inside others and crash.
	vary bool
	// strictClocks enforces simClockRule.
	strictClocks bool
	// newMonitor: the monitor measures the activity timeout on its own
	// clock (MonitorOptions.Clock), and the bounds are derived for that.
	newMonitor bool
	// workflows: producers add workflows and operators cancel them
	// (sim_workflow_test.go).
	workflows bool
}

func defaultSimConfig() simConfig {
	_, newMonitor := monitorOptions(fdbq.MonitorOptions{}, time.Now)
	return simConfig{
		procs:             3,
		length:            40 * time.Second,
		drainMax:          90 * time.Second,
		ids:               12,
		skew:              time.Second,
		rateSkew:          0.02,
		crashRate:         0.08,
		jumpRate:          0.25,
		crashBeforeCommit: 0.002,
		crashAfterCommit:  0.004,
		delayRate:         0.1,
		maxDelay:          150 * time.Millisecond,
		beginInterleave:   0.04,
		unknownInterleave: 0.6,
		maxDepth:          2,
		checkEvery:        150,
		vary:              true,
		strictClocks:      newMonitor || os.Getenv("JOBSTAGE_SIM_STRICT_CLOCKS") == "1",
		newMonitor:        newMonitor,
		workflows:         true,
	}
}

// monitorOptions gives o the monitor's own clock, clock (a duration
// clock: only its rate matters, it never jumps), and reports that the
// monitor measures timeouts on it.
func monitorOptions(o fdbq.MonitorOptions, clock func() time.Time) (fdbq.MonitorOptions, bool) {
	o.Clock = clock
	return o, true
}

// --- the world ---

type sim struct {
	seed uint64
	cfg  simConfig
	rng  *rand.Rand
	// qrng draws the queues' own random choices (Options.Rand).
	qrng   *rand.Rand
	randMu sync.Mutex
	store  kv.Backend
	plain  *kv.DB // the store without hooks or faults: setup and checks
	keys   simKeys
	now    time.Duration
	procs  []*simProc
	env    *simActor
	hist   *simHistory
	stack  []*simEntry // calls in progress, innermost last
	focus  *simJobRef  // the job the next call picks, to contend with the one it runs inside

	// shadow is every job record as the commit log has it.
	shadow      map[simJobRef]*fdbq.StoredJob
	shadowOrder []simJobRef
	typeHist    map[string][]simSettingsAt

	// workflows are those producers added, by id, in wfOrder.
	workflows map[string]*simWorkflow
	wfOrder   []string

	draining   bool
	steps      int
	violations []*simViolation
	// early counts the recycles the new monitor's clock rule refuses;
	// faults, the faults of the injectors of processes that crashed.
	early, earlyLive int
	faults           int64
}

type simSettingsAt struct {
	at time.Duration
	s  fdbq.TypeSettings
}

type simProc struct {
	s        *sim
	id       int
	gen      int
	up       bool
	upAt     time.Duration
	ups      [][2]time.Duration // intervals it was up ([1] = -1: still up)
	downTill time.Duration
	offset   time.Duration // wall clock − simulated time
	rate     float64       // of the monitor's clock
	monBase  time.Duration
	ctx      context.Context
	cancel   context.CancelFunc
	faulty   *kvtest.FaultyBackend
	db       *kv.DB
	q        *fdbq.Queue
	mon      *fdbq.Monitor
	group    *fdbq.AcceptGroup
	actors   []*simActor
	paused   map[string]bool // types its operator paused, to resume
}

func (p *simProc) aliveAt(gen int) bool { return p.up && p.gen == gen }

// wall is the process's wall clock: Options.Now of its queue.
func (p *simProc) wall() time.Time { return simEpoch.Add(p.s.now + p.offset) }

// monotonic is its monitor's clock: it runs at its own rate from an
// arbitrary origin each start, and never jumps.
func (p *simProc) monotonic() time.Time {
	return simEpoch.Add(p.monBase + time.Duration(float64(p.s.now-p.upAt)*p.rate))
}

type simActor struct {
	p      *simProc
	kind   string // producer, worker, monitor, operator, env
	name   string
	next   time.Duration
	busy   bool
	leases []*simLease
}

// simLease is a lease a worker holds, with its plan: heartbeats every
// simHeartbeat, then an exit at doneAt; a stalled lease gets no
// heartbeats from stallFrom until stallUntil (a hung worker), then tries
// its exit.
type simLease struct {
	l                     *fdbq.Lease
	exit                  string
	hbDue, doneAt         time.Duration
	stallFrom, stallUntil time.Duration
}

// simHeld is a job and the lock a call used on it (or, for an accept,
// got for it).
type simHeld struct {
	job  simJobRef
	lock string
}

func newSim(seed uint64, cfg simConfig) (*sim, error) {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		return nil, err
	}
	s := &sim{
		seed: seed, cfg: cfg, rng: rand.New(rand.NewPCG(seed, seed^0x73696d)), qrng: rand.New(rand.NewPCG(seed, seed^0x7a6f6e)),
		store: st, plain: kv.NewDB(st, kv.Options{}), keys: newSimKeys(),
		hist:      &simHistory{names: map[string]string{}},
		shadow:    map[simJobRef]*fdbq.StoredJob{},
		typeHist:  map[string][]simSettingsAt{},
		workflows: map[string]*simWorkflow{},
	}
	if cfg.vary {
		s.varyConfig()
	}
	setup := fdbq.New(s.plain, fdbq.Options{Now: func() time.Time { return simEpoch.Add(s.now) }})
	for _, typ := range simTypes {
		ts := s.randomSettings()
		if err := setup.SetType(context.Background(), s.plain, typ, ts); err != nil {
			st.Close()
			return nil, err
		}
		s.typeHist[typ] = []simSettingsAt{{0, ts}}
	}
	s.env = &simActor{kind: "env", name: "env"}
	for i := range cfg.procs {
		p := &simProc{s: s, id: i, paused: map[string]bool{}}
		for _, k := range []string{"producer", "worker", "worker", "monitor", "operator"} {
			n := len(p.actors)
			p.actors = append(p.actors, &simActor{p: p, kind: k, name: fmt.Sprintf("p%d.%s%d", i, k, n)})
		}
		s.procs = append(s.procs, p)
		s.start(p)
	}
	return s, nil
}

func (s *sim) close() { s.plain.Close() }

// varyConfig draws the run's shape from its seed, around the defaults.
func (s *sim) varyConfig() {
	c := &s.cfg
	c.procs = 2 + s.rng.IntN(3)
	c.ids = 6 + s.rng.IntN(12)
	c.beginInterleave = 0.02 + 0.18*s.rng.Float64()
	c.maxDepth = 1 + s.rng.IntN(3)
	c.crashRate = 0.02 + 0.1*s.rng.Float64()
	c.crashAfterCommit = 0.008 * s.rng.Float64()
}

// intn is the queues' random choices, drawn from the run's seed.
func (s *sim) intn(n int) int {
	s.randMu.Lock()
	defer s.randMu.Unlock()
	return s.qrng.IntN(n)
}

func (s *sim) roll(p float64) bool { return p > 0 && s.rng.Float64() < p }

func (s *sim) uniform(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)))
}

func (s *sim) advance(d time.Duration) { s.now += d }

func (s *sim) top() *simEntry {
	if len(s.stack) == 0 {
		return nil
	}
	return s.stack[len(s.stack)-1]
}

func (s *sim) randomSettings() fdbq.TypeSettings {
	return fdbq.TypeSettings{
		ActivityTimeout: simTimeouts[s.rng.IntN(len(simTimeouts))],
		Retry: fdbq.RetryPolicy{
			MaxAttempts: 1 + s.rng.IntN(4),
			Backoff:     []fdbq.Backoff{fdbq.Constant, fdbq.Linear}[s.rng.IntN(2)],
			Base:        []time.Duration{0, 100 * time.Millisecond, 400 * time.Millisecond}[s.rng.IntN(3)],
			Max:         2 * time.Second,
		},
		Retention:  []time.Duration{0, 3 * time.Second, 10 * time.Second}[s.rng.IntN(3)],
		Zones:      []int{0, 1, 3}[s.rng.IntN(3)],
		MaxRunning: simTypeMaxRunning,
		Keys:       simKeyPolicies,
	}
}

func (s *sim) faultOptions() kvtest.FaultOptions {
	f := func(lo, hi float64) float64 { return lo + s.rng.Float64()*(hi-lo) }
	return kvtest.FaultOptions{
		Seed:                  s.rng.Int64(),
		ConflictRate:          f(0.02, 0.08),
		TooOldRate:            f(0.01, 0.03),
		UnknownNotAppliedRate: f(0.01, 0.03),
		UnknownAppliedRate:    f(0.02, 0.05),
		DelayRate:             0.05,
		MaxDelay:              20 * time.Microsecond,
	}
}

// start starts (or restarts) a process: new clocks, store client, queue,
// monitor and accept group; its actors hold nothing.
func (s *sim) start(p *simProc) {
	p.gen++
	p.up, p.upAt = true, s.now
	p.ups = append(p.ups, [2]time.Duration{s.now, -1})
	p.offset = s.uniform(-s.cfg.skew, s.cfg.skew+1)
	p.rate = 1 + (2*s.rng.Float64()-1)*s.cfg.rateSkew
	p.monBase = s.uniform(0, time.Hour)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if p.faulty != nil {
		s.faults += p.faulty.Counts().Injected()
	}
	p.faulty = kvtest.NewFaultyBackend(&simLower{s: s, p: p, gen: p.gen}, s.faultOptions())
	p.db = kv.NewDB(&simUpper{s: s, p: p, gen: p.gen, inner: p.faulty},
		kv.Options{RetryLimit: 300, InitialBackoff: time.Microsecond, MaxBackoff: 20 * time.Microsecond})
	p.q = fdbq.New(p.db, fdbq.Options{Now: p.wall, Rand: s.intn})
	mo, _ := monitorOptions(fdbq.MonitorOptions{Logger: quietLog}, p.monotonic)
	p.mon = fdbq.NewMonitor(p.q, mo)
	p.group = &fdbq.AcceptGroup{}
	for _, a := range p.actors {
		a.leases = nil
		a.next = s.now + s.uniform(0, 100*time.Millisecond)
	}
}

// crash ends a process at once: its leases, monitor and store client are
// gone; every call it has in progress fails.
func (s *sim) crash(p *simProc, why string) {
	if !p.up {
		return
	}
	p.up = false
	p.cancel()
	p.ups[len(p.ups)-1][1] = s.now
	p.downTill = s.now + s.uniform(500*time.Millisecond, 5*time.Second)
	var lost []string
	var jobs []simJobRef
	for _, a := range p.actors {
		for _, l := range a.leases {
			lost = append(lost, s.hist.lockName(l.l.Lock)+"@"+l.l.ID)
			jobs = append(jobs, simJobRef{l.l.Type, l.l.ID})
		}
		a.leases = nil
	}
	clear(p.paused)
	s.event(p, "crash", fmt.Sprintf("%s, leases lost: %v", why, lost), jobs)
}

// event records what happened to a process, not a call.
func (s *sim) event(p *simProc, op, args string, jobs []simJobRef) {
	e := &simEntry{n: len(s.hist.entries), at: s.now, end: s.now, proc: p.id, gen: p.gen,
		actor: fmt.Sprintf("p%d", p.id), depth: len(s.stack), op: op, args: args, jobs: jobs,
		logAtBegin: len(s.hist.log), logAtEnd: len(s.hist.log)}
	s.hist.entries = append(s.hist.entries, e)
}

// do runs one call of actor a and records it.
func (s *sim) do(a *simActor, op, args string, jobs []simJobRef, held []simHeld, call func(ctx context.Context) (string, error)) *simEntry {
	p := a.p
	n := len(s.hist.log)
	e := &simEntry{n: len(s.hist.entries), at: s.now, proc: p.id, gen: p.gen, actor: a.name, depth: len(s.stack),
		op: op, args: args, jobs: jobs, logAtBegin: n, logAtLastBegin: n}
	if len(held) > 0 {
		e.lock = held[0].lock
	}
	e.held = held
	s.hist.entries = append(s.hist.entries, e)
	faults := p.faulty.Counts().Injected()
	s.stack = append(s.stack, e)
	a.busy = true
	ctx, cancel := context.WithTimeout(p.ctx, simCallTimeout)
	res, err := call(ctx)
	cancel()
	s.stack = s.stack[:len(s.stack)-1]
	a.busy = false
	e.end, e.logAtEnd, e.err = s.now, len(s.hist.log), err
	e.faults = p.faulty.Counts().Injected() - faults
	e.class = classifyErr(err, err != nil && !p.aliveAt(e.gen))
	e.res = res
	if err != nil {
		msg := err.Error()
		if len(msg) > 160 {
			msg = msg[:160] + "…"
		}
		e.res = e.class + ": " + msg
	}
	return e
}

// interleave runs, with chance prob, one or two calls of other actors
// in the middle of the current one.
func (s *sim) interleave(prob float64) {
	if len(s.stack) >= s.cfg.maxDepth+1 || !s.roll(prob) {
		return
	}
	for range 1 + s.rng.IntN(2) {
		var idle []*simActor
		for _, p := range s.procs {
			if !p.up {
				continue
			}
			for _, a := range p.actors {
				if !a.busy {
					idle = append(idle, a)
				}
			}
		}
		if len(idle) == 0 {
			return
		}
		// Half the time on the same job as the call it runs inside of.
		if e := s.top(); e != nil && len(e.jobs) > 0 && s.rng.IntN(2) == 0 {
			j := e.jobs[s.rng.IntN(len(e.jobs))]
			s.focus = &j
		}
		s.step(idle[s.rng.IntN(len(idle))])
		s.focus = nil
	}
}

// run is the random phase, then the drain: no more crashes, jumps,
// adds or admin calls; workers finish every job; the types are resumed.
func (s *sim) run() {
	for s.now < s.cfg.length {
		s.stepNext()
	}
	s.draining = true
	for _, p := range s.procs {
		if !p.up {
			s.start(p)
			s.event(p, "restart", "for the drain", nil)
		}
	}
	deadline := s.now + s.cfg.drainMax
	for s.now < deadline {
		s.stepNext()
		if s.steps%20 == 0 && s.settled() {
			break
		}
	}
	s.scan()
	if s.settled() {
		s.checkStampsCleared()
	}
}

// settled: no job pending or running, no type paused.
func (s *sim) settled() bool {
	for _, j := range s.shadowOrder {
		if r := s.shadow[j]; r != nil && r.State != fdbq.Finished {
			return false
		}
	}
	for _, typ := range simTypes {
		if h := s.typeHist[typ]; h[len(h)-1].s.Paused {
			return false
		}
	}
	return true
}

// stepNext runs the actor that is due first.
func (s *sim) stepNext() {
	next := s.env
	for _, p := range s.procs {
		if !p.up {
			continue
		}
		for _, a := range p.actors {
			if a.next < next.next {
				next = a
			}
		}
	}
	s.now = max(s.now, next.next)
	s.step(next)
	s.steps++
	if s.steps%s.cfg.checkEvery == 0 {
		s.scan()
	}
}

func (s *sim) step(a *simActor) {
	switch a.kind {
	case "env":
		s.envStep()
	case "producer":
		s.producerStep(a)
	case "worker":
		s.workerStep(a)
	case "monitor":
		s.monitorStep(a)
	case "operator":
		s.operatorStep(a)
	}
}

// --- actors ---

func (s *sim) envStep() {
	a := s.env
	for _, p := range s.procs {
		if !p.up && p.downTill <= s.now {
			s.start(p)
			s.event(p, "restart", fmt.Sprintf("wall clock %+.3fs, monitor clock rate %.3f", p.offset.Seconds(), p.rate), nil)
		}
	}
	a.next = s.now + s.uniform(200*time.Millisecond, time.Second)
	for _, p := range s.procs {
		if !p.up {
			a.next = min(a.next, p.downTill)
		}
	}
	if s.draining {
		return
	}
	p := s.procs[s.rng.IntN(len(s.procs))]
	switch r := s.rng.Float64(); {
	case r < s.cfg.crashRate:
		s.crash(p, "killed")
	case r < s.cfg.crashRate+s.cfg.jumpRate && p.up:
		old := p.offset
		p.offset = s.uniform(-s.cfg.skew, s.cfg.skew+1)
		s.event(p, "clock", fmt.Sprintf("wall clock jumps %+.3fs → %+.3fs", old.Seconds(), p.offset.Seconds()), nil)
	}
}

// pickType and pickJob choose what a call works on: the job of the
// call it runs inside, when it is to contend with that one, else any.
func (s *sim) pickType() string {
	if s.focus != nil {
		return s.focus.typ
	}
	return simTypes[s.rng.IntN(len(simTypes))]
}

func (s *sim) pickJob() simJobRef {
	if s.focus != nil {
		j := *s.focus
		s.focus = nil
		return j
	}
	return simJobRef{s.pickType(), fmt.Sprintf("j%02d", s.rng.IntN(s.cfg.ids))}
}

func (s *sim) newJob(p *simProc) fdbq.NewJob {
	ref := s.pickJob()
	j := fdbq.NewJob{Type: ref.typ, ID: ref.id}
	if s.rng.IntN(5) > 0 {
		j.Data = json.RawMessage(fmt.Sprintf(`{"n":%d}`, s.rng.IntN(4)))
	}
	if s.rng.IntN(5) < 2 {
		j.ScheduledAt = p.wall().Add(s.uniform(-time.Second, 3*time.Second)).Truncate(time.Millisecond)
	}
	j.Priority = []int{0, 0, 0, 1, -1}[s.rng.IntN(5)]
	j.MaxAttempts = []int{0, 0, 0, 1, 3}[s.rng.IntN(5)]
	if s.rng.IntN(8) == 0 {
		j.Retry = &fdbq.RetryPolicy{MaxAttempts: 2, Backoff: fdbq.Linear, Base: 200 * time.Millisecond}
	}
	j.Key = simFairnessKeys[s.rng.IntN(len(simFairnessKeys))]
	return j
}

func (s *sim) jobText(j fdbq.NewJob) string {
	t := j.ID + "@" + j.Type
	if len(j.Data) > 0 {
		t += " data=" + string(j.Data)
	}
	if !j.ScheduledAt.IsZero() {
		t += fmt.Sprintf(" sched=%.3fs", j.ScheduledAt.Sub(simEpoch).Seconds())
	}
	if j.Priority != 0 {
		t += fmt.Sprintf(" prio=%d", j.Priority)
	}
	if j.MaxAttempts != 0 {
		t += fmt.Sprintf(" max=%d", j.MaxAttempts)
	}
	if j.Retry != nil {
		t += " retry=linear"
	}
	if j.Key != "" {
		t += " key=" + j.Key
	}
	return t
}

func (s *sim) producerStep(a *simActor) {
	p := a.p
	a.next = s.now + s.uniform(30*time.Millisecond, 400*time.Millisecond)
	if s.draining {
		a.next = s.now + time.Hour
		return
	}
	if s.cfg.workflows && s.rng.IntN(8) == 0 {
		s.addWorkflow(a)
		return
	}
	if s.rng.IntN(10) < 7 {
		j := s.newJob(p)
		s.do(a, "add", s.jobText(j), []simJobRef{{j.Type, j.ID}}, nil, func(ctx context.Context) (string, error) {
			got, err := p.q.Add(ctx, p.db, j)
			if err != nil {
				return "", err
			}
			return string(got.State), nil
		})
		return
	}
	jobs := make([]fdbq.NewJob, 2+s.rng.IntN(4))
	for i := range jobs {
		jobs[i] = s.newJob(p)
	}
	if s.rng.IntN(2) == 0 {
		// One id twice in the batch.
		k := 1 + s.rng.IntN(len(jobs)-1)
		jobs[k].Type, jobs[k].ID = jobs[0].Type, jobs[0].ID
	}
	var texts []string
	var refs []simJobRef
	for _, j := range jobs {
		texts = append(texts, s.jobText(j))
		refs = append(refs, simJobRef{j.Type, j.ID})
	}
	s.do(a, "addbatch", "["+strings.Join(texts, "; ")+"]", refs, nil, func(ctx context.Context) (string, error) {
		got, err := p.q.AddBatch(ctx, p.db, jobs)
		var states []string
		for _, j := range got {
			states = append(states, string(j.State))
		}
		return strings.Join(states, ","), err
	})
}

// nextEvent is when the lease's worker next acts on it, and whether
// that is its exit.
func (l *simLease) nextEvent() (time.Duration, bool) {
	if l.stallUntil > 0 && l.hbDue >= l.stallFrom {
		return max(l.stallUntil, l.doneAt), true
	}
	if l.doneAt <= l.hbDue {
		return l.doneAt, true
	}
	return l.hbDue, false
}

func (s *sim) workerStep(a *simActor) {
	p, gen := a.p, a.p.gen
	var due *simLease
	var dueAt time.Duration
	exit := false
	for _, l := range a.leases {
		if at, x := l.nextEvent(); due == nil || at < dueAt {
			due, dueAt, exit = l, at, x
		}
	}
	switch {
	case due != nil && dueAt <= s.now:
		op := "heartbeat"
		if exit {
			op = due.exit
		}
		s.leaseCall(a, due, op)
	case len(a.leases) < 3:
		s.accept(a)
	}
	if !p.aliveAt(gen) {
		return
	}
	a.next = s.now + s.uniform(50*time.Millisecond, 400*time.Millisecond)
	for _, l := range a.leases {
		at, _ := l.nextEvent()
		a.next = min(a.next, max(at, s.now+time.Millisecond))
	}
}

func (s *sim) accept(a *simActor) {
	p, gen := a.p, a.p.gen
	typ := s.pickType()
	n := 1 + s.rng.IntN(3)
	var got []*fdbq.Lease
	e := s.do(a, "accept", fmt.Sprintf("%s max=%d", typ, n), nil, nil, func(ctx context.Context) (string, error) {
		ls, err := p.q.Accept(ctx, typ, fdbq.AcceptOptions{Max: n, Window: n, Group: p.group})
		got = ls
		var ids []string
		for _, l := range ls {
			ids = append(ids, l.ID)
		}
		return fmt.Sprintf("accepted %v", ids), err
	})
	for _, l := range got {
		ref := simJobRef{l.Type, l.ID}
		e.jobs = append(e.jobs, ref)
		e.held = append(e.held, simHeld{ref, l.Lock})
		e.lock = l.Lock
		s.hist.lockName(l.Lock)
	}
	if !p.aliveAt(gen) || e.class != "ok" {
		return
	}
	for _, l := range got {
		sl := &simLease{l: l, hbDue: s.now + simHeartbeat, doneAt: s.now + s.uniform(0, 5*time.Second)}
		sl.exit = "finish"
		if !s.draining {
			switch r := s.rng.IntN(100); {
			case r < 15:
				sl.exit = "fail"
			case r < 25:
				sl.exit = "resubmit"
			case r < 38:
				sl.exit = "release"
				sl.doneAt = s.now + s.uniform(0, 200*time.Millisecond)
			}
			if s.rng.IntN(100) < 6 {
				sl.stallFrom = s.now + s.uniform(0, time.Second)
				sl.stallUntil = sl.stallFrom + s.uniform(simMaxTimeout, 3*simMaxTimeout)
			}
		}
		a.leases = append(a.leases, sl)
	}
}

// leaseCall makes one worker call on lease l; a release takes every
// lease of the worker that is due for release.
func (s *sim) leaseCall(a *simActor, l *simLease, op string) {
	p, gen := a.p, a.p.gen
	ls := []*simLease{l}
	if op == "release" {
		for _, o := range a.leases {
			if at, x := o.nextEvent(); o != l && x && o.exit == "release" && at <= s.now {
				ls = append(ls, o)
			}
		}
	}
	var refs []simJobRef
	var held []simHeld
	var leases []*fdbq.Lease
	for _, o := range ls {
		ref := simJobRef{o.l.Type, o.l.ID}
		refs = append(refs, ref)
		held = append(held, simHeld{ref, o.l.Lock})
		leases = append(leases, o.l)
	}
	args := ""
	var hb fdbq.HeartbeatOptions
	var at time.Time
	own := false
	switch op {
	case "heartbeat":
		if s.rng.IntN(4) == 0 {
			hb.Progress = json.RawMessage(strconv.Itoa(s.rng.IntN(100)))
			args = "progress=" + string(hb.Progress)
		}
	case "finish":
		if own = s.rng.IntN(2) == 0; own {
			args = "with the worker's own write"
		}
	case "resubmit":
		if s.rng.IntN(2) == 0 {
			at = p.wall().Add(s.uniform(0, time.Second)).Truncate(time.Millisecond)
			args = fmt.Sprintf("at=%.3fs", at.Sub(simEpoch).Seconds())
		}
	}
	e := s.do(a, op, args, refs, held, func(ctx context.Context) (string, error) {
		var err error
		switch op {
		case "heartbeat":
			err = p.q.Heartbeat(ctx, p.db, l.l, hb)
		case "finish":
			if !own {
				err = p.q.Finish(ctx, p.db, l.l, json.RawMessage(`"done"`))
				break
			}
			// Inside the worker's own transaction, with its own write:
			// both commit, or neither.
			err = p.db.Transact(ctx, func(tx kv.Tx) error {
				tx.Add(simEffectKey(refs[0]), 1)
				return p.q.Finish(ctx, tx, l.l, json.RawMessage(`"done"`))
			})
		case "fail":
			err = p.q.Fail(ctx, p.db, l.l, "sim: the worker failed")
		case "resubmit":
			err = p.q.Resubmit(ctx, p.db, l.l, at)
		case "release":
			err = p.q.Release(ctx, p.db, leases)
		}
		return "ok", err
	})
	if !p.aliveAt(gen) {
		return
	}
	switch {
	case e.class == "ok" && op == "heartbeat":
		l.hbDue = s.now + simHeartbeat
	case e.class == "ok" || e.class == "halt":
		a.leases = slices.DeleteFunc(a.leases, func(o *simLease) bool { return slices.Contains(ls, o) })
	default:
		// The store failed the call (or it spun): try again soon.
		l.hbDue = min(l.hbDue, s.now+50*time.Millisecond)
	}
}

func (s *sim) monitorStep(a *simActor) {
	p := a.p
	a.next = s.now + s.uniform(simSweepMin, simSweepMax)
	bound := s.sweepBound()
	var st fdbq.SweepStats
	e := s.do(a, "sweep", "", nil, nil, func(ctx context.Context) (string, error) {
		var err error
		st, err = p.mon.Sweep(ctx)
		return fmt.Sprintf("recycled %d (failed %d), expired %d, skipped %d", st.Recycled, st.Failed, st.Expired, st.Skipped), err
	})
	e.stats, e.sweepBound = &st, bound
}

// sweepBound is how many transactions a sweep may make without
// spinning: the type registry and the claims, and per type a batch per
// due entry at the smallest batch size plus the batch that finds none.
func (s *sim) sweepBound() int {
	jobs := 0
	for _, j := range s.shadowOrder {
		if r := s.shadow[j]; r != nil && r.State != fdbq.Pending {
			jobs++
		}
	}
	return 2 + len(simTypes)*4 + jobs
}

func (s *sim) operatorStep(a *simActor) {
	p := a.p
	a.next = s.now + s.uniform(200*time.Millisecond, 1500*time.Millisecond)
	if s.draining {
		for _, typ := range simTypes {
			if h := s.typeHist[typ]; h[len(h)-1].s.Paused {
				s.do(a, "resume", typ, nil, nil, func(ctx context.Context) (string, error) {
					return "ok", p.q.Resume(ctx, p.db, typ)
				})
				return
			}
		}
		return
	}
	for _, typ := range simTypes {
		// Paused for a while: resumed by the operator who paused it. (In
		// the order of simTypes, not the map's, so that a seed replays.)
		if p.paused[typ] && s.rng.IntN(3) == 0 {
			delete(p.paused, typ)
			s.do(a, "resume", typ, nil, nil, func(ctx context.Context) (string, error) {
				return "ok", p.q.Resume(ctx, p.db, typ)
			})
			return
		}
	}
	if s.cfg.workflows && len(s.wfOrder) > 0 && s.rng.IntN(25) == 0 {
		s.cancelWorkflow(a)
		return
	}
	job := s.pickJob()
	refs := []simJobRef{job}
	switch r := s.rng.IntN(100); {
	case r < 8:
		s.do(a, "cancel", job.String(), refs, nil, func(ctx context.Context) (string, error) {
			return "ok", p.q.Cancel(ctx, p.db, job.typ, job.id)
		})
	case r < 12:
		s.do(a, "remove", job.String(), refs, nil, func(ctx context.Context) (string, error) {
			return "ok", p.q.Remove(ctx, p.db, job.typ, job.id)
		})
	case r < 22:
		s.do(a, "requeue", job.String(), refs, nil, func(ctx context.Context) (string, error) {
			return "ok", p.q.Requeue(ctx, p.db, job.typ, job.id)
		})
	case r < 26:
		e := s.do(a, "pause", job.typ, nil, nil, func(ctx context.Context) (string, error) {
			return "ok", p.q.Pause(ctx, p.db, job.typ)
		})
		if e.class == "ok" {
			p.paused[job.typ] = true
		}
	case r < 30:
		s.do(a, "resume", job.typ, nil, nil, func(ctx context.Context) (string, error) {
			return "ok", p.q.Resume(ctx, p.db, job.typ)
		})
	case r < 38:
		ts := s.randomSettings()
		h := s.typeHist[job.typ]
		ts.Paused = h[len(h)-1].s.Paused
		s.do(a, "settype", job.typ+" "+settingsText(ts), nil, nil, func(ctx context.Context) (string, error) {
			return "ok", p.q.SetType(ctx, p.db, job.typ, ts)
		})
	case r < 58:
		s.do(a, "get", job.String(), refs, nil, func(ctx context.Context) (string, error) {
			j, err := p.q.Get(ctx, p.db, job.typ, job.id)
			if err != nil {
				return "", err
			}
			return string(j.State), nil
		})
	case r < 78:
		state := []fdbq.State{fdbq.Pending, fdbq.Running, fdbq.Finished}[s.rng.IntN(3)]
		s.do(a, "list", job.typ+" "+string(state), nil, nil, func(ctx context.Context) (string, error) {
			page, err := p.q.List(ctx, p.db, job.typ, fdbq.ListOptions{State: state, Limit: 1 + s.rng.IntN(5)})
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%d jobs", len(page.Jobs)), nil
		})
	case r < 90:
		s.do(a, "types", "", nil, nil, func(ctx context.Context) (string, error) {
			infos, err := p.q.Types(ctx, p.db)
			return fmt.Sprintf("%d types", len(infos)), err
		})
	default:
		s.do(a, "oldestdue", job.typ, nil, nil, func(ctx context.Context) (string, error) {
			at, err := p.q.OldestDue(ctx, p.db, job.typ)
			return fmt.Sprint(!at.IsZero()), err
		})
	}
}

// --- the tests ---

// simSeeds are the seeds TestSim runs: JOBSTAGE_SEED (or -jobstage.seed)
// if given, as TestModel reads them, else simCISeeds.
func simSeeds(t *testing.T) []uint64 {
	if *modelSeedFlag != 0 || os.Getenv("JOBSTAGE_SEED") != "" {
		return modelSeedList(t)
	}
	return simCISeeds
}

func simConfigFromEnv(t *testing.T) simConfig {
	cfg := defaultSimConfig()
	if v := os.Getenv("JOBSTAGE_SIM_LENGTH"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("JOBSTAGE_SIM_LENGTH=%q: want simulated seconds", v)
		}
		cfg.length = time.Duration(n) * time.Second
	}
	return cfg
}

// TestSim runs the simulation for the CI seeds, for one seed
// (JOBSTAGE_SEED), or for new seeds until JOBSTAGE_SIM_SECONDS of real
// time have passed (soak mode).
func TestSim(t *testing.T) {
	cfg := simConfigFromEnv(t)
	if v := os.Getenv("JOBSTAGE_SIM_SECONDS"); v != "" {
		secs, err := strconv.Atoi(v)
		if err != nil || secs <= 0 {
			t.Fatalf("JOBSTAGE_SIM_SECONDS=%q: want seconds", v)
		}
		simSoak(t, cfg, time.Duration(secs)*time.Second)
		return
	}
	for _, seed := range simSeeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := runSim(t, seed, cfg)
			t.Log(r.summary())
			if path := os.Getenv("JOBSTAGE_SIM_HISTORY"); path != "" {
				if err := os.WriteFile(fmt.Sprintf("%s.%d", path, seed), []byte(r.historyText()), 0o644); err != nil {
					t.Error(err)
				}
			}
			r.report(t)
		})
	}
}

// simSoak runs new seeds until d has passed, and stops at the first
// that fails.
func simSoak(t *testing.T, cfg simConfig, d time.Duration) {
	start := time.Now()
	var total simStats
	seeds := 0
	for time.Since(start) < d {
		seed := rand.Uint64() >> 1
		r := runSim(t, seed, cfg)
		seeds++
		total.add(r.stats)
		t.Logf("seed %d: %s", seed, r.summary())
		if len(r.violations) > 0 {
			r.report(t)
			break
		}
	}
	took := time.Since(start)
	t.Logf("soak: %d seeds in %v (%.1f seeds/min); in all %s", seeds, took.Round(time.Second),
		float64(seeds)/took.Minutes(), total.text())
}

// TestSimReplay: a seed replays its run exactly, so that the seed a
// failure prints reproduces it.
func TestSimReplay(t *testing.T) {
	cfg := defaultSimConfig()
	cfg.length = 10 * time.Second
	a, b := runSim(t, 5, cfg), runSim(t, 5, cfg)
	ha, hb := a.historyText(), b.historyText()
	if ha == hb {
		t.Logf("two runs of seed 5: the same %d entries and %d commits", len(a.sim.hist.entries), len(a.sim.hist.log))
		return
	}
	la, lb := strings.Split(ha, "\n"), strings.Split(hb, "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			t.Fatalf("two runs of seed 5 differ at line %d:\n  %s\n  %s", i, la[i], lb[i])
		}
	}
	t.Fatalf("two runs of seed 5 differ in length: %d and %d lines", len(la), len(lb))
}

// TestSimClockSkew: whatever the wall clocks say, the monitor never
// takes a job back from a live worker that heartbeats every third of the
// activity timeout, and takes a dead worker's job back within its timeout
// plus twice the monitor's period (simStuckBound). Wall clocks here are
// up to 2 s apart and jump; the monitor's own clock only runs.
func TestSimClockSkew(t *testing.T) {
	cfg := simConfigFromEnv(t)
	cfg.skew = 2 * time.Second
	cfg.jumpRate = 0.5
	if !cfg.newMonitor && !cfg.strictClocks {
		t.Skip("the monitor compares the wall-clock deadlines of the workers' clocks with its own (MonitorOptions has no Clock yet); " +
			"with JOBSTAGE_SIM_STRICT_CLOCKS=1 every CI seed fails, live workers' jobs taken back well within their activity timeout. " +
			"Runs once MonitorOptions.Clock is there")
	}
	cfg.strictClocks = true
	for _, seed := range simSeeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := runSim(t, seed, cfg)
			t.Log(r.summary())
			r.report(t)
		})
	}
}
