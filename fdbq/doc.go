// Package fdbq is jobstage's jobs layer: every job operation as a
// transactional function over package kv, so it runs alone or inside the
// caller's transaction and behaves the same on the embedded store and on
// FoundationDB. The design is CouchDB's couch_jobs, finished, with the
// lifecycle of honeydew and EctoJob.
//
// # States
//
//	          Add                 Accept               Finish
//	(none) ─────────▶ pending ─────────────▶ running ─────────▶ finished (succeeded)
//	                    ▲  ▲                  │ │ │
//	                    │  └── Fail (attempts │ │ └─ Fail, last attempt ─▶ finished (failed)
//	                    │       left), monitor│ │
//	                    │       timeout,      │ └─── Cancel ─────────────▶ finished (canceled)
//	                    │       Resubmit,     │
//	                    │       Release ◀─────┘
//	                    └──────── Add (finished: re-enqueue), Requeue (failed, canceled)
//
// A running job is held under a lock, a random token made by Accept.
// Heartbeat, Finish, Fail and Resubmit read the job and check the lock in
// their transaction; if the job was recycled, canceled, removed or finished
// they fail with ErrHalt and write nothing. Because they can run inside the
// worker's own transaction, the worker's writes commit if and only if it
// still held the job: exactly-once effects for data in the store.
//
// Add on an existing id resubmits (couch_jobs): a pending job is
// rescheduled and its data replaced, and nothing is written if nothing
// changed; a running job is flagged and goes back to pending when its
// worker finishes or fails; a finished job is added again.
//
// # Names
//
// A type name is 1 to MaxTypeNameSize (128) bytes of ASCII letters, digits,
// '_', '-' and '.', starting with a letter or a digit. Besides a key in the
// store, it is a metric label, a segment of the HTTP API's paths, an
// argument of the jobstage command and a segment of configuration
// environment variables; this set needs no escaping in any of them. A job
// id is 1 to MaxIDSize (256) bytes of valid UTF-8 without control
// characters (C0, DEL, C1): the tuple layer's strings are Unicode, and JSON
// answers turn bytes that are not UTF-8 into U+FFFD, after which the job
// could not be named again. ValidateTypeName and ValidateID say what is
// wrong with a name and at which byte.
//
// Every call that takes a name checks it, with ErrInvalidJob and before it
// reads the store: Add, AddBatch, SetType and DeclareType refuse to create
// a bad name, and the lookups (Get, List, Count, Wait, Cancel, Remove,
// Requeue, Accept, GetType, Pause, Resume, OldestDue) refuse one the same
// way rather than answer that it is not found.
//
// # Data model
//
// Every key is a tuple (package kv/tuple) under the queue's prefix P
// (Options.Prefix, default ("jobstage",)), so several deployments share a
// store without seeing each other.
//
//	(P, 1, type, id)                      job record (state, outcome, data, result, error,
//	                                      progress, priority, attempts, max attempts, retry policy
//	                                      override, lock, last lock exit, last add, resubmit flag and time,
//	                                      added/scheduled/started/heartbeat/finished/expires times), in
//	                                      a binary form whose first byte names the format (codec.go;
//	                                      0x01 now; records written as JSON before it, '{', still read)
//	(P, 2, type, -priority, sched_ms, id) ready index: pending jobs that were due when indexed,
//	                                      highest priority first, then earliest; the value is a copy
//	                                      of the job record when it is at most 2 KB (else empty), so
//	                                      Accept reads no record separately
//	(P, 3, type)                          int64 LE, atomic add: bumped when a job becomes pending or
//	                                      the type's settings change; acceptors and the monitor watch it
//	(P, 4, type)                          int64 LE, atomic add: bumped by every change to a job of
//	                                      the type; Wait and the monitor watch it
//	(P, 5, type, expires_ms, id)          ""   running jobs by activity deadline; the monitor scans
//	                                      the entries before now
//	(P, 6, type, finished_ms, id)         ""   finished jobs by finish time; retention sweeps them
//	(P, 7, type, state)                   int64 LE, atomic add: jobs per state, for O(1) counts
//	(P, 8, type)                          type settings: JSON (activity timeout, retry policy,
//	                                      paused, retention); the type registry
//	(P, 9, claim_ms, lock)                JSON list of ids: what one Accept took, so that a retry
//	                                      after commit_unknown_result returns the same jobs; the
//	                                      monitor deletes claims older than ClaimTTL
//	(P, 10)                               int64 LE, atomic add: bumped when a type is registered or
//	                                      its settings change; an idle monitor watches it
//	(P, 11, type, sched_ms, -priority, id)
//	                                      scheduled index: pending jobs that were not due when
//	                                      indexed, earliest first, then highest priority; the value
//	                                      as in the ready index
//
// Every state change goes through one function that rewrites the record
// and moves its index entry and counters together, so the indexes never
// disagree with the records. A pending job's entry is in the ready index
// if the job was due by the clock of the process that wrote it, else in
// the scheduled index; only Accept moves an entry from one to the other
// without a change of the job (see below), rewriting it under its other
// key with the same copy of the record. Versions before the scheduled
// index kept every pending job in (P, 2); Accept moves the entries there
// that are not due to the scheduled index as it meets them, so a store
// they wrote is used as it is, with no migration. They must not run
// alongside this one, though: they know nothing of the scheduled index,
// and would leave its entry behind when they change a job indexed there.
//
// couch_jobs finds stale jobs by versionstamps (an activity index keyed by
// the versionstamp of each job's last update, compared after a timeout
// with the type's activity versionstamp). fdbq keys the activity index by
// deadline instead: a sweep is one range read of the entries before now,
// each job can carry its own deadline, and tests drive it with an injected
// clock. The cost is reliance on clocks agreeing within the activity
// timeout, which scheduled times need anyway.
//
// A sweep skips a job it cannot change, a record or index entry that does
// not decode or a record that cannot be stored, and goes on with the rest
// of the type: one bad job must not keep every job that expires after it
// running. It logs the job when first skipped and counts it in
// SweepStats.Skipped at every sweep; each sweep reads it once.
//
// Job data is stored inline in the record, as in couch_jobs: data, result,
// error and progress together are limited to MaxDataSize (90,000 bytes),
// inside FoundationDB's 100,000-byte value limit. Larger data is refused
// with ErrDataTooLarge; it is not split into chunks. Store large payloads
// elsewhere and put their key in the job.
//
// Only what the caller stores is refused: data (Add, Heartbeat), progress
// (Heartbeat) and result (Finish, which then leaves the job running; its
// worker should fail it saying why, as package consumer does). The error
// is written by the transitions themselves, Fail's cause or the monitor's
// "activity timeout", and is cut to fit instead: to the room the others
// leave and at most 16 KB, keeping its end after "…", on a character
// boundary, down to nothing for a job whose data is at the limit. Were it
// refused, such a job could be neither failed by its worker nor taken back
// by the monitor, and would stay running for good.
//
// # Accept and contention
//
// An acceptor snapshot-reads (no read conflicts) the first Window entries
// of the ready index and the first max(Window, DefaultWindow) entries of
// the scheduled index that are due (or, with a MaxScheduledAt after now,
// scheduled by it): two range reads of a bounded number of keys, however
// many priorities and scheduled times the type's jobs have, and a third of
// one key, the first entry not yet due, when it takes nothing and waits.
// (One index by priority, then time, made an accept step over every
// priority band whose jobs were not yet due, a read each.) It merges them
// in ready index order, picks Max of the first Window at random, and adds
// a read conflict only on the jobs it takes (couch_jobs' and
// FoundationDB's queue recipe: here on their records, which change
// whenever the jobs do, and on the entries it took them from, which a
// move clears), so concurrent acceptors conflict only when they pick the
// same job. Within a window the order is therefore not strict;
// AcceptOptions.Window = Max makes it strict among the due jobs the two
// reads see, which is all of them unless more came due in the scheduled
// index than one read of it holds. An accept with MaxScheduledAt before
// now gives the ready index's jobs due after its bound places of its
// window all the same, and may see fewer than Window jobs it can take.
//
// An accept that saw entries in the wrong index moves them, after its
// commit, in a transaction of its own, which takes nothing from the
// accept if it fails: when its read of the scheduled index was all due
// entries, the first of that index's due entries go to the ready index,
// so that jobs coming due in bulk are back in priority order after a few
// accepts; when entries of the ready index it read are not due by its
// clock, the ones among that index's first go to the scheduled index, and
// an accept that took nothing looks again at once. A move has a read
// conflict on the record of each job it moves, so it fails if the job
// changed after it read the entry; moves of one entry by two accepts write
// the same keys and do not conflict.
//
// Clocks that disagree shift when a job is taken, never whether: a job is
// due when the clock of the acceptor taking it says so, so an acceptor
// ahead takes it early and one behind late, by their skew. The writer's
// clock only chooses the index the job waits in, and acceptors move it to
// the other when their clocks disagree with that choice.
//
// A pending job that an accept cannot take (its record, or the copy in
// its entry, does not decode, or its entry's key is not one fdbq writes)
// is passed over: the accept picks another in its place, and logs the job
// once (Options.Logger). The queue remembers such entries, up to a bound,
// and later accepts pass over them without giving them a place of the
// window, reading as many more keys; one whose entry changes is tried
// again, and so, after a minute, is one without a copy of its record. Such
// a job stays pending.
//
// With nothing due, Accept watches the type's watch key in the same
// transaction and, when MaxScheduledAt is zero (the bound is now, and
// moves), sets a timer for the earliest job not yet due. A bound that is
// set does not move, so nothing after it can become acceptable: such an
// accept waits for the watch key alone. No wait polls: while nothing
// changes, a waiting Accept or Wait makes no transactions (nor does the
// Monitor, but for a read a minute that finds types registered since), and
// a watch that keeps failing with a retryable error is read again after a
// growing backoff (a watch that fails otherwise ends the call with its
// error).
//
// A random pick keeps acceptors of one job at a time apart, but not
// acceptors of large batches: two accepts of 256 jobs from a window of
// 1024 almost surely share a job, and one of them fails whole (a third of
// a pipeline's accepts did, with four in flight). Accepts of one process
// that run at once therefore share an AcceptGroup (a producer's accept
// loops do): each skips the jobs the others picked and have not committed
// yet, so they do not conflict with each other, and their window need
// only be as wide as the batch plus what the others hold.
//
// # Answers under commit_unknown_result
//
// Every operation run through kv.DB.Transact commits at most once: after a
// commit_unknown_result the store's commit marker tells the retry whether
// the commit applied, and if it did the operation is not run again. So
// each operation answers what it did, whatever other clients did between
// the commit and the retry: ErrHalt, ErrWrongState and ErrNotFound mean
// nothing of the call (nor of the caller's writes in the same
// transaction) committed, success means it committed exactly once.
//
// The operations also keep marks of their own from before the store did
// this, which a caller that commits its transactions itself still
// benefits from: Finish, Fail and Resubmit record which lock left the
// running state and how ("lock:finish"), and a retry that finds its own
// exit recorded writes nothing; Accept makes its lock and claim key before
// the transaction, and a retry that finds its claim returns the jobs the
// first attempt took; Add records a token made before the transaction in
// every job it writes.
package fdbq
