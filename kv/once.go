package kv

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"time"
)

// Commit markers make DB.Transact commit each call at most once.
//
// Every attempt of a Transact call whose function wrote something also
// writes a marker: a key of its own under Options.MarkerPrefix (a bucket
// byte, 8 bytes of wall-clock seconds, then 16 random bytes) whose value
// is the commit's versionstamp. When the commit answers commit_unknown_result, the next
// attempt first reads that marker, in its own transaction: present, the
// earlier attempt applied and the call returns its success without
// running the function again; absent, the earlier attempt did not apply
// and will not (see kv's package documentation), and the function runs
// again with a new marker. A marker is garbage once its call returned: the
// DB clears it in a later transaction that writes anyway, and any write
// transaction clears, now and then, every marker older than
// Options.MarkerRetention (left by a process that died between a commit
// and its check).

// AtMostOnceBackend is a Backend that commits every transaction at most
// once on its own: it answers commit_unknown_result only when it cannot go
// on (the embedded store, after a failed write to its disk) and then
// refuses all further work, so no retry can apply a transaction twice.
// DB.Transact writes such a backend no commit markers, unless
// Options.AlwaysMarkers.
type AtMostOnceBackend interface {
	Backend
	CommitsAtMostOnce() bool
}

// DefaultMarkerPrefix is where commit markers live unless Options says
// otherwise: 0xfe is no type code of the tuple layer, so no tuple-encoded
// key starts with it.
var DefaultMarkerPrefix = []byte("\xfejobstage/kv/commit/")

// DefaultMarkerRetention is how long a marker is kept when the call that
// wrote it never cleared it. A marker is read only by the next attempt of
// its own call, a backoff after the commit, so the retention only has to
// exceed the difference between the clocks of the processes that share a
// store, plus that backoff.
const DefaultMarkerRetention = time.Hour

const (
	// markerClearsPerCommit bounds the garbage markers one transaction
	// clears, so they never make a transaction large.
	markerClearsPerCommit = 256
	// markerIDSize is the random part of a marker key.
	markerIDSize = 16
	// markerBuckets: a marker key starts with one of markerBuckets bytes
	// from markerBucket0 up, at random. Within a bucket markers are in
	// time order, so each bucket's writes go to its end; spread over
	// buckets they go to as many places, which a store that splits its
	// key space by write volume (FoundationDB's data distribution) can
	// put on as many servers, where time-ordered keys alone would make
	// the end of one range a hot spot that every writing transaction
	// writes. The bucket bytes have the high bit set, so they sort apart
	// from the keys of the format before buckets (seconds first, whose
	// first byte is 0 for the next two billion years), which the sweep
	// still clears.
	markerBuckets = 128
	markerBucket0 = 0x80
)

// stampPlaceholder is a versionstamped value: 10 bytes the commit fills
// with its versionstamp, then the little-endian offset 0.
var stampPlaceholder = make([]byte, 14)

// markers is a DB's commit-marker bookkeeping.
type markers struct {
	prefix    []byte
	retention time.Duration

	mu        sync.Mutex
	garbage   [][]byte  // markers of finished calls, to clear
	lastSweep time.Time // when a transaction last cleared expired markers
}

// newKey returns a new marker key.
func (m *markers) newKey(now time.Time) []byte {
	k := make([]byte, len(m.prefix)+1+8+markerIDSize)
	n := copy(k, m.prefix)
	k[n] = byte(markerBucket0 + rand.IntN(markerBuckets))
	binary.BigEndian.PutUint64(k[n+1:], uint64(now.Unix()))
	binary.BigEndian.PutUint64(k[n+9:], rand.Uint64())
	binary.BigEndian.PutUint64(k[n+17:], rand.Uint64())
	return k
}

// discard queues the marker of a finished call for clearing.
func (m *markers) discard(key []byte) {
	m.mu.Lock()
	m.garbage = append(m.garbage, key)
	m.mu.Unlock()
}

// piggyback adds to tx, which writes anyway, the clears of some garbage
// markers and, when due, of every expired one. It returns the markers it
// took, to hand back with giveBack if tx does not commit.
func (m *markers) piggyback(tx Tx, now time.Time) (taken [][]byte, swept bool) {
	m.mu.Lock()
	n := min(len(m.garbage), markerClearsPerCommit)
	if n > 0 {
		taken = m.garbage[len(m.garbage)-n:]
		m.garbage = m.garbage[: len(m.garbage)-n : len(m.garbage)-n]
	}
	if now.Sub(m.lastSweep) >= m.retention/4 {
		m.lastSweep, swept = now, true
	}
	m.mu.Unlock()
	for _, k := range taken {
		tx.Clear(k)
	}
	if swept {
		cutoff := uint64(max(now.Add(-m.retention).Unix(), 0))
		// The format before buckets: seconds right after the prefix.
		end := binary.BigEndian.AppendUint64(append([]byte(nil), m.prefix...), cutoff)
		tx.ClearRange(Range{Begin: m.prefix, End: end})
		for b := range markerBuckets {
			begin := append(append([]byte(nil), m.prefix...), byte(markerBucket0+b))
			tx.ClearRange(Range{Begin: begin, End: binary.BigEndian.AppendUint64(append([]byte(nil), begin...), cutoff)})
		}
	}
	return taken, swept
}

// giveBack returns what piggyback took from a transaction that did not
// commit, or may not have: clearing a marker twice is harmless.
func (m *markers) giveBack(taken [][]byte, swept bool) {
	if len(taken) == 0 && !swept {
		return
	}
	m.mu.Lock()
	m.garbage = append(m.garbage, taken...)
	if swept {
		m.lastSweep = time.Time{}
	}
	m.mu.Unlock()
}

// onceTx is the Tx that DB.Transact hands its function: the attempt's
// transaction, with what the function wrote noted and a versionstamp
// future that belongs to the call rather than to one attempt.
type onceTx struct {
	Transaction
	wrote bool
	stamp *Future[Versionstamp]
	done  bool // Transact returned
	memo  map[any]any
}

// Memo returns what this attempt of the transaction keeps under key, made
// by mk at the first call. A retry starts with none.
func (t *onceTx) Memo(key any, mk func() any) any {
	if v, ok := t.memo[key]; ok {
		return v
	}
	if t.memo == nil {
		t.memo = map[any]any{}
	}
	v := mk()
	t.memo[key] = v
	return v
}

// Memo returns what tx keeps under key for the operations that run in its
// current attempt, made by mk at the first call: what one of them read
// that the next need not read again. Every attempt of DB.Transact starts
// with none, so nothing a failed attempt learned reaches its retry. A Tx
// that keeps nothing (not one DB.Transact hands out) gets mk's value at
// every call.
func Memo(tx Tx, key any, mk func() any) any {
	if m, ok := tx.(interface{ Memo(any, func() any) any }); ok {
		return m.Memo(key, mk)
	}
	return mk()
}

var _ Tx = (*onceTx)(nil)

func (t *onceTx) Set(key, value []byte) { t.wrote = true; t.Transaction.Set(key, value) }
func (t *onceTx) Clear(key []byte)      { t.wrote = true; t.Transaction.Clear(key) }
func (t *onceTx) ClearRange(r Range)    { t.wrote = true; t.Transaction.ClearRange(r) }
func (t *onceTx) Atomic(op MutationType, key, p []byte) {
	t.wrote = true
	t.Transaction.Atomic(op, key, p)
}
func (t *onceTx) Add(key []byte, delta int64) { t.wrote = true; t.Transaction.Add(key, delta) }
func (t *onceTx) SetVersionstampedKey(key, value []byte) {
	t.wrote = true
	t.Transaction.SetVersionstampedKey(key, value)
}
func (t *onceTx) SetVersionstampedValue(key, value []byte) {
	t.wrote = true
	t.Transaction.SetVersionstampedValue(key, value)
}

// Versionstamp returns the call's future: it is resolved when Transact
// returns, with the versionstamp of the attempt that committed (also when
// that attempt's commit answered commit_unknown_result), or with the
// call's error.
func (t *onceTx) Versionstamp() *Future[Versionstamp] {
	if t.done && t.stamp == nil {
		// Asked for after the call: as a backend answers once the commit
		// started.
		f := NewFuture[Versionstamp]()
		f.Resolve(Versionstamp{}, ErrUsedDuringCommit.WithDetail("versionstamp asked for after Transact returned"))
		return f
	}
	if t.stamp == nil {
		t.stamp = NewFuture[Versionstamp]()
	}
	return t.stamp
}

// Transact runs fn inside this transaction, with this Tx.
func (t *onceTx) Transact(_ context.Context, fn func(Tx) error) error { return fn(t) }

// ReadTransact runs fn inside this transaction, with this Tx.
func (t *onceTx) ReadTransact(_ context.Context, fn func(ReadTx) error) error { return fn(t) }
