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
	// MarkerPrefix is the key prefix of Transact's commit markers
	// (DefaultMarkerPrefix when nil). Several DBs may share it: marker
	// keys are random.
	MarkerPrefix []byte
	// MarkerRetention is how long a marker that its call never cleared
	// (its process died) is kept; DefaultMarkerRetention when 0.
	MarkerRetention time.Duration
	// AlwaysMarkers writes commit markers even to an AtMostOnceBackend,
	// which needs none: for measuring what they cost.
	AlwaysMarkers bool
}

// DB runs transactional functions against a Backend, committing them and
// retrying them on retryable errors, as FoundationDB's Database.Transact
// does, with a context, a retry limit and jittered backoff added.
type DB struct {
	backend Backend
	opts    Options
	stats   Stats
	marks   markers
	// noMarkers: the backend commits at most once on its own.
	noMarkers bool
}

// Stats counts what a DB did, for metrics and for tests that count store
// transactions.
type Stats struct {
	Transactions atomic.Int64 // attempts started (Transact and ReadTransact)
	Commits      atomic.Int64 // attempts that committed
	Retries      atomic.Int64 // attempts that failed with a retryable error
	Conflicts    atomic.Int64 // attempts that failed with not_committed
	// UnknownApplied counts commits that answered commit_unknown_result
	// and were found applied by the next attempt's marker check.
	UnknownApplied atomic.Int64

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
	if opts.MarkerPrefix == nil {
		opts.MarkerPrefix = DefaultMarkerPrefix
	}
	if opts.MarkerRetention <= 0 {
		opts.MarkerRetention = DefaultMarkerRetention
	}
	db := &DB{backend: backend, opts: opts}
	db.marks.prefix = append([]byte(nil), opts.MarkerPrefix...)
	db.marks.retention = opts.MarkerRetention
	if b, ok := backend.(AtMostOnceBackend); ok && b.CommitsAtMostOnce() && !opts.AlwaysMarkers {
		db.noMarkers = true
	}
	return db
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
// The call commits at most once, even when a commit answers
// commit_unknown_result after it applied: the attempt wrote a commit
// marker, and the next attempt reads it before running fn again (see
// Options.MarkerPrefix). So when Transact returns nil, the last run of fn
// is the one that committed, exactly once; when it returns an error, fn's
// writes did not commit, unless the error matches ErrCommitUnknownResult
// (the call gave up before it could learn the outcome of such a commit).
// tx.Versionstamp inside fn belongs to the call: it is the versionstamp of
// the attempt that committed.
//
// If fn panics, Transact cancels the attempt's transaction (it commits
// nothing and pins nothing; a versionstamp taken from tx fails with
// transaction_cancelled) and the panic goes on with its own value.
func (db *DB) Transact(ctx context.Context, fn func(Tx) error) error {
	c := &transactCall{db: db, fn: fn}
	defer func() {
		c.w.done = true
		// fn panicked: run cancelled the attempt, and the call's
		// versionstamp fails as a cancelled transaction's does. After a
		// return it is resolved already and this does nothing.
		if c.w.stamp != nil {
			c.w.stamp.Resolve(Versionstamp{}, ErrTransactionCancelled.WithDetail("transaction function panicked"))
		}
	}()
	err := db.run(ctx, c.attempt)
	if err != nil && c.unknown != nil {
		// The call gave up while an attempt's outcome was unknown.
		err = &UnknownResultError{Err: err, Unknown: c.unknown}
	}
	if c.w.stamp != nil {
		c.w.stamp.Resolve(c.stamp, err)
	}
	return err
}

// transactCall is what one Transact call carries from one attempt to the
// next: the Tx that fn sees (the same one each attempt, so that a
// versionstamp taken from it belongs to the call), the marker of an
// attempt whose outcome is unknown, and how much of kv's own writes the
// next attempt may carry.
type transactCall struct {
	db *DB
	fn func(Tx) error

	w       onceTx
	check   []byte       // marker of the attempt whose commit result is unknown
	unknown error        // that attempt's error
	stamp   Versionstamp // the versionstamp of the attempt that committed
	// lean: the last attempt was too large with the garbage clears
	// piggybacked, so the next carries none; bare: it was too large
	// with its marker alone, so the next carries no marker either,
	// and an unknown outcome of it cannot be resolved.
	lean, bare bool
}

// attempt is one attempt of the call, run by db.run on a new transaction:
// the check of an earlier attempt's unknown outcome if there is one, else
// a run of fn and its commit, with a marker when fn wrote.
func (c *transactCall) attempt(tx Transaction) error {
	if c.check != nil {
		return c.checkUnknown(tx)
	}
	c.w.Transaction, c.w.wrote, c.w.memo = tx, false, nil
	if err := c.fn(&c.w); err != nil {
		tx.Cancel()
		return err
	}
	var (
		marker []byte
		taken  [][]byte
		swept  bool
		bstamp *Future[Versionstamp]
	)
	if c.w.wrote && !c.db.noMarkers && !c.bare {
		now := time.Now()
		marker = c.db.marks.newKey(now)
		tx.SetVersionstampedValue(marker, stampPlaceholder)
		if !c.lean {
			taken, swept = c.db.marks.piggyback(tx, now)
		}
	}
	if c.w.stamp != nil {
		bstamp = tx.Versionstamp()
	}
	if err := tx.Commit(); err != nil {
		c.db.marks.giveBack(taken, swept)
		return c.commitFailed(err, marker, len(taken) > 0 || swept)
	}
	c.db.stats.Commits.Add(1)
	if marker != nil {
		c.db.marks.discard(marker)
	}
	if bstamp != nil {
		// Ready by now: the commit succeeded, or the transaction had
		// nothing to commit (no_commit_version). Not read through ctx:
		// a context that ended after the commit must not turn a
		// committed call's versionstamp into an error.
		<-bstamp.Ready()
		s, err := bstamp.Get(context.Background())
		if err != nil {
			c.w.stamp.Resolve(Versionstamp{}, err)
		}
		c.stamp = s
	}
	return nil
}

// checkUnknown is the attempt after one whose commit answered
// commit_unknown_result: instead of running fn, it reads that attempt's
// marker, which is there, holding the commit's versionstamp, only if the
// commit applied.
func (c *transactCall) checkUnknown(tx Transaction) error {
	v, err := tx.Get(c.check)
	tx.Cancel()
	if err != nil {
		return err
	}
	if v != nil {
		// The attempt applied: its marker holds its versionstamp.
		copy(c.stamp[:], v)
		c.db.marks.discard(c.check)
		c.db.stats.Commits.Add(1)
		c.db.stats.UnknownApplied.Add(1)
		c.check, c.unknown = nil, nil
		return nil
	}
	// It did not apply, and no longer can: run fn afresh. The
	// check's read ended that transaction; the next attempt begins
	// at once.
	c.check, c.unknown = nil, nil
	return errRunAgain
}

// commitFailed decides what follows an attempt whose commit failed with
// err, having written marker (nil when it wrote none) and, if piggybacked,
// clears of old markers: a leaner attempt at once when kv's additions may
// have made it too large, the marker's check next when the commit may have
// applied and the marker can tell, or an UnknownResultError when the
// outcome can never be learnt. Otherwise err goes back to db.run as it is.
func (c *transactCall) commitFailed(err error, marker []byte, piggybacked bool) error {
	switch {
	case !IsMaybeCommitted(err):
		if errors.Is(err, ErrTransactionTooLarge) && marker != nil {
			// What kv added may be what made it too large: the
			// caller's writes alone may fit. Run fn again with less.
			if piggybacked {
				c.lean = true
			} else {
				c.bare = true
			}
			return errRunAgain
		}
	case !c.w.wrote:
		// Nothing of fn's to apply twice.
	case marker == nil || ErrorCode(err) == CodeClusterVersionChanged:
		// No marker to read (an AtMostOnceBackend, which refuses
		// the retry anyway, or a bare attempt), or a commit that
		// may still land later: FoundationDB's client answers
		// cluster_version_changed while the commit it abandoned is
		// in flight, so a marker read now proves nothing. The
		// outcome stays unknown.
		return &UnknownResultError{Err: err, Unknown: err}
	default:
		c.check, c.unknown = marker, err
	}
	return err
}

// errRunAgain ends an attempt whose successor must start at once, neither
// counted as a retry nor delayed: the check that learnt that an unknown
// commit did not apply, or a commit made too large by kv's own additions.
var errRunAgain = &Error{Code: CodeNotCommitted, Detail: "attempt ended by the commit-once protocol"}

// ReadTransact runs fn in a new transaction that is never committed,
// retrying retryable read errors as Transact does. The transaction is
// cancelled when fn returns or panics.
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
			err = runAttempt(tx, attempt)
		}
		if err == nil {
			return nil
		}
		if err == errRunAgain {
			n--
			continue
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

// runAttempt runs attempt on tx, which commits or cancels tx when it
// returns. When it does not return — the transactional function panicked,
// or called runtime.Goexit (t.FailNow in a test) — runAttempt cancels tx
// on the way out, so that it pins no snapshot and its watches fail, and
// the panic goes on unchanged: nothing recovers it, so its value and stack
// are the function's own.
func runAttempt(tx Transaction, attempt func(Transaction) error) error {
	returned := false
	defer func() {
		if !returned {
			tx.Cancel()
		}
	}()
	err := attempt(tx)
	returned = true
	return err
}
