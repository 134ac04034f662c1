package kvtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// Features describes what a backend offers, so the suite asserts exactly
// that.
type Features struct {
	// TransactionLifetime is the lifetime the backend enforces
	// (FoundationDB: 5s); the too-old tests wait just past it. Zero skips
	// them.
	TransactionLifetime time.Duration
	// Faults: the backend injects failures (see FaultyBackend). Tests that
	// assert the exact outcome of one raw commit are skipped; tests that go
	// through DB.Transact's retry loop must still pass.
	Faults bool
}

// Timeouts of the suite. They bound waits for things that must happen, so
// a broken backend fails a test instead of hanging it; nothing waits for
// them to pass.
const (
	// waitTimeout bounds a wait on a watch, a future or a goroutine.
	waitTimeout = 10 * time.Second
	// testTimeout bounds one test's transactions.
	testTimeout = 5 * time.Minute
)

// errRollback is returned by transactional functions that inspect their
// own writes and must not commit them.
var errRollback = errors.New("kvtest: roll back")

// test is one conformance test.
type test struct {
	name string
	run  func(e *env)
	// raw: the test asserts the outcome of individual raw commits, which
	// injected faults make unpredictable.
	raw bool
}

// tests lists the suite in the order it runs.
func tests() []test {
	return []test{
		// Isolation: serializable, optimistic, FoundationDB's conflict rules.
		{name: "LostUpdate", run: testLostUpdate},
		{name: "WriteSkew", run: testWriteSkew, raw: true},
		{name: "Phantom", run: testPhantom, raw: true},
		{name: "RangeLimitConflict", run: testRangeLimitConflict, raw: true},
		{name: "SnapshotReadsDoNotConflict", run: testSnapshotReads, raw: true},
		{name: "ReadConflictKey", run: testReadConflictKey, raw: true},
		{name: "ReadConflictRange", run: testReadConflictRange, raw: true},
		{name: "WriteConflictKey", run: testWriteConflictKey, raw: true},
		{name: "WriteConflictRange", run: testWriteConflictRange, raw: true},
		{name: "AtomicAddsNoReadConflict", run: testAtomicNoReadConflict, raw: true},
		{name: "AtomicAddContention", run: testAtomicAddContention, raw: true},
		{name: "RandomizedSerializability", run: testRandomizedSerializability},

		// Reads see the transaction's own writes.
		{name: "ReadYourWritesPoint", run: testReadYourWritesPoint},
		{name: "ReadYourWritesRange", run: testReadYourWritesRange},
		{name: "WritesApplyInOrder", run: testWritesApplyInOrder},
		{name: "RangeReadOverAtomic", run: testRangeReadOverAtomic},
		{name: "EmptyBeginKey", run: testEmptyBeginKey},
		{name: "OwnWritesNoReadConflict", run: testOwnWritesNoReadConflict, raw: true},

		// Range reads and clears.
		{name: "RangeReads", run: testRangeReads},
		{name: "IterateLarge", run: testIterateLarge},
		{name: "ClearRange", run: testClearRange},

		// Atomic mutations.
		{name: "AtomicMutations", run: testAtomicMutations},

		// Versionstamps.
		{name: "VersionstampFuture", run: testVersionstampFuture},
		{name: "VersionstampedKeyAndValue", run: testVersionstampedKeyAndValue},
		{name: "VersionstampSameTransaction", run: testVersionstampSameTransaction},
		{name: "VersionstampOrder", run: testVersionstampOrder},
		{name: "ReadVersionOrdersCommits", run: testReadVersionOrdersCommits, raw: true},
		{name: "VersionstampAfterCommit", run: testVersionstampAfterCommit, raw: true},

		// Watches.
		{name: "WatchFiresOnChange", run: testWatchFiresOnChange},
		{name: "WatchNotBeforeCommit", run: testWatchNotBeforeCommit, raw: true},
		{name: "WatchFailsWhenCancelled", run: testWatchFailsWhenCancelled},
		{name: "WatchFailsOnConflict", run: testWatchFailsOnConflict, raw: true},
		{name: "WatchCancel", run: testWatchCancel},
		{name: "WatchSameValue", run: testWatchSameValue},
		{name: "WatchOwnWriteBeforeWatch", run: testWatchOwnWriteBeforeWatch},
		{name: "WatchOwnWriteAfterWatch", run: testWatchOwnWriteAfterWatch},
		{name: "WatchReadConflict", run: testWatchReadConflict, raw: true},
		{name: "WatchReadOnlyCommit", run: testWatchReadOnlyCommit, raw: true},

		// FoundationDB's limits.
		{name: "KeyTooLarge", run: testKeyTooLarge},
		{name: "ValueTooLarge", run: testValueTooLarge},
		{name: "TransactionTooLarge", run: testTransactionTooLarge},
		{name: "SystemKeyspace", run: testSystemKeyspace},
		{name: "NegativeLimit", run: testNegativeLimit},
		{name: "OversizedKeyReads", run: testOversizedKeyReads},
		{name: "TransactionTooOld", run: testTransactionTooOld, raw: true},
		{name: "TransactionTooOldRetried", run: testTransactionTooOldRetried},
		{name: "CommitAfterLifetime", run: testCommitAfterLifetime, raw: true},

		// The retry loop and the transaction's life cycle.
		{name: "RetryLimit", run: testRetryLimit},
		{name: "ContextCancelled", run: testContextCancelled},
		{name: "ContextCancelledDuringBackoff", run: testContextCancelledDuringBackoff},
		{name: "UseAfterCommit", run: testUseAfterCommit, raw: true},
		{name: "UseAfterCancel", run: testUseAfterCancel},
		{name: "Composition", run: testComposition},
	}
}

// Run runs the conformance suite against the databases newDB returns, each
// test as a subtest. newDB may return a fresh database per call or the same
// shared one; it owns the database's life (close it in t.Cleanup).
func Run(t *testing.T, newDB func(t *testing.T) *kv.DB, f Features) {
	for _, tc := range tests() {
		t.Run(tc.name, func(t *testing.T) {
			if tc.raw && f.Faults {
				t.Skip(tc.name + " needs exact commit outcomes; this backend injects faults")
			}
			tc.run(newEnv(t, newDB(t), f))
		})
	}
}

// env is one test's database and key prefix.
type env struct {
	*testing.T
	db     *kv.DB
	f      Features
	ctx    context.Context
	prefix []byte
}

func newEnv(t *testing.T, db *kv.DB, f Features) *env {
	// A random part keeps reruns against one shared cluster apart, even
	// when an earlier run died before its cleanup.
	prefix := []byte(fmt.Sprintf("kvtest/%s/%016x/", t.Name(), rand.Uint64()))
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	e := &env{T: t, db: db, f: f, ctx: ctx, prefix: prefix}
	t.Cleanup(func() {
		// t.Context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r := e.all()
		if err := db.Transact(ctx, func(tx kv.Tx) error {
			tx.ClearRange(r)
			return nil
		}); err != nil {
			t.Errorf("clearing the test's keys: %v", err)
		}
	})
	return e
}

// k returns the test's key for name.
func (e *env) k(name string) []byte {
	return append(append(make([]byte, 0, len(e.prefix)+len(name)), e.prefix...), name...)
}

// r returns the range of the test's keys that start with name.
func (e *env) r(name string) kv.Range {
	r, err := kv.PrefixRange(e.k(name))
	if err != nil {
		e.Fatal(err)
	}
	return r
}

// all returns the range of every key of the test.
func (e *env) all() kv.Range { return e.r("") }

// name strips the test's prefix from key, for readable failures.
func (e *env) name(key []byte) string {
	if bytes.HasPrefix(key, e.prefix) {
		return string(key[len(e.prefix):])
	}
	return fmt.Sprintf("%q", key)
}

// names returns the keys of kvs without the test's prefix.
func (e *env) names(kvs []kv.KeyValue) []string {
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = e.name(kv.Key)
	}
	return out
}

// transact runs fn through the retry loop and fails the test on error.
func (e *env) transact(fn func(tx kv.Tx) error) {
	e.Helper()
	if err := e.db.Transact(e.ctx, fn); err != nil {
		e.Fatalf("Transact: %v", err)
	}
}

// put commits key-value pairs given as alternating names and values.
func (e *env) put(pairs ...string) {
	e.Helper()
	if len(pairs)%2 != 0 {
		e.Fatal("put needs key-value pairs")
	}
	e.transact(func(tx kv.Tx) error {
		for i := 0; i < len(pairs); i += 2 {
			tx.Set(e.k(pairs[i]), []byte(pairs[i+1]))
		}
		return nil
	})
}

// get reads the committed value of the test's key name (nil: absent).
func (e *env) get(name string) []byte {
	e.Helper()
	return e.getKey(e.k(name))
}

// getKey reads the committed value of key (nil: absent).
func (e *env) getKey(key []byte) []byte {
	e.Helper()
	v, err := kv.ReadTransact(e.ctx, e.db, func(tx kv.ReadTx) ([]byte, error) {
		return tx.Get(key)
	})
	if err != nil {
		e.Fatalf("Get %s: %v", e.name(key), err)
	}
	return v
}

// scan reads the committed key-values in r.
func (e *env) scan(r kv.Range) []kv.KeyValue {
	e.Helper()
	kvs, err := kv.ReadTransact(e.ctx, e.db, func(tx kv.ReadTx) ([]kv.KeyValue, error) {
		return tx.GetRange(r, kv.RangeOptions{})
	})
	if err != nil {
		e.Fatalf("GetRange: %v", err)
	}
	return kvs
}

// wantValue fails the test unless the committed value of name is want
// (nil: absent).
func (e *env) wantValue(name string, want []byte) {
	e.Helper()
	if got := e.get(name); !sameValue(got, want) {
		e.Errorf("%s = %s, want %s", name, show(got), show(want))
	}
}

// wantKeys fails the test unless the committed keys in r are exactly names.
func (e *env) wantKeys(r kv.Range, names ...string) {
	e.Helper()
	if got := e.names(e.scan(r)); !slices.Equal(got, names) {
		e.Errorf("keys = %v, want %v", got, names)
	}
}

// begin starts a raw transaction that the test commits itself; it is
// cancelled when the test ends so that nothing is left open.
func (e *env) begin() kv.Transaction {
	e.Helper()
	tx, err := e.db.CreateTransaction(e.ctx)
	if err != nil {
		e.Fatalf("CreateTransaction: %v", err)
	}
	e.Cleanup(tx.Cancel)
	return tx
}

// commit commits a raw transaction and fails the test on error.
func (e *env) commit(tx kv.Transaction, what string) {
	e.Helper()
	if err := tx.Commit(); err != nil {
		e.Fatalf("%s: Commit: %v", what, err)
	}
}

// wantErr fails the test unless err matches target.
func (e *env) wantErr(err, target error, what string) {
	e.Helper()
	if !errors.Is(err, target) {
		e.Errorf("%s: err = %v, want %v", what, err, target)
	}
}

// await waits for ch to close, failing the test after waitTimeout.
func (e *env) await(ch <-chan struct{}, what string) {
	e.Helper()
	select {
	case <-ch:
	case <-time.After(waitTimeout):
		e.Fatalf("%s: not ready after %v", what, waitTimeout)
	}
}

// closed reports whether ch is closed now, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func sameValue(a, b []byte) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}

// show formats a value for a failure message: absent, printable text, or
// hex, shortened when long.
func show(v []byte) string {
	if v == nil {
		return "<absent>"
	}
	s := fmt.Sprintf("%q", v)
	if strings.ContainsRune(s, '\\') {
		s = fmt.Sprintf("%x", v)
	}
	if len(s) > 80 {
		s = fmt.Sprintf("%s… (%d bytes)", s[:60], len(v))
	}
	return s
}
