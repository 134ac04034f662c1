package kv

import (
	"context"
	"encoding/binary"
)

// FoundationDB's limits, enforced by every backend.
const (
	MaxKeySize         = 10_000
	MaxValueSize       = 100_000
	MaxTransactionSize = 10_000_000
)

// ReadTx is the read side of a transaction. Reads see the transaction's own
// writes. Reads through a Tx add read conflict ranges; reads through
// Tx.Snapshot() do not.
type ReadTx interface {
	// Get returns the value of key, or nil if the key is absent. A key
	// longer than MaxKeySize is absent (no such key can exist), and its
	// read adds no conflict.
	Get(key []byte) ([]byte, error)
	// GetRange returns the key-values in r in key order (descending with
	// opts.Reverse), at most opts.Limit of them when Limit > 0.
	GetRange(r Range, opts RangeOptions) ([]KeyValue, error)
	// Iterate streams the key-values in r, fetching them in growing pages,
	// for ranges too large to hold in memory at once. Read conflicts cover
	// what was actually read.
	Iterate(r Range, opts RangeOptions) RangeIterator
	// ReadTransact runs fn inside this transaction (see Transactor).
	ReadTransact(ctx context.Context, fn func(ReadTx) error) error
	// ReadVersion returns the version this transaction reads at: every
	// commit with a version at most this one is visible to it, and every
	// commit with a later version was not yet visible when it was
	// obtained. A commit's versionstamp begins with its commit version (8
	// bytes, big-endian), so the two can be compared (CommitVersion). It
	// fails as a read does.
	ReadVersion() (int64, error)
	// Context returns the context the transaction was started with.
	Context() context.Context
}

// RangeOptions limits and orders a range read.
type RangeOptions struct {
	// Limit is the maximum number of key-values returned; 0 means no limit.
	// A negative limit fails the read with range_limits_invalid (2012) on
	// every backend: FoundationDB's client takes -1 for "no limit" only in
	// some streaming modes and fails the rest, so kv refuses them all.
	Limit int
	// Reverse returns key-values in descending key order. With a Limit, the
	// last Limit keys of the range are returned.
	Reverse bool
}

// RangeIterator streams a range read:
//
//	it := tx.Iterate(r, kv.RangeOptions{})
//	for it.Next() {
//		kv := it.KeyValue()
//	}
//	if err := it.Err(); err != nil { ... }
type RangeIterator interface {
	// Next advances to the next key-value; false at the end or on error.
	Next() bool
	// KeyValue returns the current key-value. Valid after Next returned true.
	KeyValue() KeyValue
	// Err returns the error that stopped the iteration, if any.
	Err() error
}

// Tx is a read-write transaction with FoundationDB's semantics.
//
// Writes are buffered and applied at commit. Set, Clear and the other write
// methods do not return errors: a bad write (a key over MaxKeySize, a key in
// the system keyspace, …) makes every later read and the commit fail with
// that error, as FoundationDB does.
type Tx interface {
	ReadTx
	// Snapshot returns a view of this transaction whose reads add no read
	// conflict ranges. It still sees the transaction's own writes.
	Snapshot() ReadTx

	Set(key, value []byte)
	Clear(key []byte)
	ClearRange(r Range)
	// Atomic applies an atomic mutation to key with param. It adds a write
	// conflict on key but no read conflict, so concurrent atomic mutations
	// of one key never conflict.
	Atomic(op MutationType, key, param []byte)
	// Add is Atomic(MutationAdd, key, little-endian int64 delta).
	Add(key []byte, delta int64)
	// SetVersionstampedKey sets a key whose 10 bytes at the offset given by
	// its last 4 bytes (little-endian uint32, FoundationDB's API 520+ format)
	// are replaced by the commit's versionstamp; the 4 offset bytes are
	// removed.
	SetVersionstampedKey(key, value []byte)
	// SetVersionstampedValue is SetVersionstampedKey for the value.
	SetVersionstampedValue(key, value []byte)

	AddReadConflictKey(key []byte)
	AddReadConflictRange(r Range)
	AddWriteConflictKey(key []byte)
	AddWriteConflictRange(r Range)

	// Watch returns a watch on key that fires when the key's value changes
	// from the value this transaction sees when Watch is called (its own
	// earlier write, else the value at the read version). It reads the key
	// as Get does, with a read conflict. A write this transaction makes to
	// the key afterwards fires it at once if it changes the value (an
	// atomic or versionstamped write always does); other transactions'
	// changes are reported once this transaction has committed. If the
	// commit fails, the watch fails with its error.
	Watch(key []byte) Watch
	// Versionstamp returns a future for this transaction's versionstamp,
	// ready once the transaction has committed; called once the commit
	// has started, it fails with used_during_commit (see the package
	// documentation). Inside DB.Transact it is the call's versionstamp.
	Versionstamp() *Future[Versionstamp]

	// Transact runs fn inside this transaction (see Transactor).
	Transact(ctx context.Context, fn func(Tx) error) error
}

// Transaction is a Tx that its owner commits. Backends implement it;
// applications use DB.Transact, which commits and retries.
type Transaction interface {
	Tx
	// Commit makes the writes durable and visible atomically, or fails with
	// a *Error (not_committed on conflict, transaction_too_old, …).
	Commit() error
	// Cancel abandons the transaction: later operations fail with
	// transaction_cancelled and its watches fail.
	Cancel()
}

// Backend is a storage engine with FoundationDB's transaction semantics.
type Backend interface {
	// Begin starts a transaction at a read version.
	Begin(ctx context.Context) (Transaction, error)
	// Close releases the backend. Transactions and watches still open fail.
	Close() error
}

// Transactor runs transactional functions. Both *DB and Tx are
// Transactors, so a function written against a Transactor runs on its own
// (DB: a new transaction, committed, retried) or inside a caller's
// transaction (Tx: no commit, the caller's retry loop governs). Such a
// function may run many times and must have no side effects outside the
// transaction. A panic in fn goes on to the caller unchanged; a DB cancels
// the transaction it began on the way, a Tx leaves its transaction to its
// owner (DB.Transact, or whoever called CreateTransaction).
type Transactor interface {
	Transact(ctx context.Context, fn func(Tx) error) error
	ReadTransact(ctx context.Context, fn func(ReadTx) error) error
}

// ReadTransactor runs read-only transactional functions.
type ReadTransactor interface {
	ReadTransact(ctx context.Context, fn func(ReadTx) error) error
}

// Watch is a one-shot notification that a key changed.
type Watch interface {
	// Ready is closed when the watch fired or failed.
	Ready() <-chan struct{}
	// Wait blocks until the watch fires (nil), fails (its error), or ctx
	// ends (ctx's error; the watch stays registered).
	Wait(ctx context.Context) error
	// Cancel releases the watch; Wait then returns transaction_cancelled.
	Cancel()
}

// Versionstamp is a 10-byte commit versionstamp: the 8-byte big-endian
// commit version followed by the 2-byte big-endian order of the transaction
// within its commit batch. Versionstamps of successive commits are strictly
// increasing in byte order.
type Versionstamp [10]byte

// CommitVersion returns the commit version the versionstamp begins with.
func (v Versionstamp) CommitVersion() int64 { return int64(binary.BigEndian.Uint64(v[:8])) }

// Transact runs fn on t and returns its result; see Transactor.
func Transact[T any](ctx context.Context, t Transactor, fn func(Tx) (T, error)) (T, error) {
	var out T
	err := t.Transact(ctx, func(tx Tx) error {
		v, err := fn(tx)
		if err != nil {
			return err
		}
		out = v
		return nil
	})
	return out, err
}

// ReadTransact runs fn on t read-only and returns its result.
func ReadTransact[T any](ctx context.Context, t ReadTransactor, fn func(ReadTx) (T, error)) (T, error) {
	var out T
	err := t.ReadTransact(ctx, func(tx ReadTx) error {
		v, err := fn(tx)
		if err != nil {
			return err
		}
		out = v
		return nil
	})
	return out, err
}
