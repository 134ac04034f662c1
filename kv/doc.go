// Package kv is jobstage's transactional, ordered key-value contract: the
// transaction model of FoundationDB, which every backend provides and the
// jobs layer relies on.
//
// # Transactions
//
// A transaction reads at a read version and buffers its writes. At commit
// the key ranges it read (point reads, range reads up to what they
// returned, and explicit read conflict ranges) are checked against every
// write committed after its read version; on overlap the commit fails with
// not_committed (1020). Committed transactions are serializable in commit
// order. Reads see the transaction's own writes. Snapshot reads
// (Tx.Snapshot) add no read conflicts. Atomic mutations add a write
// conflict but no read conflict, so concurrent increments of one counter
// never conflict.
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
// A transaction that failed with commit_unknown_result (1021) may have
// committed; Transact retries it like FoundationDB's bindings do, so a
// function whose effects must happen once checks a marker it writes.
//
// # Limits and errors
//
// Every backend enforces FoundationDB's limits with its codes: keys up to
// MaxKeySize, values up to MaxValueSize, transactions up to
// MaxTransactionSize, and a lifetime (5 s on FoundationDB) after which reads
// and commits fail with transaction_too_old. Errors are *Error values with
// a code; errors.Is compares codes, IsRetryable and IsMaybeCommitted are
// FoundationDB's error predicates.
//
// # Backends
//
// A Backend (kv/embedded, kv/fdb, or a wrapper such as kvtest's fault
// injector) supplies transactions; NewDB adds the retry loop. The
// conformance suite in kv/kvtest defines what a backend must do.
package kv
