package pipeline

import (
	"context"
	"sync"
)

// ledger keeps the demand of a pipeline's consumers (GenStage's
// subscriptions) and what producers have reserved against it, so that the
// pipeline never holds more accepted jobs than its consumers asked for.
//
// wanted[i] is what consumer i asked for and has not received yet;
// inflight is what producers reserved (and accepted) but the dispatcher has
// not delivered yet. What producers may still reserve is
// sum(wanted) − inflight, or, for a broadcast, where every job goes to
// every consumer, min(wanted) − inflight.
type ledger struct {
	mu        sync.Mutex
	wanted    []int
	inflight  int
	broadcast bool
	// changed is closed, and replaced, whenever demand or reservations
	// change: every waiting producer wakes once and looks again.
	changed chan struct{}
	// dry: no demand is left for the producers to reserve; turned is
	// closed, and replaced, when that changes (an express loop whose
	// budget is spent waits on it).
	dry    bool
	turned chan struct{}
}

func newLedger(consumers int, broadcast bool) *ledger {
	return &ledger{wanted: make([]int, consumers), broadcast: broadcast, changed: make(chan struct{}), dry: true, turned: make(chan struct{})}
}

// changedLocked wakes the producers waiting for demand.
//
// REQUIRES: l.mu is held.
func (l *ledger) changedLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
	l.turnLocked()
}

// turnLocked notes whether demand is left, and wakes the express loops
// when that changed.
//
// REQUIRES: l.mu is held.
func (l *ledger) turnLocked() {
	if dry := l.availableLocked() <= 0; dry != l.dry {
		l.dry = dry
		close(l.turned)
		l.turned = make(chan struct{})
	}
}

// ask records consumer i asking for n more jobs.
func (l *ledger) ask(i, n int) {
	l.mu.Lock()
	l.wanted[i] += n
	l.changedLocked()
	l.mu.Unlock()
}

// availableLocked is what producers may reserve now.
//
// REQUIRES: l.mu is held.
func (l *ledger) availableLocked() int {
	var d int
	if l.broadcast {
		d = -1
		for _, w := range l.wanted {
			if d < 0 || w < d {
				d = w
			}
		}
		d = max(d, 0)
	} else {
		for _, w := range l.wanted {
			d += w
		}
	}
	return d - l.inflight
}

// reserve waits until there is demand, then reserves up to limit of it.
// It returns 0 only when ctx ended.
func (l *ledger) reserve(ctx context.Context, limit int) int {
	for {
		l.mu.Lock()
		if k := min(l.availableLocked(), limit); k > 0 {
			l.inflight += k
			l.turnLocked()
			l.mu.Unlock()
			return k
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0
		case <-changed:
		}
	}
}

// borrow reserves up to limit jobs for an express accept of keys newly
// ready: of the demand left, when there is some (the producers' accepts
// in flight reserved theirs before they read the zones, and would take
// the keys' jobs only with their next), and otherwise beyond the demand,
// less what earlier borrows hold undelivered or unpaid. The deliveries
// take the borrowed jobs from the consumers' demand, below zero, and
// their next asks pay them back, so the jobs the pipeline holds exceed
// the demand by at most limit. When it lends nothing (limit ≤ 0, or the
// budget is spent) it returns a channel closed when demand comes back.
func (l *ledger) borrow(limit int) (int, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if limit <= 0 {
		return 0, l.turned
	}
	k := limit
	if avail := l.availableLocked(); avail <= 0 {
		k = max(limit+avail, 0)
	}
	if k == 0 {
		return 0, l.turned
	}
	l.inflight += k
	l.turnLocked()
	return k, nil
}

// unreserve gives back reserved demand that was not used.
func (l *ledger) unreserve(k int) {
	if k == 0 {
		return
	}
	l.mu.Lock()
	l.inflight -= k
	l.changedLocked()
	l.mu.Unlock()
}

// deliverTo picks the consumer a job goes to (demand dispatch: the one
// that wants most) and records the delivery.
func (l *ledger) deliverMost() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	best := 0
	for i, w := range l.wanted {
		if w > l.wanted[best] {
			best = i
		}
	}
	l.wanted[best]--
	l.inflight--
	return best
}

// deliverTo records a delivery to consumer i (partition dispatch: the job's
// partition decides; a hot partition's consumer may get more than it asked
// for, which its buffer holds).
func (l *ledger) deliverTo(i int) {
	l.mu.Lock()
	l.wanted[i]--
	l.inflight--
	l.mu.Unlock()
}

// deliverAll records a broadcast delivery.
func (l *ledger) deliverAll() {
	l.mu.Lock()
	for i := range l.wanted {
		l.wanted[i]--
	}
	l.inflight--
	l.mu.Unlock()
}

// drop records a reserved job that will not be delivered (filtered out,
// released): its demand can be reserved again.
func (l *ledger) drop() { l.unreserve(1) }

// snapshot returns the demand consumers hold and what is reserved.
func (l *ledger) snapshot() (wanted, inflight int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.wanted {
		wanted += max(w, 0)
	}
	return wanted, l.inflight
}
