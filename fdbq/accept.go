package fdbq

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// Lease is a job accepted by a worker: the job as it was when accepted,
// and the lock that proves the worker holds it. The lock is a fencing
// token: Heartbeat, Finish, Fail and Resubmit check it in their
// transaction, so a worker whose lock is gone can commit nothing with it.
type Lease struct {
	Job
	Lock string
}

// AcceptOptions tune Accept.
type AcceptOptions struct {
	// Max is the most jobs to accept in one transaction; default 1.
	Max int
	// MaxScheduledAt accepts only jobs scheduled at or before it; zero
	// means now (only due jobs). A bound that is set does not move: the
	// jobs up to it are taken at once and the ones after it never, so an
	// accept with one waits for the watch key alone.
	MaxScheduledAt time.Time
	// Timeout: 0 returns at once (possibly with no jobs); > 0 waits up to
	// that long for a job; < 0 waits until ctx ends. Waiting is woken by
	// the type's watch key (a job was added or the type changed) and, with
	// no MaxScheduledAt, by a timer for the next scheduled job, never by
	// polling. A watch that fails with an error that is not retryable
	// (too_many_watches) ends the wait with that error; a retryable one
	// has the accept read again after a backoff.
	Timeout time.Duration
	// Window is how many due jobs to look at, among which Max are picked
	// at random — whole priority bands first, so priority order stays
	// strict — so that concurrent acceptors rarely take the same job;
	// default max(4·Max, DefaultWindow), at most 1024. 1 (or Max) accepts
	// in strict order. With a Group, the default is
	// max(DefaultWindow, Max + the jobs the group's other accepts hold).
	Window int
	// Group, if set, is shared by accepts of this process that run at
	// once (a producer's accept loops): an accept never picks a job that
	// another accept of the group picked and has not yet committed, so
	// they do not conflict with each other.
	Group *AcceptGroup
	// Keys, if not nil, restricts the accept to the zones of these
	// fairness keys ("" names the jobs without a key), and leaves out
	// the scheduled index's due entries, which a later accept moves to
	// their zones. The express accepts of a pipeline take the first jobs
	// of keys newly ready with it (ReadyKeys).
	Keys []string
	// Holder names who accepts (a worker, a process: "host/pid"), shown
	// with each job it holds (Job.Holder) for as long as it runs; at
	// most MaxHolderSize bytes of printable UTF-8 (ValidateHolder). It is
	// part of the lock, whose random token alone fences.
	Holder string
}

// MaxHolderSize bounds AcceptOptions.Holder.
const MaxHolderSize = 128

// ValidateHolder reports what is wrong with h as an AcceptOptions.Holder:
// longer than MaxHolderSize, not UTF-8, or holding a character that is not
// printable (unicode.IsPrint: a control, format, line or paragraph
// separator, other space, private-use or unassigned character, which a
// terminal, a log or a page would act on or hide).
func ValidateHolder(h string) error {
	if len(h) > MaxHolderSize {
		return errorf(ErrInvalidJob, "holder: %d bytes, more than %d", len(h), MaxHolderSize)
	}
	if !utf8.ValidString(h) {
		return errorf(ErrInvalidJob, "holder %q is not UTF-8", h)
	}
	for _, r := range h {
		if !unicode.IsPrint(r) {
			return errorf(ErrInvalidJob, "holder %q holds %U, which is not a printable character (letters, marks, numbers, punctuation, symbols and the ASCII space)", h, r)
		}
	}
	return nil
}

// holderOf is the holder a lock names ("" for none).
func holderOf(lock string) string {
	_, h, _ := strings.Cut(lock, "@")
	return h
}

// AcceptGroup keeps accepts of one process that take jobs of one type at
// the same time from picking the same jobs. Each accept picks at random
// from a window of due jobs, so that acceptors that know nothing of each
// other rarely collide; but the random pick helps little when each takes
// a large batch: two accepts of 256 jobs from a window of 1024 almost
// always share one, and the one that commits second fails whole and
// starts again (a third of a pipeline's accepts did). Accepts that share
// a group skip each other's picks instead, and, because those no longer
// need spreading out, read a window only as wide as their batch plus what
// the others hold. The zero value is ready to use.
type AcceptGroup struct {
	mu sync.Mutex
	// taken holds the jobs picked by the group's accepts whose
	// transactions have not finished.
	taken map[heldJob]struct{}
	// wake is closed (and replaced) when an accept lets go of its jobs.
	wake chan struct{}
	// parked counts the group's accepts that wait for jobs to become
	// ready; parkedTurned is closed (and replaced) when it becomes zero
	// or stops being zero.
	parked       int
	parkedTurned chan struct{}
	// waits counts the waits the group's accepts began.
	waits uint64
}

// park counts an accept of the group that begins (+1) or ends (-1) a
// wait for jobs to become ready. A nil group counts nothing.
func (g *AcceptGroup) park(d int) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	was := g.parked > 0
	g.parked += d
	if d > 0 {
		g.waits++
	}
	if was != (g.parked > 0) && g.parkedTurned != nil {
		close(g.parkedTurned)
		g.parkedTurned = nil
	}
}

// noteWait counts a wait of an accept of the group that does not park it
// (one for another accept of the group to let go). A nil group counts
// nothing.
func (g *AcceptGroup) noteWait() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.waits++
	g.mu.Unlock()
}

// Waits is how many waits the group's accepts began, for jobs to become
// ready or for another accept of the group to let go: an accept during
// which it did not move found its jobs at once.
func (g *AcceptGroup) Waits() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waits
}

// Parked reports whether an accept of the group waits for jobs to become
// ready (on the type's watch key, a timer or a bound): while one does, it
// takes a job that becomes ready as soon as it is. The channel is closed
// when that changes.
func (g *AcceptGroup) Parked() (bool, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.parkedTurned == nil {
		g.parkedTurned = make(chan struct{})
	}
	return g.parked > 0, g.parkedTurned
}

// held is how many jobs the group's accepts hold.
func (g *AcceptGroup) held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.taken)
}

// heldJob names a job held in an accept group.
type heldJob struct{ typ, id string }

// pick chooses up to max of cands, jobs of type typ, that no other accept
// of the group holds (as package-level pick does) and holds them,
// appending them to held. When it finds none free it returns a channel
// that is closed when an accept of the group next lets go.
func (g *AcceptGroup) pick(intn func(int) int, typ string, cands []candidate, max int, held []heldJob) ([]candidate, []heldJob, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var free []candidate // nil until a taken job is found: then the free ones are copied
	for i, c := range cands {
		if _, ok := g.taken[heldJob{typ, c.id}]; ok {
			if free == nil {
				free = append(make([]candidate, 0, len(cands)), cands[:i]...)
			}
			continue
		}
		if free != nil {
			free = append(free, c)
		}
	}
	if free == nil {
		free = cands
	}
	if len(free) > max {
		free = pick(intn, free, max)
	}
	if len(free) == 0 {
		if g.wake == nil {
			g.wake = make(chan struct{})
		}
		return nil, held, g.wake
	}
	if g.taken == nil {
		g.taken = make(map[heldJob]struct{})
	}
	for _, c := range free {
		k := heldJob{typ, c.id}
		g.taken[k] = struct{}{}
		held = append(held, k)
	}
	return free, held, nil
}

// release lets the group's accepts pick jobs again.
func (g *AcceptGroup) release(held []heldJob) {
	if len(held) == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range held {
		delete(g.taken, k)
	}
	if g.wake != nil {
		close(g.wake)
		g.wake = nil
	}
}

// DefaultWindow is the least number of due jobs an accept picks from
// (couch_jobs picks from 1024). With 32 acceptors taking one job each, a
// window of 4 made half the accept transactions conflict; 256 makes about
// 7% conflict (BenchmarkAcceptConflicts).
const DefaultWindow = 256

// AcceptResult is what one accept transaction found.
type acceptResult struct {
	leases []*Lease
	// next is the scheduled time of the earliest job not yet due, when
	// time alone can make it acceptable (0: none, or no such job).
	next int64
	// watch fires when the type's watch key changes.
	watch kv.Watch
	// groupWake, set instead of watch when every due job was held by
	// other accepts of the group, is closed when one of them lets go.
	groupWake <-chan struct{}
	// promote and demote say what moveEntries has to move (see
	// acceptWindowRead): demote names the zones read that have entries
	// not due yet.
	promote bool
	demote  []zone
	// limitWatch are the running counts whose fall would let the type or
	// a key held back by its bound start a job; limitWatches the watches
	// of them a waiting accept set.
	limitWatch   [][]byte
	limitWatches []kv.Watch
	// moreZones: the accept read as many zones as one may and took
	// nothing; others are left to read.
	moreZones bool
	// watchChanges: a waiting accept watches the type's change key too
	// (acceptFrom); blind are the zones that made it so.
	watchChanges bool
	blind        []zone
	// again: a job picked could not be taken, and the accept should look
	// again rather than wait, now that it passes over that job.
	again bool
	// took counts the jobs the current acceptFrom took, by zone.
	took map[zone]int
}

// Accept takes up to o.Max due jobs of a type, from the zones it chooses
// by the weights of their fairness keys (see Fairness in the package doc)
// and within each zone highest priority first and then earliest
// scheduled, and returns them running under a new lock. The bounds of the
// type and of the keys (TypeSettings.MaxRunning, KeyPolicy) hold at its
// commit.
// Paused types give no jobs. See AcceptOptions for blocking.
func (q *Queue) Accept(ctx context.Context, typ string, o AcceptOptions) ([]*Lease, error) {
	if err := checkName("type name", typ); err != nil {
		return nil, err
	}
	if err := ValidateHolder(o.Holder); err != nil {
		return nil, err
	}
	o, fixedWindow := o.withDefaults()
	var deadline <-chan time.Time
	if o.Timeout > 0 {
		t := time.NewTimer(o.Timeout)
		defer t.Stop()
		deadline = t.C
	}
	var rewatch watchRetry
	lookAgain, moreZones := 8, maxZoneRounds
	// blind: zones with jobs this Accept cannot take, passed over until
	// it has waited.
	var blind []zone
	// interest: the accept's hold on the type's change key, taken the
	// first time it waits on that key (see interests).
	var interest *interestHold
	defer func() { interest.release() }()
	for {
		if interest != nil {
			if err := interest.renew(ctx); err != nil {
				return nil, err
			}
		}
		// The lock and the claim key are made outside the transaction: if
		// a commit's result is unknown, the retry finds the claim and
		// returns the jobs the first attempt took instead of leaving them
		// running with nobody holding them.
		lock := newToken()
		if o.Holder != "" {
			lock += "@" + o.Holder
		}
		claimMs := q.nowMs()
		wait := o.Timeout != 0
		if o.Group != nil && !fixedWindow {
			o.Window = min(max(DefaultWindow, o.Max+o.Group.held()), MaxWindow)
		}
		res, err := q.acceptCommit(ctx, typ, o, lock, claimMs, wait, blind)
		if err != nil {
			if errors.Is(err, kv.ErrCommitUnknownResult) && ctx.Err() != nil {
				// The caller gave up while an attempt's outcome was
				// unknown: if it committed, its jobs are running under a
				// lock nobody holds. Give them back, so that the accept
				// took none.
				q.undoAccept(typ, lock, claimMs)
			}
			return nil, err
		}
		demoted := 0
		if res.promote || len(res.demote) > 0 {
			// The accept has committed: a move that fails takes nothing
			// from it, and the next accept moves again.
			demoted, _ = q.moveEntries(ctx, typ, res.promote, res.demote, o.Window)
		}
		if len(res.leases) > 0 {
			return res.leases, nil
		}
		if res.watchChanges && wait && interest == nil {
			// Zones it cannot take from are known to it only through the
			// change key, which a change bumps only while some process
			// holds it: hold it, then read again, those zones too (a job
			// added to one before the hold bumped nothing). The reads
			// after the hold pass over them until it has waited.
			res.cancel()
			if interest, err = q.holdInterest(ctx, typ); err != nil {
				return nil, err
			}
			blind = nil
			continue
		}
		if (demoted > 0 || res.again) && lookAgain > 0 || res.moreZones && moreZones > 0 {
			// Jobs that were in the way are out of it, or zones are left
			// to read: look again at once, a bounded number of times
			// (others may keep writing entries that this clock finds not
			// yet due, or emptying zones).
			if res.moreZones {
				moreZones--
				blind = append(blind, res.blind...)
			} else {
				lookAgain--
			}
			res.cancel()
			continue
		}
		if res.moreZones {
			// Zones are left unread still: look again soon rather than
			// wait for a mark that may have been made already.
			res.next = earliest(res.next, q.nowMs()+limitRecheck.Milliseconds())
		}
		if !wait {
			return nil, nil
		}
		if res.watchChanges {
			res.next = earliest(res.next, q.nowMs()+max(interest.renewIn().Milliseconds(), 1))
		}
		// A wait for another accept of the group to let go is no wait for
		// jobs to become ready: the group is not parked by it (an express
		// loop keeps its baseline). It is a wait all the same (Waits): the
		// accept did not find its jobs at once.
		parks := res.groupWake == nil
		if parks {
			o.Group.park(1)
		} else {
			o.Group.noteWait()
		}
		again, err := q.acceptWait(ctx, res, deadline, &rewatch)
		if parks {
			o.Group.park(-1)
		}
		if !again {
			return nil, err
		}
		blind = nil
	}
}

// undoAcceptTimeout bounds undoAccept, which runs after its caller's
// context ended.
const undoAcceptTimeout = 10 * time.Second

// undoAccept gives back to pending, the attempt not counted, the jobs an
// accept under lock took if its claim is there: an attempt whose commit
// result was unknown committed after all. Its own errors are left: the
// jobs are then the activity monitor's, as those of a worker that died.
func (q *Queue) undoAccept(typ, lock string, claimMs int64) {
	ctx, cancel := context.WithTimeout(context.Background(), undoAcceptTimeout)
	defer cancel()
	_ = q.db.Transact(ctx, func(tx kv.Tx) error {
		claim, err := tx.Get(q.k.claim(claimMs, lock))
		if err != nil || claim == nil {
			return err
		}
		res, err := q.reclaim(tx, typ, lock, claim)
		if err != nil || len(res.leases) == 0 {
			return err
		}
		return q.Release(ctx, tx, res.leases)
	})
}

// maxZoneRounds bounds the accept transactions one Accept runs back to
// back while zones are left to read (acceptResult.moreZones).
const maxZoneRounds = 64

// cancel cancels the watches of res.
func (res *acceptResult) cancel() {
	if res.watch != nil {
		res.watch.Cancel()
	}
	for _, w := range res.limitWatches {
		w.Cancel()
	}
}

// withDefaults fills in the Max and Window that o leaves unset, and
// reports whether the caller fixed the window: one it did not is sized
// afresh before each read of an accept with a group, by what the group's
// other accepts hold.
func (o AcceptOptions) withDefaults() (AcceptOptions, bool) {
	if o.Max <= 0 {
		o.Max = 1
	}
	fixedWindow := o.Window > 0
	if !fixedWindow {
		o.Window = max(4*o.Max, DefaultWindow)
	}
	o.Window = min(max(o.Window, o.Max), MaxWindow)
	return o, fixedWindow
}

// acceptCommit runs one accept's transaction, every attempt of it under
// the same lock and claim key (see Accept). With a group, the jobs the
// current attempt picked are held there: an attempt that failed lets go of
// its picks before the retry picks again, and the accept lets go once its
// commit is done, whatever its outcome, so that the group's other accepts
// may pick those jobs (gone if it committed, free again if not).
func (q *Queue) acceptCommit(ctx context.Context, typ string, o AcceptOptions, lock string, claimMs int64, wait bool, blind []zone) (*acceptResult, error) {
	var held []heldJob
	res, err := kv.Transact(ctx, q.db, func(tx kv.Tx) (*acceptResult, error) {
		if o.Group != nil {
			o.Group.release(held)
			held = held[:0]
		}
		return q.acceptTx(tx, typ, o, lock, claimMs, wait, &held, blind)
	})
	if o.Group != nil {
		o.Group.release(held)
	}
	return res, err
}

// acceptWait blocks a waiting accept that found no job (res) until it
// should read again (true), or until its deadline (false, nil) or ctx
// (false, ctx's error) ends the wait, or its watch failed in a way that
// reading again would not mend (false and the error). It wakes when the
// group lets go of the jobs res found held, or else when the type's watch
// key changes or, with res.next, the next scheduled job is due. It cancels
// the watch on every way out except a watch that fired, which is done.
func (q *Queue) acceptWait(ctx context.Context, res *acceptResult, deadline <-chan time.Time, rewatch *watchRetry) (bool, error) {
	if res.groupWake != nil {
		// Every due job is held by another accept of the group, which
		// will commit (they are gone) or fail (they are free again):
		// look again when it lets go.
		select {
		case <-res.groupWake:
			return true, nil
		case <-deadline:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	if res.watch == nil {
		// A retry found the claim of an attempt that did commit, but
		// its jobs were taken from it meanwhile (canceled, removed):
		// there is nothing to return and no watch was set, so look
		// again under a new lock.
		return true, nil
	}
	limited, stopLimited := anyReady(res.limitWatches)
	defer stopLimited()
	var timer <-chan time.Time
	stopTimer := func() {}
	if res.next > 0 {
		t := time.NewTimer(timerMs(res.next - q.nowMs()))
		// Stopped before the backoff of a failed watch too, rather than
		// deferred to the return after it.
		timer, stopTimer = t.C, func() { t.Stop() }
	}
	select {
	case <-res.watch.Ready():
		stopTimer()
		if err := rewatch.after(ctx, res.watch, deadline); err != nil {
			if errors.Is(err, errWaitDeadline) {
				return false, nil
			}
			return false, err
		}
		return true, nil
	case <-limited:
		res.watch.Cancel()
	case <-timer:
		res.watch.Cancel()
	case <-deadline:
		stopTimer()
		res.watch.Cancel()
		return false, nil
	case <-ctx.Done():
		stopTimer()
		res.watch.Cancel()
		return false, ctx.Err()
	}
	stopTimer()
	return true, nil
}

// anyReady returns a channel closed once any of ws is ready, and a stop
// that cancels them all and must be called.
func anyReady(ws []kv.Watch) (<-chan struct{}, func()) {
	if len(ws) == 0 {
		return nil, func() {}
	}
	ready, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	for _, w := range ws {
		go func() {
			select {
			case <-w.Ready():
				once.Do(func() { close(ready) })
			case <-done:
			}
		}()
	}
	return ready, func() {
		close(done)
		for _, w := range ws {
			w.Cancel()
		}
	}
}

// MaxWindow bounds AcceptOptions.Window, and so the jobs one accept
// takes.
const MaxWindow = 1024

// timerMs is a wait of ms milliseconds for a timer: at least one, and at
// most what a time.Duration holds, so that a job scheduled centuries ahead
// does not overflow into a negative wait that fires at once.
func timerMs(ms int64) time.Duration {
	const most = int64(math.MaxInt64 / time.Millisecond)
	return time.Duration(min(max(ms, 1), most)) * time.Millisecond
}

// acceptTx is one attempt of an accept; with a group, it holds the jobs it
// picks there and appends them to held.
func (q *Queue) acceptTx(tx kv.Tx, typ string, o AcceptOptions, lock string, claimMs int64, wait bool, held *[]heldJob, blind []zone) (*acceptResult, error) {
	s, err := q.settings(tx, typ)
	if err != nil {
		return nil, err
	}
	claimKey := q.k.claim(claimMs, lock)
	if prev, err := tx.Get(claimKey); err != nil {
		return nil, err
	} else if prev != nil {
		return q.reclaim(tx, typ, lock, prev)
	}
	res := &acceptResult{}
	if s.Paused {
		if wait {
			res.watch = tx.Watch(q.k.watch(typ))
		}
		return res, nil
	}
	now := q.nowMs()
	maxSched := now
	if !o.MaxScheduledAt.IsZero() {
		maxSched = o.MaxScheduledAt.UnixMilli()
	}
	snap := tx.Snapshot()
	token := newStampToken()
	want := o.Max
	if s.MaxRunning > 0 {
		// Read with a conflict: every start and end of the type's jobs
		// changes it, so accepts that together would pass the bound
		// cannot both commit.
		running, nonzero, err := sumRange(tx, q.k.countRange(typ, Running))
		if err != nil {
			return nil, err
		}
		if want = min(want, s.MaxRunning-int(running)); want <= 0 {
			want, res.limitWatch = 0, nonzero
		}
	}
	var ids []string
	if want > 0 {
		var err error
		if ids, err = q.acceptZones(tx, snap, typ, lock, o, want, s, token, now, maxSched, wait, held, blind, res); err != nil {
			return nil, err
		}
	}
	if len(ids) > 0 {
		b, _ := json.Marshal(ids)
		tx.Set(claimKey, b)
		rv, err := tx.ReadVersion()
		if err != nil {
			return nil, err
		}
		q.stamp(tx, typ, rv, token)
	}
	if len(res.leases) > 0 || !wait || res.groupWake != nil {
		return res, nil
	}
	if o.MaxScheduledAt.IsZero() {
		// Only a bound that moves with the clock reaches a job later. A
		// job after a bound that was set never becomes acceptable to
		// this accept, and a timer for it would fire, find it still out
		// of reach and, once its time had passed, fire again at once.
		next, err := q.nextScheduled(snap, typ, now)
		if err != nil {
			return nil, err
		}
		res.next = earliest(res.next, next)
	}
	res.watch = tx.Watch(q.k.watch(typ))
	if res.watchChanges {
		res.limitWatch = append(res.limitWatch, q.k.change(typ))
	}
	// Held back by a bound: a running count that falls frees a start.
	for i, k := range res.limitWatch {
		if i == maxLimitWatches {
			res.next = earliest(res.next, now+limitRecheck.Milliseconds())
			break
		}
		res.limitWatches = append(res.limitWatches, tx.Watch(k))
	}
	return res, nil
}

// acceptZones takes up to want jobs for an accept from the type's zones
// with ready jobs (and the due entries of its scheduled index), appending
// them to res.leases, and returns their ids. It chooses up to
// maxZoneTries zones of different keys at random by the keys' weights
// (typeZones.choose), passing over the keys their bounds hold back, and
// gives each chosen key a share of want in proportion to its weight: the
// accept takes up to that many of the first entries of the key's zone,
// within what the key's bounds allow, and then, while it has fewer than
// want, more from the zones that had more. So every accept serves each
// key it chose, and a key with one job among keys with a backlog waits
// for the next accept, not for a lucky draw.
func (q *Queue) acceptZones(tx kv.Tx, snap kv.ReadTx, typ, lock string, o AcceptOptions, want int, s TypeSettings, token, now, maxSched int64,
	wait bool, held *[]heldJob, blind []zone, res *acceptResult) ([]string, error) {
	tz, current, err := q.zonesOf(snap, typ, s, false)
	if err != nil {
		return nil, err
	}
	skipKeys, skipZones := map[string]bool{}, map[zone]bool{}
	var only map[string]bool
	if o.Keys != nil {
		only = make(map[string]bool, len(o.Keys))
		for _, k := range o.Keys {
			only[k] = true
		}
	}
	for _, z := range blind {
		skipZones[z] = true
	}
	if len(blind) > 0 {
		res.watchChanges = true
	}
	allow := map[string]*keyAllowance{}
	var ids []string
	take := func(kz keyZones, inZone, withScheduled bool, upTo int) (bool, error) {
		first := len(res.leases)
		got, err := q.acceptFrom(tx, snap, typ, lock, o, min(want, upTo), s, token, now, maxSched, wait, held, res, kz, inZone, withScheduled, allow, skipKeys)
		ids = append(ids, got...)
		return len(res.leases)-first > 0 && len(res.leases) == min(want, upTo), err
	}
	for pass := 0; ; pass++ {
		plan, cur, err := q.planZones(tx, snap, typ, s, now, tz, current, only, skipKeys, skipZones, allow, res)
		if err != nil {
			return nil, err
		}
		if err := q.serveZones(plan, want, s, pass == 0 && only == nil, take, skipKeys, res); err != nil {
			return nil, err
		}
		if len(res.leases) > 0 || res.groupWake != nil {
			return ids, nil
		}
		if len(plan) == maxZoneTries {
			res.moreZones = true // zones are left that this transaction did not read
			return ids, nil
		}
		if cur || pass > 0 {
			// What it knew was current, or was read again: a part of a
			// larger index has others to read.
			res.moreZones = !cur
			return ids, nil
		}
		// What it knew of the zones was older than the watch key (or a
		// part of the index): read it again once, and serve the zones it
		// did not read yet.
		if tz, current, err = q.zonesOf(snap, typ, s, true); err != nil {
			return nil, err
		}
	}
}

// serveZones takes from the zones of plan (or, with none and
// withScheduled, from the scheduled index's due entries alone) up to want
// leases in all: each key its share of want by weight, then more from the
// zones that gave their whole share.
func (q *Queue) serveZones(plan []keyZones, want int, s TypeSettings, withScheduled bool,
	take func(kz keyZones, inZone, withScheduled bool, upTo int) (bool, error), skipKeys map[string]bool, res *acceptResult) error {
	if len(plan) == 0 {
		if !withScheduled {
			return nil
		}
		_, err := take(keyZones{}, false, true, want)
		return err
	}
	total := 0
	for _, z := range plan {
		total += s.policy(z.key).weight()
	}
	full := make([]bool, len(plan))
	for i, z := range plan {
		if len(res.leases) >= want || res.groupWake != nil {
			return nil
		}
		share := (want*s.policy(z.key).weight() + total - 1) / total
		var err error
		if full[i], err = take(z, true, withScheduled && i == 0, len(res.leases)+share); err != nil {
			return err
		}
	}
	for i, z := range plan {
		if len(res.leases) >= want || res.groupWake != nil {
			return nil
		}
		if full[i] && !skipKeys[z.key] {
			if _, err := take(z, true, false, want); err != nil {
				return err
			}
		}
	}
	return nil
}

// planZones chooses the keys an accept reads: up to maxZoneTries, by the
// keys' weights, passing over the keys held back by their bounds (read
// with conflicts into allow) and reading the zone index again when what
// is known of it (tz) is not current and gives no zone. Of a key spread
// over more than one zone it reads every zone marked in the snapshot
// (markedShards); of a key in one zone, that zone.
func (q *Queue) planZones(tx kv.Tx, snap kv.ReadTx, typ string, s TypeSettings, now int64, tz *typeZones, current bool,
	only, skipKeys map[string]bool, skipZones map[zone]bool, allow map[string]*keyAllowance, res *acceptResult) ([]keyZones, bool, error) {
	chosen := map[string]bool{}
	skip := func(key string) bool { return skipKeys[key] || chosen[key] || only != nil && !only[key] }
	var plan []keyZones
	keyReads, reads, markReads := 0, 0, 0
	for len(plan) < maxZoneTries {
		z, ok := tz.choose(q.intn, skip, skipZones)
		if !ok {
			if current || len(plan) > 0 {
				break
			}
			if reads++; reads > maxZoneParts {
				res.moreZones = true // parts of a large index are left to read
				break
			}
			// What is known of the zones is older than the watch key:
			// read the index again before concluding there is nothing.
			var err error
			if tz, current, err = q.zonesOf(snap, typ, s, true); err != nil {
				return nil, false, err
			}
			continue
		}
		if z.key != "" && allow[z.key] == nil && s.policy(z.key).limited() {
			if keyReads++; keyReads > maxKeyReads {
				res.next = earliest(res.next, now+limitRecheck.Milliseconds())
				break
			}
			a, err := q.allowance(tx, typ, z.key, s.policy(z.key), now)
			if err != nil {
				return nil, false, err
			}
			allow[z.key] = a
			if a.left == 0 {
				q.heldBack(z.key, a, skipKeys, res)
				continue
			}
		}
		chosen[z.key] = true
		kz := keyZones{key: z.key, shards: []int{z.shard}}
		if current && len(tz.of[z.key]) > 1 {
			// The index as read is current: no zone was marked since, so
			// the key's zones with ready entries are among those it
			// holds (one emptied since is found so).
			kz.shards = nil
			for _, sh := range tz.of[z.key] {
				if !skipZones[zone{key: z.key, shard: sh}] {
					kz.shards = append(kz.shards, sh)
				}
			}
		} else if !current && (s.zonesOf(z.key) > 1 || len(tz.of[z.key]) > 1) {
			if markReads++; markReads > maxKeyReads {
				res.next = earliest(res.next, now+limitRecheck.Milliseconds())
				break
			}
			var err error
			if kz.shards, err = q.markedShards(snap, typ, z.key, skipZones); err != nil {
				return nil, false, err
			}
			if len(kz.shards) == 0 {
				// Emptied since the zone index was read.
				continue
			}
		}
		for _, z := range kz.zones() {
			skipZones[z] = true
		}
		plan = append(plan, kz)
	}
	return plan, current, nil
}

// maxKeyReads bounds the fairness keys whose bounds one accept
// transaction reads, and maxZoneParts the parts of a large zone index it
// reads (zonesOf).
const (
	maxKeyReads  = 64
	maxZoneParts = 4
)

// heldBack records that key is held back by its bounds (a).
func (q *Queue) heldBack(key string, a *keyAllowance, skipKeys map[string]bool, res *acceptResult) {
	skipKeys[key] = true
	res.limitWatch = append(res.limitWatch, a.watch...)
	if a.until > 0 {
		res.next = earliest(res.next, a.until)
	}
}

// acceptFrom reads the zones of kz (with inZone) and, withScheduled, the
// due entries of the scheduled index, and takes from them what the keys'
// bounds allow, up to want leases in all. A zone found empty has its
// mark cleared, with a read conflict on its range: an add to it that
// commits meanwhile fails this commit, and one after it marks the zone
// again.
func (q *Queue) acceptFrom(tx kv.Tx, snap kv.ReadTx, typ, lock string, o AcceptOptions, want int, s TypeSettings, token, now, maxSched int64,
	wait bool, held *[]heldJob, res *acceptResult, kz keyZones, inZone, withScheduled bool, allow map[string]*keyAllowance, skipKeys map[string]bool) ([]string, error) {
	// want counts the leases the accept took of other keys already; the
	// key's zones need to give the rest.
	w, err := q.acceptWindow(snap, typ, kz, inZone, withScheduled, now, maxSched, o.Window, want-len(res.leases))
	if err != nil {
		return nil, err
	}
	res.promote = res.promote || w.promote
	res.demote = append(res.demote, w.demote...)
	res.next = earliest(res.next, w.next)
	for _, z := range w.empty {
		tx.AddReadConflictRange(q.k.zoneReady(typ, z).Range())
		tx.Clear(q.k.zoneMark(typ, z))
		q.zones.forget(typ)
	}
	if len(w.cands) == 0 && len(w.blind) > 0 {
		// The zones have jobs this accept cannot take (scheduled after
		// its bound, or unreadable; entries not due yet are moved
		// instead): an add to one marks nothing, so only the type's
		// change key tells of one it could take. The Accept's next
		// rounds pass over them until that key moves.
		res.watchChanges = true
		res.blind = append(res.blind, w.blind...)
	}
	cands, err := q.allowed(tx, typ, s, w.cands, allow, skipKeys, now, res)
	if err != nil || len(cands) == 0 {
		return nil, err
	}
	oz := o
	oz.Max = want
	first := len(res.leases)
	clear(res.took)
	ids, err := q.takePicks(tx, typ, lock, oz, s, token, now, wait, cands, held, res)
	if err != nil {
		return nil, err
	}
	for z, n := range w.whole {
		if res.took[z] == n {
			// Emptied by this accept: its mark goes, as that of a zone
			// found empty does, so that the zone's next job marks it
			// again (a new token, a bump of the watch key) and is seen
			// as newly ready (ReadyZones.Fresh).
			tx.AddReadConflictRange(q.k.zoneReady(typ, z).Range())
			tx.Clear(q.k.zoneMark(typ, z))
			q.zones.forget(typ)
		}
	}
	q.countStarts(tx, typ, res.leases[first:], allow, skipKeys)
	return ids, nil
}

// takePicks takes jobs of the window's candidates, in index order,
// under lock and stamp token: up to o.Max, appended to res.leases. It
// returns the ids it took, for the accept's claim.
//
// It picks Max at random from the window, then keeps index order among the
// picked ones. Only the picked jobs get read conflicts, so acceptors
// conflict only when they pick the same job. A picked job that cannot be
// taken (its record does not decode) is passed over, and another is picked
// in its place from the candidates not tried yet; res.again then says so.
// With a group, the jobs picked are held there and appended to held; when
// the group holds every candidate and the accept has taken none, a waiting
// accept (wait) gets in res.groupWake the channel to wait on instead of a
// watch.
func (q *Queue) takePicks(tx kv.Tx, typ, lock string, o AcceptOptions, s TypeSettings, token, now int64, wait bool,
	window []candidate, held *[]heldJob, res *acceptResult) ([]string, error) {
	left := window
	var picked []candidate
	first := len(res.leases)
	ids := make([]string, 0, o.Max-first)
	for len(res.leases) < o.Max && len(left) > 0 {
		cands, need := left[:min(len(left), o.Window)], o.Max-len(res.leases)
		if o.Group != nil {
			var wake <-chan struct{}
			cands, *held, wake = o.Group.pick(q.intn, typ, cands, need, *held)
			if len(cands) == 0 {
				if wait && len(res.leases) == 0 {
					res.groupWake = wake
				}
				break
			}
		} else if len(cands) > need {
			cands = pick(q.intn, cands, need)
		}
		skipped := 0
		for _, c := range cands {
			l, err := q.take(tx, typ, c, lock, token, now, s)
			if err != nil {
				if !errors.Is(err, errUnreadable) {
					return nil, err
				}
				skipped++
				continue
			}
			if l == nil {
				continue
			}
			res.leases = append(res.leases, l)
			picked = append(picked, c)
			if bytes.Equal(c.entry, c.key) { // an entry of the ready index
				if res.took == nil {
					res.took = map[zone]int{}
				}
				res.took[c.zone]++
			}
			ids = append(ids, c.id)
		}
		if skipped == 0 {
			break
		}
		res.again = true
		tried := make(map[string]bool, len(cands))
		for _, c := range cands {
			tried[c.id] = true
		}
		left = slices.DeleteFunc(slices.Clone(left), func(c candidate) bool { return tried[c.id] })
	}
	if res.again && len(res.leases)-first > 1 {
		// Replacements were picked after the first picks: back to index
		// order.
		sort.Sort(byOrder{picked, res.leases[first:]})
	}
	return ids, nil
}

// errUnreadable marks a pending job that an accept cannot take: its
// record, or the copy of it in its entry, does not decode, or it cannot be
// stored again.
var errUnreadable = errors.New("fdbq: pending job cannot be taken")

// take makes candidate c running under lock, or returns nil when its
// record is no longer pending, or an error wrapping errUnreadable when it
// cannot be taken.
func (q *Queue) take(tx kv.Tx, typ string, c candidate, lock string, token, now int64, s TypeSettings) (*Lease, error) {
	// The read conflict is on the job's record, which changes whenever
	// the job does; an accept's move of its entry to the other index,
	// which leaves the record as it is, has a write conflict on it.
	jobKey := q.k.job(typ, c.id)
	var rec *record
	var err error
	if len(c.record) > 0 {
		// The entry's copy is the record as of this snapshot (both are
		// written together); a read conflict on the record key makes any
		// later change to it fail this commit, as reading it would.
		tx.AddReadConflictKey(jobKey)
		rec, err = decodeRecord(c.record, typ, c.id)
	} else {
		var b []byte
		if b, err = tx.Get(jobKey); err != nil {
			return nil, err
		}
		if b != nil {
			rec, err = decodeRecord(b, typ, c.id)
		}
	}
	if err != nil {
		return nil, q.unreadableJob(typ, c.entry, c.record, err)
	}
	if rec == nil || rec.State != Pending {
		// The index and the record change together, so this is a record
		// written after our snapshot; the read conflict on it makes the
		// commit fail and the retry see the truth.
		return nil, nil
	}
	next := *rec
	next.State = Running
	next.Lock = lock
	next.Attempts++
	next.StartedAt, next.HeartbeatAt = now, now
	next.ExpiresAt = now + s.ActivityTimeout.Milliseconds()
	next.renew, next.stampToken = true, token // acceptTx stamps once
	next.Error = ""
	// A new lock: an exit recorded by an earlier lock must not let that
	// lock's late retries pass as idempotent replays.
	next.LastLock = ""
	// putFrom encodes the record before it writes anything, so a record
	// it refuses leaves the transaction as it was.
	if err := q.putFrom(tx, typ, c.id, rec, &next, c.entry); err != nil {
		if !jobProblem(err) {
			return nil, err // the store's (a read version it could not get)
		}
		return nil, q.unreadableJob(typ, c.entry, c.record, err)
	}
	return &Lease{Job: *next.job(typ, c.id), Lock: lock}, nil
}

// byOrder sorts leases by the order of their candidates.
type byOrder struct {
	cands  []candidate
	leases []*Lease
}

func (b byOrder) Len() int           { return len(b.cands) }
func (b byOrder) Less(i, j int) bool { return compareCandidates(b.cands[i], b.cands[j]) < 0 }
func (b byOrder) Swap(i, j int) {
	b.cands[i], b.cands[j] = b.cands[j], b.cands[i]
	b.leases[i], b.leases[j] = b.leases[j], b.leases[i]
}

// compareCandidates orders candidates as one zone's ready index does:
// higher priority first, then earlier scheduled time, then by id. Within
// a zone it is the order of their keys; it orders the candidates of a
// key's zones, merged, the same way.
func compareCandidates(a, b candidate) int {
	if a.priority != b.priority {
		return cmp.Compare(b.priority, a.priority)
	}
	if a.sched != b.sched {
		return cmp.Compare(a.sched, b.sched)
	}
	return strings.Compare(a.id, b.id)
}

// reclaim returns the jobs an earlier attempt of this accept took, when
// that attempt committed although its commit reported an unknown result.
func (q *Queue) reclaim(tx kv.Tx, typ, lock string, claim []byte) (*acceptResult, error) {
	var ids []string
	if err := json.Unmarshal(claim, &ids); err != nil {
		return nil, fmt.Errorf("fdbq: corrupt claim %s: %w", lock, err)
	}
	res := &acceptResult{}
	for _, id := range ids {
		rec, err := q.load(tx, typ, id)
		if err != nil {
			return nil, err
		}
		if rec != nil && rec.State == Running && rec.Lock == lock {
			res.leases = append(res.leases, &Lease{Job: *rec.job(typ, id), Lock: lock})
		}
	}
	return res, nil
}

// pick chooses max candidates: whole priority bands from the highest
// while they fit, then a random choice within the band that does not, so
// that priority order is strict and only the order within a band is
// loosened. The result is in index order.
func pick(intn func(int) int, cands []candidate, max int) []candidate {
	out := make([]candidate, 0, max)
	for i := 0; i < len(cands) && len(out) < max; {
		j := i
		for j < len(cands) && cands[j].priority == cands[i].priority {
			j++
		}
		band := cands[i:j]
		if need := max - len(out); len(band) > need {
			out = sample(intn, out, band, need)
		} else {
			out = append(out, band...)
		}
		i = j
	}
	return out
}

// sample appends k of band's candidates to out, each k-subset equally
// likely, in band's order: selection sampling (Knuth's Algorithm S) takes
// each candidate with probability (still needed)/(still left), one pass
// and no sort. Shuffling and sorting the chosen ones back into index order
// cost more than the rest of an accept of 256 jobs from a window of 1024.
func sample(intn func(int) int, out, band []candidate, k int) []candidate {
	for i := 0; k > 0; i++ {
		if left := len(band) - i; intn(left) < k {
			out = append(out, band[i])
			k--
		}
	}
	return out
}

type candidate struct {
	// key is the job's key in the ready index, where it is, or would be:
	// candidates are ordered by it.
	key      []byte
	zone     zone
	priority int
	sched    int64
	id       string
	record   []byte // the record's copy in the entry; empty if not copied
	// entry is the key the job was read under, in the ready or the
	// scheduled index.
	entry []byte
}

// parsePending reads a ready index entry's key: the fast path of keys, or
// the tuple layer for a key it does not read (which it then checks).
func (q *Queue) parsePending(typ string, key []byte) (z zone, negPriority, schedMs int64, id string, err error) {
	if z, n, s, id, ok := q.k.parsePending(typ, key); ok {
		return z, n, s, id, nil
	}
	t, err := q.k.pendingType(typ).Unpack(key)
	if err == nil {
		if z, ok := tupleZone(t, 0); ok && len(t) == 5 {
			n, ok1 := t[2].(int64)
			s, ok2 := t[3].(int64)
			id, ok3 := t[4].(string)
			if ok1 && ok2 && ok3 {
				return z, n, s, id, nil
			}
		}
	}
	return zone{}, 0, 0, "", fmt.Errorf("fdbq: malformed pending entry %q", key)
}

// parseScheduled is parsePending for a scheduled index entry's key.
func (q *Queue) parseScheduled(typ string, key []byte) (z zone, negPriority, schedMs int64, id string, err error) {
	if z, n, s, id, ok := q.k.parseScheduled(typ, key); ok {
		return z, n, s, id, nil
	}
	t, err := q.k.scheduledType(typ).Unpack(key)
	if err == nil {
		if z, ok := tupleZone(t, 2); ok && len(t) == 5 {
			s, ok1 := t[0].(int64)
			n, ok2 := t[1].(int64)
			id, ok3 := t[4].(string)
			if ok1 && ok2 && ok3 {
				return z, n, s, id, nil
			}
		}
	}
	return zone{}, 0, 0, "", fmt.Errorf("fdbq: malformed scheduled entry %q", key)
}

// tupleZone reads a zone from t's elements at and after i.
func tupleZone(t tuple.Tuple, i int) (zone, bool) {
	if len(t) < i+2 {
		return zone{}, false
	}
	key, ok1 := t[i].(string)
	shard, ok2 := t[i+1].(int64)
	if !ok1 || !ok2 || shard < 0 || shard >= MaxZones {
		return zone{}, false
	}
	return zone{key: key, shard: int(shard)}, true
}

// acceptWindowRead is what an accept read of a type's two indexes.
type acceptWindowRead struct {
	// cands are the jobs the accept may take, in ready index order.
	cands []candidate
	// next is the earliest scheduled time after now among the ready
	// index's entries read (0: none).
	next int64
	// promote: the scheduled index has at least as many due entries as
	// the accept read of it.
	promote bool
	// demote are the zones read whose entries include some not yet due.
	demote []zone
	// empty are the zones read whose range of the ready index has no
	// entry; blind those with entries, none of them due or demoted, when
	// the read gave no candidate.
	empty, blind []zone
	// whole are the zones read to their end by their first read, with
	// the entries that read found: an accept that takes them all empties
	// the zone.
	whole map[zone]int
}

// shardWindow is how many entries of each of a key's n zones an accept
// reads first to merge them into a window (mergeZones). The ids' hashes
// spread a key's jobs evenly over its zones, so each zone holds about
// window/n of the key's first window entries; the cut falls at the zone
// whose entries run out first, so each reads half as many again (and 2
// more), and the cut leaves about a window before it without a second
// read.
func shardWindow(window, n int) int {
	if n <= 1 {
		return window
	}
	return min(window, (3*window+2*n-1)/(2*n)+2)
}

// scheduledWindow is how many of the scheduled index's due entries an
// accept with the given window reads, and a move promotes.
func scheduledWindow(window int) int { return max(window, DefaultWindow) }

// acceptWindow reads, without conflicts, the jobs an accept may take: the
// first window entries of zone z's range of the ready index (the jobs
// that were due when indexed, by priority) that are scheduled by maxSched
// (with inZone), merged, withScheduled, with the first entries of the
// scheduled index (by scheduled time) that are due by now or scheduled by
// maxSched. A fixed number of range reads, each of a bounded number of
// keys, however many priorities and scheduled times the type's jobs
// have. Entries known to be unreadable are passed over, and each read
// takes as many more keys as there are of them.
//
// Of a key spread over zones (kz holds more than one), it reads the first
// entries of each zone (shardWindow) and merges them in ready index
// order (compareCandidates), cut after the least of the last entries of
// the zones read in full: every entry before the cut was read, so the
// candidates are the first of the key's entries across its zones,
// exactly as one zone's first entries are.
func (q *Queue) acceptWindow(snap kv.ReadTx, typ string, kz keyZones, inZone, withScheduled bool, now, maxSched int64, window, need int) (*acceptWindowRead, error) {
	w := &acceptWindowRead{}
	known := q.unreadable.count(typ)
	if inZone {
		if err := q.mergeZones(snap, typ, kz, now, maxSched, window, need, known, w); err != nil {
			return nil, err
		}
	}
	if !withScheduled {
		if inZone && len(w.cands) == 0 {
			w.blind = nonemptyOf(kz, w)
		}
		return w, nil
	}
	limit := scheduledWindow(window) + known
	due := rangeUpTo(q.k.scheduledType(typ), max(now, maxSched))
	kvs, err := snap.GetRange(due, kv.RangeOptions{Limit: limit})
	if err != nil {
		return nil, err
	}
	if known > 0 {
		q.unreadable.prune(typ, due, kvs, limit)
	}
	merged := false
	for _, e := range kvs {
		if known > 0 && q.unreadable.known(typ, e.Key, e.Value, q.now()) {
			continue
		}
		ez, neg, sched, id, err := q.parseScheduled(typ, e.Key)
		if err != nil {
			_ = q.unreadableJob(typ, e.Key, e.Value, err)
			continue
		}
		if sched > maxSched {
			continue
		}
		key := q.k.pending(typ, ez, int(-neg), sched, id)
		w.cands = append(w.cands, candidate{key: key, zone: ez, priority: int(-neg), sched: sched, id: id, record: e.Value, entry: e.Key})
		merged = true
	}
	if len(kvs) == limit {
		if _, _, sched, _, err := q.parseScheduled(typ, kvs[len(kvs)-1].Key); err == nil && sched <= now {
			w.promote = true
		}
	}
	if merged {
		slices.SortStableFunc(w.cands, compareCandidates)
	}
	if inZone && len(w.cands) == 0 {
		w.blind = nonemptyOf(kz, w)
	}
	return w, nil
}

// mergeZones reads into w the first entries of the zones of kz: of one
// zone, its first window; of more, the first entries of each
// (shardWindow), merged in ready index order and cut after the least of
// the last entries of the zones read as far as the read's limit. While
// fewer than need (the jobs the accept takes of the key) are left before
// the cut, it reads the zones read that far on, doubling what it read of
// each, up to window entries each, so that at least window entries come
// before the cut. So a key's zones give
// an accept its jobs in the order one zone would, at about the window's
// keys read, mostly, and the accept picks among at least need.
func (q *Queue) mergeZones(snap kv.ReadTx, typ string, kz keyZones, now, maxSched int64, window, need, known int, w *acceptWindowRead) error {
	if len(kz.shards) == 1 {
		_, _, err := q.readyWindow(snap, typ, kz.zones()[0], nil, now, maxSched, window, known, w)
		return err
	}
	type read struct {
		z    zone
		last *candidate // the last entry that parses, of a read as far as its limit
		key  []byte     // the last key read, of a read as far as its limit
	}
	var open []read // the zones read as far as the limit
	limit := shardWindow(window, len(kz.shards))
	for _, z := range kz.zones() {
		last, key, err := q.readyWindow(snap, typ, z, nil, now, maxSched, limit, known, w)
		if err != nil {
			return err
		}
		if key != nil {
			open = append(open, read{z, last, key})
		}
	}
	cutOf := func() *candidate {
		var cut *candidate
		for _, r := range open {
			if r.last != nil && (cut == nil || compareCandidates(*r.last, *cut) < 0) {
				cut = r.last
			}
		}
		return cut
	}
	before := func(cut *candidate) int {
		if cut == nil {
			return len(w.cands)
		}
		n := 0
		for _, c := range w.cands {
			if compareCandidates(c, *cut) <= 0 {
				n++
			}
		}
		return n
	}
	// Each further read of the zones read as far as their limit doubles
	// what was read of them, up to window entries each: then at least a
	// window's entries lie before the cut.
	for got := limit; got < window; {
		cut := cutOf()
		if cut == nil || before(cut) >= need {
			break
		}
		chunk := min(got, window-got)
		more := open[:0:0]
		for _, r := range open {
			last, key, err := q.readyWindow(snap, typ, r.z, kv.KeyAfter(r.key), now, maxSched, chunk, known, w)
			if err != nil {
				return err
			}
			if key != nil {
				more = append(more, read{r.z, cmp.Or(last, r.last), key})
			}
		}
		open = more
		got += chunk
	}
	slices.SortFunc(w.cands, compareCandidates)
	if cut := cutOf(); cut != nil {
		w.cands = slices.DeleteFunc(w.cands, func(c candidate) bool { return compareCandidates(c, *cut) > 0 })
	}
	return nil
}

// nonemptyOf lists the zones of kz that w found neither empty nor with
// entries to demote.
func nonemptyOf(kz keyZones, w *acceptWindowRead) []zone {
	var out []zone
	for _, z := range kz.zones() {
		if !slices.Contains(w.empty, z) && !slices.Contains(w.demote, z) {
			out = append(out, z)
		}
	}
	return out
}

// readyWindow reads the first window entries of zone z's range of the
// ready index (from begin; nil: from its start) into w; a zone it finds
// empty joins w.empty. When it read as many keys as it may, it returns
// the last of them, and the last of them that parses (nil: none does):
// entries after that key are unread.
func (q *Queue) readyWindow(snap kv.ReadTx, typ string, z zone, begin []byte, now, maxSched int64, window, known int, w *acceptWindowRead) (*candidate, []byte, error) {
	ready := q.k.zoneReady(typ, z).Range()
	if begin != nil {
		ready.Begin = begin
	}
	kvs, err := snap.GetRange(ready, kv.RangeOptions{Limit: window + known})
	if err != nil {
		return nil, nil, err
	}
	if len(kvs) == 0 && begin == nil {
		w.empty = append(w.empty, z)
	}
	if len(kvs) > 0 && begin == nil && len(kvs) < window+known {
		if w.whole == nil {
			w.whole = map[zone]int{}
		}
		w.whole[z] = len(kvs)
	}
	demote := false
	defer func() {
		if demote && !slices.Contains(w.demote, z) {
			w.demote = append(w.demote, z)
		}
	}()
	if known > 0 {
		q.unreadable.prune(typ, ready, kvs, window+known)
	}
	for _, e := range kvs {
		if known > 0 && q.unreadable.known(typ, e.Key, e.Value, q.now()) {
			continue
		}
		ez, neg, sched, id, err := q.parsePending(typ, e.Key)
		if err != nil {
			_ = q.unreadableJob(typ, e.Key, e.Value, err)
			continue
		}
		if sched > now {
			// Indexed as due by a clock ahead of this one, or by a
			// version that kept every pending job in this index.
			demote = true
			w.next = earliest(w.next, sched)
		}
		if sched > maxSched {
			continue
		}
		w.cands = append(w.cands, candidate{key: e.Key, zone: ez, priority: int(-neg), sched: sched, id: id, record: e.Value, entry: e.Key})
	}
	if len(kvs) < window+known {
		return nil, nil, nil
	}
	lastKey := kvs[len(kvs)-1].Key
	for i := len(kvs) - 1; i >= 0; i-- {
		if _, neg, sched, id, err := q.parsePending(typ, kvs[i].Key); err == nil {
			return &candidate{priority: int(-neg), sched: sched, id: id}, lastKey, nil
		}
	}
	return nil, lastKey, nil
}

// nextScheduled returns the scheduled time of the type's earliest entry in
// the scheduled index that is not due by now (0: none).
func (q *Queue) nextScheduled(snap kv.ReadTx, typ string, now int64) (int64, error) {
	sub := q.k.scheduledType(typ)
	r := kv.Range{Begin: rangeUpTo(sub, now).End, End: sub.Range().End}
	kvs, err := snap.GetRange(r, kv.RangeOptions{Limit: 1 + q.unreadable.count(typ)})
	if err != nil {
		return 0, err
	}
	for _, e := range kvs {
		if _, _, sched, _, err := q.parseScheduled(typ, e.Key); err == nil {
			return sched, nil
		}
	}
	return 0, nil
}

// earliest is the earlier of two scheduled times, 0 being none.
func earliest(a, b int64) int64 {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// moveEntries puts the entries an accept found in the wrong index into the
// right one, in a transaction of its own: with promote, the first of the
// scheduled index's entries that are now due go to the ready index; with
// demote, the entries among the ready index's first that are not due yet
// go to the scheduled index. It returns how many it demoted.
//
// A move rewrites the entry, with its copy of the record, under its other
// key, and leaves the record as it is. The entry was read in this
// transaction's snapshot, so the record was then pending under it (they
// change together); a read conflict on the record fails the move if the
// job changed since, and the retry reads the entry again. The move also
// has a write conflict on the record, so that an accept that takes the
// job from the entry the move cleared (it has a read conflict on the
// record) fails if the move committed in between, and two moves of one
// entry do not both commit. The entries moved are the first of their index, so
// the deletions they leave are where a store like Pebble, which steps over
// deleted keys until it compacts them, starts its scans and can skip them
// (the embedded store's skip cache).
func (q *Queue) moveEntries(ctx context.Context, typ string, promote bool, demote []zone, window int) (int, error) {
	return kv.Transact(ctx, q.db, func(tx kv.Tx) (int, error) {
		now := q.nowMs()
		snap := tx.Snapshot()
		known := q.unreadable.count(typ)
		limit := scheduledWindow(window) + known
		marks := &zoneMarks{} // of this attempt
		// An entry known to be unreadable stays where it is, so that it
		// is known under its key.
		skip := func(e kv.KeyValue) bool {
			return known > 0 && q.unreadable.known(typ, e.Key, e.Value, q.now())
		}
		if promote {
			kvs, err := snap.GetRange(rangeUpTo(q.k.scheduledType(typ), now), kv.RangeOptions{Limit: limit})
			if err != nil {
				return 0, err
			}
			for _, e := range kvs {
				z, neg, sched, id, err := q.parseScheduled(typ, e.Key)
				if err != nil || skip(e) {
					continue
				}
				moved(tx, q.k.job(typ, id))
				tx.Clear(e.Key)
				tx.Set(q.k.pending(typ, z, int(-neg), sched, id), e.Value)
				if err := q.markZone(tx, typ, z, marks); err != nil {
					return 0, err
				}
			}
		}
		demoted := 0
		for _, z := range demote {
			kvs, err := snap.GetRange(q.k.zoneReady(typ, z).Range(), kv.RangeOptions{Limit: limit})
			if err != nil {
				return 0, err
			}
			for _, e := range kvs {
				z, neg, sched, id, err := q.parsePending(typ, e.Key)
				if err != nil || sched <= now || skip(e) {
					continue
				}
				moved(tx, q.k.job(typ, id))
				tx.Clear(e.Key)
				tx.Set(q.k.scheduled(typ, z, int(-neg), sched, id), e.Value)
				marks.bump(tx, q.k.watch(typ))
				demoted++
			}
		}
		return demoted, nil
	})
}

// moved gives a move of a job's entry its conflicts on the job's record.
func moved(tx kv.Tx, jobKey []byte) {
	tx.AddReadConflictKey(jobKey)
	tx.AddWriteConflictKey(jobKey)
}

// unreadableJob records a pending entry an accept cannot take, logs it the
// first time, and returns err marked as errUnreadable.
func (q *Queue) unreadableJob(typ string, key, value []byte, err error) error {
	if q.unreadable.add(typ, key, value, q.now()) {
		q.logger().Warn("fdbq: accept skips a pending job it cannot take; the job stays pending",
			"type", typ, "entry", fmt.Sprintf("%q", key), "err", err)
	}
	return fmt.Errorf("%w: %w", errUnreadable, err)
}

// unreadableJobs remembers the pending entries that accepts found they
// cannot take, each with a hash of its value and when it was found, so
// that each is logged once and later accepts pass over it without giving
// it a place of their window. An entry whose value changed is tried again,
// and so, after unreadableRetry, is one without a copy of its record,
// since the record, stored apart, may have been mended.
type unreadableJobs struct {
	mu     sync.Mutex
	byType map[string]map[string]unreadableEntry
	n      int
}

type unreadableEntry struct {
	hash  uint64
	found time.Time
}

// maxUnreadable bounds what unreadableJobs holds; beyond it, it starts
// afresh (and logs again what it meets again).
const maxUnreadable = 1024

// unreadableRetry is how long an entry without a copy is passed over.
const unreadableRetry = time.Minute

func hashValue(v []byte) uint64 {
	h := fnv.New64a()
	h.Write(v)
	return h.Sum64()
}

// count is how many entries of typ are known.
func (u *unreadableJobs) count(typ string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.byType[typ])
}

// known says whether an accept passes over the entry key with value.
func (u *unreadableJobs) known(typ string, key, value []byte, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	m := u.byType[typ]
	if len(m) == 0 {
		return false
	}
	e, ok := m[string(key)]
	if !ok || e.hash != hashValue(value) {
		return false
	}
	return len(value) > 0 || now.Sub(e.found) < unreadableRetry
}

// add records the entry key with value and reports whether it is new (or
// its value changed).
func (u *unreadableJobs) add(typ string, key, value []byte, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	h := hashValue(value)
	if e, ok := u.byType[typ][string(key)]; ok && e.hash == h {
		u.byType[typ][string(key)] = unreadableEntry{h, now}
		return false
	}
	if u.n >= maxUnreadable {
		u.byType, u.n = nil, 0
	}
	if u.byType == nil {
		u.byType = map[string]map[string]unreadableEntry{}
	}
	m := u.byType[typ]
	if m == nil {
		m = map[string]unreadableEntry{}
		u.byType[typ] = m
	}
	if _, ok := m[string(key)]; !ok {
		u.n++
	}
	m[string(key)] = unreadableEntry{h, now}
	return true
}

// prune forgets the known entries of typ in r that a read of r with limit
// returned kvs, and so shows gone.
func (u *unreadableJobs) prune(typ string, r kv.Range, kvs []kv.KeyValue, limit int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	m := u.byType[typ]
	if len(m) == 0 {
		return
	}
	end := r.End
	if len(kvs) == limit && limit > 0 {
		end = kv.KeyAfter(kvs[len(kvs)-1].Key)
	}
	for k := range m {
		if k < string(r.Begin) || k >= string(end) {
			continue
		}
		i := sort.Search(len(kvs), func(i int) bool { return string(kvs[i].Key) >= k })
		if i == len(kvs) || string(kvs[i].Key) != k {
			delete(m, k)
			u.n--
		}
	}
}
