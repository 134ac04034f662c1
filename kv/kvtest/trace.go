package kvtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jobstage/jobstage/kv"
)

// WriteKind is what a traced write did to its key.
type WriteKind uint8

// Kinds of traced writes.
const (
	WriteSet   WriteKind = iota + 1 // Set
	WriteClear                      // Clear
	// WriteClearRange is ClearRange; the write's key is the range's begin.
	WriteClearRange
	// WriteAtomic is an atomic mutation (Add, Atomic); Write.Op says which.
	WriteAtomic
	// WriteVersionstampedKey is SetVersionstampedKey; the write's key is
	// the key as stored, with the commit's versionstamp in place.
	WriteVersionstampedKey
	// WriteVersionstampedTemplate is SetVersionstampedKey whose commit's
	// versionstamp could not be learned: the write's key is the template
	// as given, placeholder and 4 offset bytes included. A backend that
	// keeps the kv contract never leaves one.
	WriteVersionstampedTemplate
	// WriteVersionstampedValue is SetVersionstampedValue.
	WriteVersionstampedValue
)

func (k WriteKind) String() string {
	switch k {
	case WriteSet:
		return "set"
	case WriteClear:
		return "clear"
	case WriteClearRange:
		return "clear_range"
	case WriteAtomic:
		return "atomic"
	case WriteVersionstampedKey:
		return "set_versionstamped_key"
	case WriteVersionstampedTemplate:
		return "set_versionstamped_key(template)"
	case WriteVersionstampedValue:
		return "set_versionstamped_value"
	}
	return "write(?)"
}

// Write is one mutation of a committed transaction, as the transaction
// issued it: two writes to one key in one transaction are two Writes.
type Write struct {
	// Key is the key written (a clear range's begin). It belongs to the
	// trace: never modify it.
	Key []byte
	// Op is the atomic mutation of a WriteAtomic, else 0.
	Op kv.MutationType
	// Size is the length of the value or the atomic operand (0 for
	// clears), so that writes can be weighed in bytes as well as counted.
	Size int32
	Kind WriteKind
}

// Txn is a committed transaction's writes, in the order it issued them.
type Txn struct {
	// Stamp is the commit's versionstamp; a trace is in Stamp order.
	Stamp  kv.Versionstamp
	Writes []Write
}

// TracingBackend is a kv.Backend that records the writes of every
// transaction that commits through it, for tests and benchmarks that
// measure where a workload writes (see Projection). Reads, and the writes
// of transactions that fail or are cancelled, are not recorded. It is safe
// for concurrent use, and cheap enough to record millions of writes: a
// transaction collects its writes on its own, with its keys copied into a
// buffer of its own, and a commit takes one short lock to add them to the
// trace.
//
// Everything else goes to the inner backend unchanged. When the inner
// backend is a kv.AtMostOnceBackend, so is the wrapper, so that a DB over
// it writes commit markers only when it would over the inner one (or when
// kv.Options.AlwaysMarkers asks, as on FoundationDB).
type TracingBackend struct {
	inner  kv.Backend
	writes atomic.Int64

	mu struct {
		sync.Mutex
		txns []Txn
	}
}

var (
	_ kv.Backend           = (*TracingBackend)(nil)
	_ kv.AtMostOnceBackend = (*TracingBackend)(nil)
)

// NewTracingBackend wraps inner; it records from the start.
func NewTracingBackend(inner kv.Backend) *TracingBackend {
	return &TracingBackend{inner: inner}
}

// NewTracingDB wraps db's backend in a TracingBackend and returns a DB
// over it with options o.
func NewTracingDB(db *kv.DB, o kv.Options) (*kv.DB, *TracingBackend) {
	b := NewTracingBackend(db.Backend())
	return kv.NewDB(b, o), b
}

// Inner returns the wrapped backend.
func (b *TracingBackend) Inner() kv.Backend { return b.inner }

// CommitsAtMostOnce implements kv.AtMostOnceBackend with the inner
// backend's answer.
func (b *TracingBackend) CommitsAtMostOnce() bool {
	a, ok := b.inner.(kv.AtMostOnceBackend)
	return ok && a.CommitsAtMostOnce()
}

// Take returns the transactions committed since the last Take (or since
// the backend was made), in commit order, and starts a new trace: what a
// caller takes between two points of its workload (a window of jobs, say)
// is what committed between them. A commit that is under way while Take
// runs lands in this trace or the next.
func (b *TracingBackend) Take() []Txn {
	b.mu.Lock()
	txns := b.mu.txns
	b.mu.txns = nil
	b.mu.Unlock()
	// Commits append in the order they return, which concurrent commits
	// may not keep; their versionstamps are the order they committed in.
	slices.SortStableFunc(txns, func(x, y Txn) int { return bytes.Compare(x.Stamp[:], y.Stamp[:]) })
	return txns
}

// Writes returns how many writes the backend has recorded in all.
func (b *TracingBackend) Writes() int64 { return b.writes.Load() }

// Begin implements kv.Backend.
func (b *TracingBackend) Begin(ctx context.Context) (kv.Transaction, error) {
	inner, err := b.inner.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &tracingTx{Transaction: inner, b: b}, nil
}

// Close implements kv.Backend by closing the inner backend.
func (b *TracingBackend) Close() error { return b.inner.Close() }

func (b *TracingBackend) record(t Txn) {
	b.mu.Lock()
	b.mu.txns = append(b.mu.txns, t)
	b.mu.Unlock()
	b.writes.Add(int64(len(t.Writes)))
}

// tracingTx records an inner transaction's writes. Reads, conflict
// ranges, watches and the versionstamp go to the inner transaction as
// they are (the embedded Transaction).
type tracingTx struct {
	kv.Transaction
	b *TracingBackend

	mu struct {
		sync.Mutex
		writes []Write
		// buf holds copies of the keys: a block at a time, so a
		// transaction's keys cost few allocations. A full block is left
		// to the keys in it.
		buf []byte
		// stamped indexes the versionstamped keys among writes, whose
		// placeholders the commit's versionstamp fills.
		stamped []stampedKey
	}
}

type stampedKey struct {
	write  int
	offset uint32
}

var _ kv.Transaction = (*tracingTx)(nil)

// keyBlock is the least size of a transaction's key buffer.
const keyBlock = 128

// addLocked records a write of a copy of key.
func (t *tracingTx) addLocked(kind WriteKind, op kv.MutationType, key []byte, size int) {
	if cap(t.mu.buf)-len(t.mu.buf) < len(key) {
		t.mu.buf = make([]byte, 0, max(keyBlock, 2*cap(t.mu.buf), len(key)))
	}
	n := len(t.mu.buf)
	t.mu.buf = append(t.mu.buf, key...)
	k := t.mu.buf[n:len(t.mu.buf):len(t.mu.buf)]
	t.mu.writes = append(t.mu.writes, Write{Key: k, Op: op, Size: int32(min(size, 1<<31-1)), Kind: kind})
}

func (t *tracingTx) add(kind WriteKind, op kv.MutationType, key []byte, size int) {
	t.mu.Lock()
	t.addLocked(kind, op, key, size)
	t.mu.Unlock()
}

func (t *tracingTx) Set(key, value []byte) {
	t.Transaction.Set(key, value)
	t.add(WriteSet, 0, key, len(value))
}

func (t *tracingTx) Clear(key []byte) {
	t.Transaction.Clear(key)
	t.add(WriteClear, 0, key, 0)
}

func (t *tracingTx) ClearRange(r kv.Range) {
	t.Transaction.ClearRange(r)
	t.add(WriteClearRange, 0, r.Begin, 0)
}

func (t *tracingTx) Atomic(op kv.MutationType, key, param []byte) {
	t.Transaction.Atomic(op, key, param)
	t.add(WriteAtomic, op, key, len(param))
}

func (t *tracingTx) Add(key []byte, delta int64) {
	t.Transaction.Add(key, delta)
	t.add(WriteAtomic, kv.MutationAdd, key, 8)
}

func (t *tracingTx) SetVersionstampedValue(key, value []byte) {
	t.Transaction.SetVersionstampedValue(key, value)
	t.add(WriteVersionstampedValue, 0, key, max(len(value)-4, 0))
}

// SetVersionstampedKey implements kv.Tx. The key is kept as its template
// until the commit's versionstamp is known; a template too short to hold
// its placeholder (which fails the transaction) stays one.
func (t *tracingTx) SetVersionstampedKey(key, value []byte) {
	t.Transaction.SetVersionstampedKey(key, value)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.addLocked(WriteVersionstampedTemplate, 0, key, len(value))
	if len(key) < 4 {
		return
	}
	off := binary.LittleEndian.Uint32(key[len(key)-4:])
	if uint64(off)+10 > uint64(len(key)-4) {
		return
	}
	t.mu.stamped = append(t.mu.stamped, stampedKey{write: len(t.mu.writes) - 1, offset: off})
}

// Transact implements kv.Tx, passing the wrapper to fn so that a nested
// function's writes are recorded too.
func (t *tracingTx) Transact(ctx context.Context, fn func(kv.Tx) error) error {
	return t.Transaction.Transact(ctx, func(kv.Tx) error { return fn(t) })
}

// ReadTransact implements kv.ReadTx, passing the wrapper to fn.
func (t *tracingTx) ReadTransact(ctx context.Context, fn func(kv.ReadTx) error) error {
	return t.Transaction.ReadTransact(ctx, func(kv.ReadTx) error { return fn(t) })
}

// Commit implements kv.Transaction: once the inner commit succeeds, the
// transaction's writes join the trace under its versionstamp.
func (t *tracingTx) Commit() error {
	t.mu.Lock()
	writes, stamped := t.mu.writes, t.mu.stamped
	t.mu.writes, t.mu.stamped, t.mu.buf = nil, nil, nil
	t.mu.Unlock()
	if len(writes) == 0 {
		return t.Transaction.Commit()
	}
	// Asked for before the commit starts, as the contract wants; the
	// caller's own Versionstamp is the same future.
	f := t.Transaction.Versionstamp()
	if err := t.Transaction.Commit(); err != nil {
		return err
	}
	// Ready by now: the commit succeeded (see kv.DB.Transact).
	<-f.Ready()
	stamp, err := f.Get(context.Background())
	if err == nil {
		for _, s := range stamped {
			w := &writes[s.write]
			k := w.Key[:len(w.Key)-4]
			copy(k[s.offset:], stamp[:])
			w.Key, w.Kind = k, WriteVersionstampedKey
		}
	}
	t.b.record(Txn{Stamp: stamp, Writes: writes})
	return nil
}
