//go:build fdb

// Package fdb is a kv.Backend on a FoundationDB cluster, through the
// official Go bindings (github.com/apple/foundationdb/bindings/go/src/fdb)
// at API version 730.
//
// # Build
//
// Every file carries the build tag fdb, because the bindings use cgo and
// need libfdb_c and its headers (the foundationdb-clients package of
// release 7.3 or later). Without the tag the package is empty and the rest
// of the module builds without FoundationDB:
//
//	go test -tags fdb ./kv/fdb/...
//
// # Mapping
//
// kv mirrors FoundationDB, so the adapter is thin: a kv.Transaction is an
// fdb.Transaction, and each method calls its counterpart.
//
//   - Get, GetRange and Iterate read through the transaction, and their
//     Snapshot() counterparts through fdb.Snapshot. GetRange fetches with
//     StreamingModeWantAll, Iterate pages with StreamingModeIterator. A
//     negative Limit means no limit, as 0 does.
//   - Set, Clear, ClearRange, the atomic mutations (kv numbers them as
//     FoundationDB does), SetVersionstampedKey and SetVersionstampedValue
//     (API 520+ offset format), and the conflict-range calls are passed
//     through. FoundationDB itself makes a bad write (key too large, system
//     key, inverted range, …) fail the later reads and the commit.
//     Atomic with a type kv does not know, and a conflict range that
//     FoundationDB rejects, cannot return their error: the adapter records
//     it and returns it from the next read and from Commit, which then
//     cancels the transaction instead of committing.
//   - Watch wraps the watch future in a kv.ChanWatch resolved by a
//     goroutine; Cancel cancels the future.
//   - Versionstamp requests FoundationDB's versionstamp future on its first
//     call, which must come before Commit (as in FoundationDB; a first call
//     after Commit fails with transaction_invalid_version, 2020). The
//     kv.Future resolves when Commit returns, with the commit's error if it
//     failed, and with no_commit_version (2021) after a read-only commit.
//   - Transact and ReadTransact run fn on the same transaction without
//     committing, like fdb.Transaction.Transact: the Transactor
//     composition pattern.
//   - Commit waits for the commit future; Cancel cancels the transaction,
//     and does nothing once Commit succeeded.
//
// # Errors
//
// Every fdb.Error becomes a *kv.Error with the same code and the
// library's description as Detail, so errors.Is(err, kv.ErrNotCommitted),
// kv.IsRetryable and kv.IsMaybeCommitted work. Retryability is then kv's
// table of codes, not the C library's fdb_error_predicate. Errors that are
// not fdb.Errors (the network thread stopped, …) pass through.
//
// # Contexts
//
// Begin's ctx bounds the transaction: when it ends before the transaction
// committed or was cancelled, the adapter cancels the fdb.Transaction, so
// that blocked reads and the commit return. Their transaction_cancelled
// error then matches ctx.Err() (context.Canceled or
// context.DeadlineExceeded) as well as kv.ErrTransactionCancelled. As in
// FoundationDB, a commit cancelled while in flight may still have applied.
// A watch outlives its transaction once committed; its Wait takes its own
// ctx.
//
// Store.Close cancels the Store's open transactions (their errors then
// match kv.ErrClosed as well) and fails its pending watches with
// kv.ErrClosed.
//
// # Not mapped
//
// FoundationDB features without a kv counterpart are not exposed: key
// selectors and GetKey, read versions, transaction and database options
// other than Options.TransactionTimeout, tenants, locality, size
// estimates, and the bindings' own retry loop. kv.DB retries with its own
// jittered backoff instead of fdb.Transaction.OnError, so the C client's
// per-error backoff (e.g. for process_behind) is not applied, and each
// retry starts a new transaction.
//
// # Process-wide state
//
// The first Open selects API version 730 for the process (a process can
// select only one) and starts the bindings' network thread, which runs
// until the process exits. The bindings cache one database handle per
// cluster file path; Stores opened on one path share it and the last Close
// destroys it. Code that opens the same path through the bindings directly
// and closes it would destroy the Stores' handle.
package fdb
