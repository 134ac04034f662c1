package fdbq

import (
	"context"
	"crypto/sha256"
	"errors"
	"reflect"
	"sync"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// DefaultWaitWatches is Options.WaitWatches when it is zero: a tenth of
// FoundationDB's default limit of 10,000 watches a client, so a process
// keeps room for its acceptors, its monitor and the watches of other
// queues over the same database.
const DefaultWaitWatches = 1000

// maxJobWatchesPerWait is the most jobs one Wait watches one by one; with
// more left to wait for, it watches the type's change key instead (one
// watch, however many jobs).
const maxJobWatchesPerWait = 32

// refusalHold is how long a queue, once the store refused one of its job
// watches (too_many_watches), keeps to the number of job watches it held
// then.
const refusalHold = 30 * time.Second

// The waits of one Queue share their watches. A Wait watches the records
// of the jobs it waits for: every change to a job rewrites its record or
// clears it (put and drop), so the record's value differs from what the
// Wait read exactly when the job changed. Waits on one job share one store
// watch; past the queue's budget (Options.WaitWatches), or for more than
// maxJobWatchesPerWait jobs, or after the store refused a job watch, a
// Wait watches its type's change key, bumped by every change to a job of
// the type, and shares that watch too.
//
// Sharing misses no change. FoundationDB defines a watch by the value its
// transaction saw: it fires some time after the key's value no longer
// matches that value (developer guide, "Watches"; the wiki's "An Overview
// how Watches Work"); kv.Tx.Watch is the same on every backend. A Wait
// reads the key in its transaction and joins a shared watch only if the
// watch started from the very value it read (compared by SHA-256 digest),
// whatever the order of the two transactions' read versions:
//
//   - Every later change that makes the value differ from what the Wait
//     read makes it differ from what the watch started from, which is the
//     same value, so the watch fires for it as a watch of the Wait's own
//     would have.
//   - A change between the two read versions either left the value as the
//     Wait read it (the Wait's condition depends on the value alone, so
//     there is nothing to wake it for) or did not, and then the watch has
//     fired or will: the Wait wakes and reads again, a spurious wake, not
//     a missed one.
//   - A watch that has fired or failed is not joined: the Wait makes a
//     new one in its own transaction, as an unshared Wait does.
//
// When the values differ, the read versions of the two transactions
// order the two reads. A Wait that read later makes its own watch in its
// transaction, which becomes the key's shared watch (the old one stays
// with the Waits that hold it until it fires or they let go). A Wait that
// read earlier has missed a change since, and reads again at once, as its
// own watch would have had it do. Equal read versions are one snapshot,
// so the values are equal too.
//
// The only change a watch can miss is one whose value is back to the
// watched value by the time the store compares (A→B→A); job records never
// repeat a value (each add and accept stores a fresh token, each change a
// new time), and a change counter only grows.
type watchShare struct {
	mu    sync.Mutex
	limit int
	byKey map[string]*sharedWatch
	// jobs counts the job watches made or being made and not yet released
	// (also those replaced in byKey but still held), refusedJobs those of
	// them the store refused.
	jobs, refusedJobs int
	// Until capUntil, job watches are made only while jobs < capAt: the
	// number of job watches the store had accepted when it refused one.
	capAt    int
	capUntil time.Time
	// freed, when not nil, is closed when a watch is released: a Wait
	// whose type watch the store refused waits for it (or its backoff).
	freed chan struct{}
}

// sharedWatch is one store watch and the Waits that hold it.
type sharedWatch struct {
	key     string
	job     bool   // a job record's key (counted in jobs), else a change key
	base    digest // of the value the watch started from
	ver     int64  // the read version of its transaction
	refs    int
	refused bool // the store refused it (too_many_watches)
	// settled is closed once the transaction that made the watch is done;
	// w is set before, nil when that transaction failed.
	settled chan struct{}
	w       kv.Watch
}

type digest [sha256.Size]byte

// digestOf digests a value as Get returns it, nil for an absent key.
func digestOf(v []byte) digest {
	h := sha256.New()
	if v == nil {
		h.Write([]byte{0})
	} else {
		h.Write([]byte{1})
		h.Write(v)
	}
	var d digest
	h.Sum(d[:0])
	return d
}

func newWatchShare(limit int) *watchShare {
	return &watchShare{limit: limit, byKey: make(map[string]*sharedWatch)}
}

// watchTarget is a key a Wait needs watched and the value it read there.
type watchTarget struct {
	key  []byte
	seen digest
}

// watchClaim is what one Wait holds of the share: a reference on each of
// its watches, some of which its transaction made.
type watchClaim struct {
	s     *watchShare
	held  []*sharedWatch
	made  []*sharedWatch // the ones its transaction made, also in held
	madeW []kv.Watch     // their watches, in the order of made
}

// claim runs in a Wait's transaction, after its reads, ver being the
// transaction's read version. For each target (distinct keys) it takes
// a reference on the live shared watch that started from the value the
// read saw, or else makes a watch on the key in tx, which the share hands
// to other Waits at once (they wait for it to settle). For job records,
// claim answers nil, and makes and holds nothing, when the watches it
// would make do not fit the budget. It answers stale, and holds nothing,
// when a live shared watch started from a later read: a target's value
// changed since the Wait read it. The transaction's caller settles the
// claim once it committed, or drops it.
func (s *watchShare) claim(tx kv.Tx, targets []watchTarget, ver int64, job bool) (c *watchClaim, stale bool) {
	c = &watchClaim{s: s}
	s.mu.Lock()
	var fresh []watchTarget
	for _, t := range targets {
		e := s.byKey[string(t.key)]
		switch {
		case e == nil || !e.liveLocked():
			fresh = append(fresh, t)
		case e.base == t.seen:
			e.refs++
			c.held = append(c.held, e)
		case e.ver > ver:
			stale = true
		default:
			fresh = append(fresh, t)
		}
	}
	if stale || job && len(fresh) > 0 && s.jobs+len(fresh) > s.jobLimitLocked(time.Now()) {
		s.releaseLocked(c)
		s.mu.Unlock()
		return nil, stale
	}
	for _, t := range fresh {
		e := &sharedWatch{key: string(t.key), job: job, base: t.seen, ver: ver, refs: 1, settled: make(chan struct{})}
		s.byKey[e.key] = e
		if job {
			s.jobs++
		}
		c.held = append(c.held, e)
		c.made = append(c.made, e)
	}
	s.mu.Unlock()
	for _, e := range c.made {
		c.madeW = append(c.madeW, tx.Watch([]byte(e.key)))
	}
	return c, false
}

// jobLimitLocked is how many job watches the share may hold now.
//
// REQUIRES: s.mu is held.
func (s *watchShare) jobLimitLocked(now time.Time) int {
	if now.Before(s.capUntil) {
		return min(s.limit, s.capAt)
	}
	return s.limit
}

// liveLocked reports whether the watch may still fire: not failed to be
// made, not fired, not failed.
//
// REQUIRES: the share's mu is held.
func (e *sharedWatch) liveLocked() bool {
	select {
	case <-e.settled:
		if e.w == nil {
			return false
		}
		select {
		case <-e.w.Ready():
			return false
		default:
			return true
		}
	default:
		return true
	}
}

// settle hands the watches the claim's transaction made, which has
// committed, to the Waits that share them.
func (c *watchClaim) settle() {
	if c == nil || len(c.made) == 0 {
		return
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range c.made {
		e.w = c.madeW[i]
		close(e.settled)
		if refusedNow(e.w) {
			s.refusedLocked(e, time.Now())
		}
	}
	c.made, c.madeW = nil, nil
}

// drop lets go of a claim whose transaction did not commit: the watches it
// made are failed for the Waits that joined them, which read again.
func (c *watchClaim) drop() {
	if c == nil {
		return
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range c.made {
		if s.byKey[e.key] == e {
			delete(s.byKey, e.key)
		}
		c.madeW[i].Cancel()
		close(e.settled)
	}
	c.made, c.madeW = nil, nil
	s.releaseLocked(c)
}

// release lets go of a settled claim; a watch nobody holds any more is
// cancelled.
func (c *watchClaim) release() {
	if c == nil {
		return
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.s.releaseLocked(c)
}

// releaseLocked drops the claim's references and cancels the watches that
// nobody holds any more, before it stops counting them: the store holds
// no more job watches than jobs says.
//
// REQUIRES: s.mu is held.
func (s *watchShare) releaseLocked(c *watchClaim) {
	for _, e := range c.held {
		e.refs--
		if e.refs > 0 {
			continue
		}
		// The Wait that made e held it until e settled, so e.w is final.
		if e.w != nil {
			e.w.Cancel()
		}
		if s.byKey[e.key] == e {
			delete(s.byKey, e.key)
		}
		if e.job {
			s.jobs--
			if e.refused {
				s.refusedJobs--
			}
		}
		if s.freed != nil {
			close(s.freed)
			s.freed = nil
		}
	}
	c.held = nil
}

// refusedNow reports whether w has failed with too_many_watches.
func refusedNow(w kv.Watch) bool {
	select {
	case <-w.Ready():
		return errors.Is(w.Wait(context.Background()), kv.ErrTooManyWatches)
	default:
		return false
	}
}

// refused records that the store refused e (too_many_watches).
func (s *watchShare) refused(e *sharedWatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refusedLocked(e, time.Now())
}

// REQUIRES: s.mu is held.
func (s *watchShare) refusedLocked(e *sharedWatch, now time.Time) {
	if s.byKey[e.key] == e {
		delete(s.byKey, e.key)
	}
	if !e.job || e.refused {
		return
	}
	e.refused = true
	s.refusedJobs++
	accepted := s.jobs - s.refusedJobs
	if now.Before(s.capUntil) {
		accepted = min(accepted, s.capAt)
	}
	s.capAt, s.capUntil = max(accepted, 0), now.Add(refusalHold)
}

// freedChan returns a channel closed when the share next releases a
// watch.
func (s *watchShare) freedChan() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freed == nil {
		s.freed = make(chan struct{})
	}
	return s.freed
}

// wait blocks until one of the claim's watches is ready, or was never
// made (its transaction failed), or ctx ends, and returns that watch.
func (c *watchClaim) wait(ctx context.Context) (*sharedWatch, error) {
	for _, e := range c.held {
		select {
		case <-e.settled:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e.w == nil {
			return e, nil
		}
	}
	if len(c.held) == 1 {
		e := c.held[0]
		select {
		case <-e.w.Ready():
			return e, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	cases := make([]reflect.SelectCase, 0, len(c.held)+1)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	for _, e := range c.held {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(e.w.Ready())})
	}
	i, _, _ := reflect.Select(cases)
	if i == 0 {
		return nil, ctx.Err()
	}
	return c.held[i-1], nil
}

// watchStats reports the job watches the share holds and the references
// its Waits hold on the shared watches it hands out.
func (s *watchShare) watchStats() (jobs, refs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.byKey {
		refs += e.refs
	}
	return s.jobs, refs
}
