// Package embedded is jobstage's default store: FoundationDB's transaction
// semantics (see package kv) in one process, durable on disk, on the Pebble
// storage engine.
//
// # Commit path
//
// FoundationDB splits a commit between commit proxies, which batch
// transactions and assign versions, and resolvers, which detect conflicts.
// Here one goroutine, the committer, does both:
//
//  1. It takes the first transaction waiting to commit and every other one
//     already waiting (up to Options.MaxBatch): the batch.
//  2. It gives the batch the next commit version. Each transaction that
//     passes resolution gets its order within the batch; version (8 bytes,
//     big-endian) and order (2 bytes) are its versionstamp.
//  3. It resolves the transactions in arrival order: a transaction whose
//     read ranges overlap a write committed after its read version —
//     including writes of earlier transactions in the same batch — fails
//     with not_committed. A transaction whose read version is older than
//     what the resolver still remembers fails with transaction_too_old.
//  4. It writes the survivors, and the new version under a system key, into
//     one Pebble batch, evaluating atomic mutations against the latest
//     value (the committer is the only writer, so that value is exact), and
//     hands it to Pebble without waiting for the fsync
//     (ApplyNoSyncWait). Right after, it takes a Pebble snapshot: it shows
//     exactly this version.
//  5. A second goroutine waits for each batch's fsync in version order, then
//     publishes the version and its snapshot to new transactions, fires the
//     watches on keys the batch changed, and answers the committers.
//
// While batch N syncs, batch N+1 is resolved and written; Pebble's log
// writer syncs everything that reached it during one fsync with the next.
// So concurrent durable commits share fsyncs (group commit). An earlier
// design waited for each batch's fsync before taking the next batch; a
// committer that came back a few microseconds after its answer then missed
// the next batch, and 8 concurrent committers got fewer commits per second
// than one.
//
// # Reads
//
// A transaction takes the last published version and its snapshot (shared,
// reference-counted). Pebble has already applied later batches that are
// not yet durable, but the snapshot hides them, so no transaction reads
// data that a crash could still take away. Reads merge the snapshot with
// the transaction's write buffer (a B-tree of net effects per key, plus the
// cleared ranges) and record the read conflict ranges: a point read adds
// its key, a range read the range, or, when a limit cut it short, the part
// up to the last key returned.
//
// # Resolver
//
// The resolver remembers, for each key written by a recent batch, the last
// version that wrote it (FoundationDB's resolvers keep the same in a
// versioned skip list), in a B-tree so range reads are checked by a range
// scan; cleared ranges and explicit write conflict ranges, which are rare,
// are kept in a list. A batch is forgotten once no live transaction has a
// read version before it, or once it is older than the transaction
// lifetime. Transactions that old fail with transaction_too_old, as in
// FoundationDB, whose resolvers keep five seconds of history.
//
// # Watches
//
// Watch records the key with the value the transaction sees (its own
// write, if it wrote the key) and a read conflict where that value came
// from the snapshot. A later write of the transaction to the key fires the
// watch at once when it changes that value (an atomic or versionstamped
// write always does). At commit the committer registers the rest with that
// value. After each durable batch the watches on keys it changed fire if
// the value now differs, and a newly registered watch fires at once if the
// key changed between its transaction's read version and its commit. A
// transaction that wrote nothing never reaches the committer: its commit
// returns at once and registers its watches against the latest published
// values itself, under the lock the sync goroutine holds while it
// publishes a version and fires that version's watches, so no change falls
// between the comparison and the registration. A watch whose transaction
// does not commit fails with that transaction's error.
//
// # Transaction lifetime
//
// A transaction holds a snapshot and reservations for its watches. One
// that is neither committed nor cancelled within the transaction lifetime
// is ended by a timer: the snapshot and the reservations are released, its
// watches fail with transaction_too_old, and so does every later use.
//
// # Durability and recovery
//
// A commit is acknowledged only after its batch's fsync. A batch is one
// Pebble batch, so after a crash Pebble's log replay restores whole batches
// or none: no partial transaction is ever visible. The commit version is
// stored in each batch, so the first version after a restart is above
// every versionstamp handed out before.
//
// Options.NoSync acknowledges a batch once Pebble has it in memory, before
// its log record reaches the operating system: a crash loses the last
// acknowledged batches (a suffix of the log, so what survives is a prefix
// of the commits). Their versions would be handed out again after the
// restart, so Open in NoSync mode first moves the commit version
// NoSyncVersionGap ahead and syncs it.
// If a write or sync fails, the store answers commit_unknown_result to the
// transactions in flight and refuses further work: it does not build on a
// state it cannot know.
//
// # Directory lock
//
// Open takes an exclusive flock(2) on jobstage.lock in the data directory
// and writes its pid there. A second Open, from another process or the
// same one, fails with ErrLocked naming the holder. The kernel drops the
// lock when the process dies, so a crash leaves nothing to clean up.
//
// # Examples
//
// The Example commits, closes and reopens a store in a directory;
// ExampleOpen_locked shows the directory lock and ExampleStore_conflict a
// conflict.
package embedded
