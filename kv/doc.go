// Package kv is jobstage's transactional, ordered key-value contract: the
// transaction model of FoundationDB, which every backend provides and the
// jobs layer relies on. Where a rule below could be read two ways,
// FoundationDB's client of release 7.3 decides (fdbclient/
// ReadYourWrites.actor.cpp, NativeAPI.actor.cpp, bindings/c/fdb_c.cpp), and
// the conformance suite in kv/kvtest asserts what it does.
//
// # Transactions
//
// A transaction reads at a read version and buffers its writes. At commit
// the key ranges it read are checked against every write committed after
// its read version; on overlap the commit fails with not_committed (1020).
// Committed transactions are serializable in commit order. Reads see the
// transaction's own writes: every read equals the transaction's mutations,
// in the order it made them, applied to the database at its read version.
//
// A read adds read conflict ranges only where the database decided its
// result (RYW's updateConflictMap): a point read of a key, a range read the
// range, or, when a limit stopped it, the range up to the last key returned
// ([begin, keyAfter(last)) forward, [last, end) in reverse) — less the keys
// the transaction set or cleared and the ranges it cleared, which it knows
// without the database. A key under one of its atomic operations is read
// from the database and conflicts. Snapshot reads (Tx.Snapshot) add none.
// Atomic mutations add a write conflict but no read conflict, so concurrent
// increments of one counter never conflict. A transaction with no
// mutations and no write conflict ranges commits at once without
// resolution: it cannot conflict, and it has no versionstamp.
//
// # Committing once
//
// DB.Transact runs a function in a transaction, commits it, and retries it
// on retryable errors with jittered backoff, a retry limit and the
// caller's context. Both *DB and Tx are Transactors, so transactional
// functions compose: called with a Tx they run inside the caller's
// transaction and commit with it.
//
//	err := db.Transact(ctx, func(tx kv.Tx) error {
//		v, err := tx.Get(key)
//		if err != nil {
//			return err
//		}
//		tx.Set(key, kv.EncodeInt64(kv.DecodeInt64(v)+1))
//		return nil
//	})
//
// A commit can answer commit_unknown_result (1021) after it applied. A
// retry loop that simply runs the function again then applies it twice,
// and no per-operation token in a layer above protects the application's
// own writes in the same transaction. DB.Transact therefore commits each
// call at most once, with FoundationDB's recipe for idempotent
// transactions, done once at the bottom:
//
//   - Every attempt whose function wrote something also writes a commit
//     marker: a key of its own under Options.MarkerPrefix (one of 128
//     bucket bytes at random, 8 bytes of wall-clock seconds and 16 random
//     bytes: spread, so that no range's end takes every writing
//     transaction's marker) whose versionstamped value becomes the
//     commit's versionstamp.
//   - After a commit that may have committed (IsMaybeCommitted), the next
//     attempt first reads that marker in a transaction of its own. Present:
//     the earlier attempt applied, and Transact returns its success (and
//     its versionstamp) without running the function again. Absent: it did
//     not apply, and it no longer can — before FoundationDB's client
//     answers 1021 it commits a dummy transaction that conflicts with the
//     unknown one (NativeAPI.actor.cpp, tryCommit: commitDummyTransaction on
//     the transaction's self-conflicting range; not with the
//     causal_write_risky option, which jobstage never sets) — so the
//     function runs again under a new marker.
//   - A marker is garbage once its call returned. The DB clears garbage
//     markers in later transactions that write anyway (up to 256 each), and
//     about every quarter of Options.MarkerRetention one such transaction
//     also clears every marker older than the retention: markers left by a
//     process that died between a commit and its check. A marker is only
//     ever read a backoff after it was written, so the retention (an hour
//     by default) only has to exceed the clock difference between the
//     processes that share a store.
//
// Markers are keys of the user keyspace: a scan of all of it sees them,
// and a range clear over Options.MarkerPrefix while a call is between an
// unknown commit and its check makes that call apply twice. Leave the
// prefix to kv. A commit whose outcome can still change after it was
// answered — cluster_version_changed (1039), which FoundationDB's client
// gives while the commit it abandoned is in flight, or a commit cancelled
// or timed out while in flight — cannot be resolved by reading the
// marker: Transact then stops at once with an UnknownResultError. A commit
// made too large by the marker and the clears kv adds is run again with
// less (the clears, then the marker too); an unknown outcome of an
// attempt without a marker is reported the same way.
//
// A backend that commits at most once on its own (AtMostOnceBackend) gets
// no markers: the embedded store answers 1021 only when a write to its
// disk failed, and then refuses all further work, so there is no retry for
// a marker to protect. Its 1021 still makes Transact's error match
// ErrCommitUnknownResult.
//
// So when Transact returns nil, the last run of the function is the one
// that committed, exactly once. When it returns an error, nothing of the
// function's committed, unless the error matches ErrCommitUnknownResult
// (an *UnknownResultError: the call stopped, by its context, its retry
// limit or another error, before it could learn the outcome). Inside the
// function, tx.Versionstamp belongs to the call: it is the versionstamp of
// the attempt that committed, also when that attempt's commit answered
// 1021. A watch created by an attempt whose commit answered 1021 fails
// with that error even when the attempt is then found to have applied; a
// watch's error means "read again", never a lost change.
//
// FoundationDB 7.3's automatic_idempotency option does the same inside one
// commit call, but it is marked as not ready for general use, keeps its
// ids for days in the system keyspace, answers a retry that finds the id
// expired with yet another error, and does not exist on the embedded
// store or in the fault injector. The marker works on every backend, is
// modelled exactly by the fault injector (an applied 1021 leaves the
// marker for the retry to see), costs one small key per write transaction
// (plus a clear in a later one), and nothing at all for read-only ones or
// on the embedded store.
// Transactions a caller commits itself (CreateTransaction) are not
// covered.
//
// # Watches
//
// Tx.Watch(key) reads the key as Get does, read conflict included, and
// starts from the value the transaction sees (its own write, else the
// value at its read version). A write of the transaction itself after the
// watch fires it then and there (RYW's triggerWatches): a set or clear
// that changes the value, any atomic or versionstamped write; a watch so
// fired stays fired whatever becomes of the transaction. Other
// transactions' changes are reported once the watching transaction has
// committed, compared with the value it started from, so a change made
// between its read version and its commit fires it at once. If the commit
// fails, the watch fails with the commit's error. A watch is one-shot and
// can be cancelled. Watching a key over MaxKeySize, or in the system
// keyspace, fails.
//
// # Versionstamps
//
// Tx.Versionstamp is a future taken before the commit: ready with the
// versionstamp once the transaction committed, no_commit_version (2021)
// for one that had nothing to commit, transaction_invalid_version (2020)
// when the commit failed, transaction_cancelled when it was cancelled.
// Asked for once the commit has started it fails with used_during_commit
// (2017), also after a commit that succeeded
// (ReadYourWritesTransaction::getVersionstamp).
//
// # Limits and errors
//
// Every backend enforces FoundationDB's limits with its codes: keys up to
// MaxKeySize, values up to MaxValueSize, transactions up to
// MaxTransactionSize, and a lifetime (5 s on FoundationDB) after which reads
// and commits fail with transaction_too_old. A key longer than MaxKeySize
// cannot exist: reading one answers absent (with no conflict), clearing
// one does nothing, and range bounds longer than that cover the same keys
// as bounds cut to MaxKeySize+1 bytes; writing or watching one fails with
// key_too_large. A negative range limit fails with range_limits_invalid
// (2012); 0 means no limit.
//
// Errors are *Error values with a code; errors.Is compares codes.
// IsRetryable and IsMaybeCommitted are fdb_error_predicate's RETRYABLE and
// MAYBE_COMMITTED of FoundationDB 7.3 (bindings/c/fdb_c.cpp), plus the two
// codes 7.4 adds (1235 transaction_throttled_hot_shard, 1242
// transaction_rejected_range_locked); 1223 proxy_tag_throttled is still
// in both releases' predicates, and later ones dropped it.
//
// # Backends
//
// A Backend (kv/embedded, kv/fdb, or a wrapper such as kvtest's fault
// injector) supplies transactions; NewDB adds the retry loop and the
// commit markers. The conformance suite in kv/kvtest defines what a
// backend must do.
//
// # Examples
//
// The Example composes transactional functions into one transaction;
// ExampleTransact returns a function's result, ExampleTx_watch waits on a
// key, and ExampleError matches errors by code.
package kv
