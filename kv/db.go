package kv

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	DefaultRetryLimit     = 100
	DefaultInitialBackoff = time.Millisecond
	DefaultMaxBackoff     = time.Second
)

// Options tune a DB's retry loop.
type Options struct {
	// RetryLimit is how many times Transact runs fn after the first attempt
	// failed with a retryable error. 0 means DefaultRetryLimit; negative
	// means no retries.
	RetryLimit int
	// InitialBackoff is the delay before the first retry; it doubles with
	// each retry up to MaxBackoff, and each delay is jittered to a uniform
	// random fraction of it so that conflicting clients spread out.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// OnRetry, if set, is called with each retryable error before the
	// backoff; metrics hook here.
	OnRetry func(err error)
}

// DB runs transactional functions against a Backend, committing them and
// retrying them on retryable errors, as FoundationDB's Database.Transact
// does, with a context, a retry limit and jittered backoff added.
type DB struct {
	backend Backend
	opts    Options
	stats   Stats
}

// Stats counts what a DB did, for metrics and for tests that count store
// transactions.
type Stats struct {
	Transactions atomic.Int64 // attempts started (Transact and ReadTransact)
	Commits      atomic.Int64 // attempts that committed
	Retries      atomic.Int64 // attempts that failed with a retryable error
	Conflicts    atomic.Int64 // attempts that failed with not_committed

	retries sync.Map // error code → *atomic.Int64: Retries by code
}

// RetriesByCode returns Retries by FoundationDB error code.
func (s *Stats) RetriesByCode() map[int]int64 {
	out := make(map[int]int64)
	s.retries.Range(func(code, n any) bool {
		out[code.(int)] = n.(*atomic.Int64).Load()
		return true
	})
	return out
}

func (s *Stats) countRetry(err error) {
	s.Retries.Add(1)
	code := ErrorCode(err)
	n, ok := s.retries.Load(code)
	if !ok {
		n, _ = s.retries.LoadOrStore(code, new(atomic.Int64))
	}
	n.(*atomic.Int64).Add(1)
}

// NewDB returns a DB over backend.
func NewDB(backend Backend, opts Options) *DB {
	if opts.RetryLimit == 0 {
		opts.RetryLimit = DefaultRetryLimit
	}
	if opts.InitialBackoff <= 0 {
		opts.InitialBackoff = DefaultInitialBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	return &DB{backend: backend, opts: opts}
}

// Backend returns the backend the DB runs on.
func (db *DB) Backend() Backend { return db.backend }

// Stats returns the DB's counters.
func (db *DB) Stats() *Stats { return &db.stats }

// Close closes the backend.
func (db *DB) Close() error { return db.backend.Close() }

// CreateTransaction starts a transaction that the caller commits itself.
// Most code should use Transact.
func (db *DB) CreateTransaction(ctx context.Context) (Transaction, error) {
	db.stats.Transactions.Add(1)
	return db.backend.Begin(ctx)
}

// Transact runs fn in a new transaction and commits it. If fn or the commit
// fails with a retryable error (conflict, transaction_too_old,
// commit_unknown_result, …), fn runs again in a new transaction after a
// jittered backoff, until it succeeds, fails otherwise, ctx ends, or the
// retry limit is reached (a *RetryLimitError wrapping the last error).
//
// Because a commit_unknown_result is retried, fn may run again after a
// commit that did apply: fn must be idempotent in that case (check a marker
// it writes, as FoundationDB's developer guide advises).
func (db *DB) Transact(ctx context.Context, fn func(Tx) error) error {
	return db.run(ctx, func(tx Transaction) error {
		if err := fn(tx); err != nil {
			tx.Cancel()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		db.stats.Commits.Add(1)
		return nil
	})
}

// ReadTransact runs fn in a new transaction that is never committed,
// retrying retryable read errors as Transact does.
func (db *DB) ReadTransact(ctx context.Context, fn func(ReadTx) error) error {
	return db.run(ctx, func(tx Transaction) error {
		defer tx.Cancel()
		return fn(tx)
	})
}

func (db *DB) run(ctx context.Context, attempt func(Transaction) error) error {
	backoff := db.opts.InitialBackoff
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		tx, err := db.CreateTransaction(ctx)
		if err == nil {
			err = attempt(tx)
		}
		if err == nil {
			return nil
		}
		if !IsRetryable(err) {
			return err
		}
		db.stats.countRetry(err)
		if errors.Is(err, ErrNotCommitted) {
			db.stats.Conflicts.Add(1)
		}
		if db.opts.OnRetry != nil {
			db.opts.OnRetry(err)
		}
		if n >= db.opts.RetryLimit {
			return &RetryLimitError{Attempts: n + 1, Err: err}
		}
		delay := time.Duration(rand.Int64N(int64(backoff)) + 1)
		backoff = min(backoff*2, db.opts.MaxBackoff)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
