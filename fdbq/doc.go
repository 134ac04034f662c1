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
// A worker ends an attempt with End, which says in its Ending how
// (AttemptEnd): AttemptSucceeded finishes the job with its result;
// AttemptFailed counts the attempt and runs the job again after the retry
// policy's backoff, or at Ending.At, or finishes it failed after its last
// attempt; AttemptCanceled finishes it canceled whatever attempts it has
// left; AttemptSnoozed gives it back to pending, the attempt not counted
// (Job.Snoozes counts it). End returns Ended, what it did to the job (its
// state, outcome, next run and whether it was retried), read in End's
// transaction and true once that commits. Finish and Fail are End with
// AttemptSucceeded and AttemptFailed.
//
// A running job is held under a lock, a random token made by Accept
// (followed by "@" and the AcceptOptions.Holder that named itself, which
// Job.Holder shows; the token alone fences). Heartbeat, End (Finish, Fail) and Resubmit read the job and check the lock in
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
// Types are registered before jobs are added to them (Add of an unknown
// type fails with ErrUnknownType). SetType writes a type's settings as
// given, for an operator; DeclareType is what a program calls at start:
// a type that exists keeps an operator's pause, and settings that do not
// decode are replaced.
//
// Example_addAcceptFinish shows a job's whole life; ExampleQueue_Add_inTransaction
// a job added with the caller's own writes; ExampleQueue_WaitOne waiting
// for a job to finish.
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
// could not be named again. A new job's id is neither "." nor "..", the
// dot segments that URL paths remove. ValidateTypeName and ValidateID say
// what is wrong with a name and at which byte.
//
// Every call that takes a name checks it, with ErrInvalidJob and before it
// reads the store: Add, AddBatch, SetType and DeclareType refuse to create
// a bad name, and the lookups (Get, List, Count, Wait, Cancel, Remove,
// Requeue, Accept, GetType, Pause, Resume, OldestDue) refuse one the same
// way rather than answer that it is not found; they take a job id by
// ValidateLookupID's rules, so that a job an earlier version stored as "."
// or ".." is still reached.
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
//	(P, 2, type, key, shard, -priority, sched_ms, id)
//	                                      ready index: pending jobs that were due when indexed, by
//	                                      zone (fairness key and shard, see Fairness), then highest
//	                                      priority first, then earliest; the value is a copy of the job
//	                                      record when it is at most 2 KB (else empty), so Accept reads
//	                                      no record separately. A zone's entries are a range of their
//	                                      own, which FoundationDB can put on a server of its own
//	(P, 3, type)                          int64 LE, atomic add: the type's watch key, bumped when a zone
//	                                      gets its mark (not at every add), when a job is scheduled for
//	                                      later or the type's settings change, once a transaction
//	                                      however many zones it marks; acceptors watch it
//	(P, 4, type)                          int64 LE, atomic add: the type's change key, bumped by a
//	                                      transaction that changes jobs of the type while some process
//	                                      holds an interest entry (P, 18, type, …), never otherwise;
//	                                      a Wait that does not watch the records, an accept passing
//	                                      over zones it cannot take from and an idle monitor watch it
//	                                      (see Waking)
//	(P, 5, type, expires_ms, id)          ""   running jobs by a deadline of the worker's clock, as
//	                                      written before version 0x02 records; sweeps move them to (P, 12)
//	(P, 6, type, lane, finished_ms, id)   ""   finished jobs by lane (laneOf(id), as in (P, 12)), then
//	                                      finish time; retention sweeps them lane by lane, and List
//	                                      merges the lanes in finish order. In one range every finish
//	                                      would land on its last shard
//	(P, 7, type, state, shard)            int64 LE, atomic add: jobs per state, spread over 16 shards
//	                                      by a hash of the job's id (no key is written by every job of
//	                                      the type) and read by summing the range (P, 7, type, state),
//	                                      which also holds the unsharded count of stores written before
//	(P, 8, type)                          type settings: JSON (activity timeout, retry policy,
//	                                      paused, retention); the type registry
//	(P, 9, claim_ms, lock)                JSON list of ids: what one Accept took, so that a retry
//	                                      after commit_unknown_result returns the same jobs; the
//	                                      monitor deletes claims older than ClaimTTL
//	(P, 10)                               int64 LE, atomic add: bumped when a type is registered or
//	                                      its settings change; an idle monitor watches it
//	(P, 11, type, sched_ms, -priority, key, shard, id)
//	                                      scheduled index: pending jobs that were not due when
//	                                      indexed, earliest first, then highest priority, and the zone
//	                                      each goes to when due; the value as in the ready index
//	(P, 12, type, lane, timeout_ms, read_version, id)
//	                                      token (8 bytes) of the renewal's stamp: running jobs by lane
//	                                      (a hash of the id, one of 16), then by the activity timeout
//	                                      their last renewal (Accept, Heartbeat) gave them, then by the
//	                                      read version of that renewal's transaction, which the record
//	                                      keeps. Within a lane every renewal lands after the last; over
//	                                      16 lanes a type's renewals land on 16 ranges, not one
//	(P, 13, type, lane, read_version, token)
//	                                      versionstamp of a renewing transaction's commit (versionstamped
//	                                      value), the lane the token's residue mod 16, read by the monitor
//	                                      alone, which clears those older than every running job's entry
//	(P, 14)                               uint64 LE: the store's layout version (Layout, now 3), written
//	                                      by the first CheckLayout; a store with types and without it is
//	                                      in layout 1, which CheckLayout migrates (Migrate), as it does
//	                                      layout 2 (finished entries by time alone). A version
//	                                      that changes the model raises it, and one that meets a layout
//	                                      it does not know refuses the store (ErrLayout)
//	(P, 15, type, key, shard)             8 random bytes, new at each marking (empty in stores written
//	                                      before them): the zone marks, the zones with ready jobs, which
//	                                      acceptors choose from. An add to the ready index writes the
//	                                      zone's mark when it is absent (read with a conflict), and bumps
//	                                      (P, 3); an accept that finds a zone empty, or takes every entry
//	                                      of a zone it read to its end, clears its mark, with a read
//	                                      conflict on the zone's range, so that a zone with ready jobs
//	                                      always has its mark (the simulation checks it at every run) and
//	                                      a zone's next job after it was emptied marks it anew. Two reads of the marks tell by the values which zones were
//	                                      marked between them (ReadyZones.Fresh)
//	(P, 16, type, key, shard)             int64 LE, atomic add: the running jobs of a fairness key, by
//	                                      the shard of their zone, read by summing (P, 16, type, key)
//	                                      with a conflict by an accept of a key with MaxRunning. Jobs
//	                                      without a key are not counted
//	(P, 17, type, key)                    16 bytes: a key's rate window (its start, ms LE, and the jobs
//	                                      started in it, LE), read with a conflict and written by an
//	                                      accept of a key with MaxStarts
//	(P, 18, type, holder)                 tuple (expiry_ms): a process's interest in the type's change
//	                                      key (holder: random, one per Queue), written before it reads
//	                                      what it then waits for and cleared when it is done; renewed
//	                                      every half minute; a monitor clears one a minute past its
//	                                      expiry. Read with a conflict by every transaction that changes
//	                                      jobs of the type, once a transaction and type
//	(P, 20, type, digest)                 the id of the job that holds a unique digest (see Unique
//	                                      jobs): read with a conflict and written by an add with
//	                                      NewJob.Unique; cleared when that job is removed (by Remove or
//	                                      retention) or given other unique data
//	(P, 21, name)                         JSON: a periodic schedule's definition and state (see
//	                                      Periodic jobs): read with a conflict and written by each tick
//	                                      transaction, by declare, pause, resume; cleared by delete
//	(P, 22)                               int64 LE: bumped by every declare, pause, resume and delete
//	                                      of a schedule; schedulers watch it
//	(P, 23, wf, 0)                        JSON: a workflow's record: policy, creation, canceled (see
//	                                      Workflows); read by every step of the workflow, so small
//	(P, 23, wf, 1, name)                  JSON: one of its jobs: the job to add (type, options, and its
//	                                      data until the job is added), its dependencies, how many are
//	                                      not done, its state (waiting, added, done with an outcome,
//	                                      skipped) and whether its first finish was given to its
//	                                      dependents
//	(P, 23, wf, 4)                        JSON: the workflow's jobs' names in order, for inspection
//	                                      and cancel
//	(P, 23, wf, 2, parent, child)         empty: child depends on parent, read by a range when parent
//	                                      finishes
//	(P, 23, wf, 3)                        int64 LE: the jobs done or skipped, by atomic adds (no
//	                                      conflict between siblings); WaitWorkflow watches it
//	(P, 24, type, vs, n)                  tuple (id, state, outcome, attempts, ms): the event log of
//	                                      a followed type, by the versionstamp of the change's
//	                                      commit and its place in it (see Follow)
//	(P, 25, type)                         int64 LE: how many interest entries are event log holds
//	(P, 26, type)                         versionstamp and place: the log's floor; it may miss
//	                                      changes up to there
//	(P, 27, type, hour, lane, minute, kind)
//	                                      int64 LE: the type's history (see History): how many attempts
//	                                      ended as kind (succeeded, failed, canceled, retried, recycled)
//	                                      in the minute (ms/60000 by the writer's clock; hour is
//	                                      minute/60), by atomic adds in the ending's transaction. A job
//	                                      adds to its lane's key (as in (P, 12)): within an hour each
//	                                      lane is a range of its own whose new minutes land at its end,
//	                                      so a busy type's history is written on 16 ranges, not on the
//	                                      newest minute's one. A monitor clears whole hours, those that
//	                                      ended Options.HistoryRetention ago, with one range clear
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
// # Events
//
// Follow reports the changes of a type's jobs in commit order, as they
// commit, woken by watches. While a type is followed each change of one of
// its jobs also writes an entry to the type's event log, keyed by its
// commit's versionstamp: the log is kept only then (its holds are interest
// entries, so a change of a type nobody watches reads one key, as before),
// and for about a minute after the last follower left, so that one that
// comes back with its last Cursor misses nothing. Past that, or past
// Options.EventRetention (the monitor trims older events), the log's floor
// tells a returning follower that it may have missed changes: it gets an
// EventReset and should read again what it shows.
//
// # Fairness
//
// A job may carry a fairness key (NewJob.Key): a tenant, a customer, a
// group. The pending jobs of a type wait in zones: a zone is a key and a
// shard of it, the hash of the job's id modulo the key's zone count
// (TypeSettings.Zones, a key's KeyPolicy.Zones; DefaultZones is 16) when
// the job was added. An accept chooses up to 8 zones of different keys at
// random, each key with probability in proportion to its weight
// (KeyPolicy.Weight), from the zone marks (P, 15) as last read by the
// Queue (read again when the type's watch key has moved, at most every
// 2 ms while the zones known give jobs, and at once before an accept
// concludes there is nothing). It gives each chosen key a share of its
// batch in proportion to the key's weight and takes the first entries of
// the key's zones, then more from the keys that had more. Of a key in
// more than one zone it reads the zones marked in its snapshot (the
// Queue's zone index when that is current, else the key's marks, P, 15,
// type, key) and the first entries of each, half as many again as the
// window divided by their number (more, doubling, up to the window each,
// when fewer than the batch are left before the cut), merges them in
// ready order, and cuts the merge after the least of the last entries of
// the zones not read to their end: the candidates are then exactly the
// key's first entries across its zones. So 16 zones cost an accept 16 or
// 17 range reads where one zone costs one, and about one and a half
// times the window's keys. So the keys
// with ready jobs share the type's accepts by weight, and a key with one
// job among keys with a backlog waits for the next accept.
//
// A worker that takes jobs only on demand makes that next accept only
// when it has room again, after a batch of the backlog. AcceptOptions.Keys
// restricts an accept to named keys, and ReadyZones reads the zone index
// with a watch for its next mark; from two reads, ReadyZones.Fresh tells
// the keys whose zones were marked in between, which are the keys that
// had no ready job (a backlog keeps its zones marked). A pipeline's
// express loop (package pipeline, Options.Express) accepts their first
// jobs at once, beyond its demand by a bounded number.
//
// What a user can rely on:
//   - Within a key, across all its zones, order is as without zones:
//     higher priority first, then earlier scheduled time (a random choice
//     among equal ones, as before; see Accept and contention). An accept
//     with a window of Max (Window 1 for one job) takes exactly the key's
//     first jobs in that order as of its snapshot; with a larger window,
//     jobs among the key's first window.
//   - Across keys there is no order:
//     fairness decides. A job of high priority of one key does not pass
//     the jobs of another.
//   - MaxRunning of a key (or of the type) is never passed at any commit,
//     across processes and crashes: the accept reads the running count
//     with a conflict, and every way out of running (finish, fail,
//     cancel, remove, the monitor's recycle) lowers it in its own
//     transaction. A bound lowered while more jobs run holds new starts
//     until the count is under it.
//   - MaxStarts per Per is counted in the store by every accept, in windows
//     that begin at the first start after the last one ended, by the clock
//     of the accepting process: clocks that disagree by d move a window's
//     edges by up to d. A window opened by a clock ahead of the accepting
//     one holds, its starts counted, until it ends by the accepting clock,
//     if that clock is ahead by less than max(Per, 1 minute); one opened
//     further ahead is taken for a clock gone wrong, and a new window
//     opens (between clocks that far apart the bound does not hold).
//   - MaxRunning 1 is a sequence: the key's jobs run one at a
//     time, in priority and then scheduled order, across every process. A
//     job that fails and is retried later is scheduled after its retry
//     delay, so jobs after it may run first.
//
// An accept that finds nothing it can take waits on the type's watch key,
// on the running counts of the keys that their bounds hold back (it wakes
// when one ends), on the end of a rate window, and, when it saw jobs it
// could not take for another reason (after its MaxScheduledAt, or
// unreadable), on the type's change key. The jobs without a key have no
// per-key bound; the type's MaxRunning bounds every job, and makes every
// accept of the type conflict with every start and end of its jobs.
//
// Keys shows an operator a type's keys a page at a time, in key order:
// those with marked zones (P, 15), those with running counts (P, 16) and
// those the settings name, each with the policy that applies, its marked
// zones, its running jobs and its rate window (P, 17). A page reads from
// the page's first key on, taking the next key of each of the two
// subspaces and of the named ones in turn, never the whole of the type's
// zones; the jobs without a key, which have no running count, come first
// on the first page.
//
// # Stale detection
//
// No wall clock decides that a running job is stale: not the worker's,
// whose heartbeats may come from a machine whose clock is off, nor the
// monitor's, which may be ahead (it would take back live jobs, and their
// side effects would run twice) or behind (dead jobs would stay running).
// The scheme is couch_jobs', which notes the type's activity versionstamp
// and, one timeout later by its own timer, takes back the jobs not updated
// since; fdbq compares with the read versions of the monitor's own
// transactions instead, so that no key is written by every heartbeat.
//
//   - Accept and Heartbeat renew a job's activity: its entry in (P, 12), in
//     its lane (the monitor reads each lane's timeouts as groups of their
//     own), is keyed by their transaction's read version (known inside it, so the
//     next renewal or the job's end clears it exactly, also within the
//     same transaction), and it names, by that read version and a random
//     token, a stamp in (P, 13) that gets the commit's versionstamp. One
//     stamp serves every job a transaction renews, so an accept of many
//     jobs writes one.
//   - Each transaction of the monitor notes its read version v and then
//     the time t of its own clock (MonitorOptions.Clock, monotonic): every
//     commit at a version at most v had happened by t.
//   - A sweep, beginning at time now, takes back a job whose entry's
//     stamp is at most the v of a note with t at least the job's
//     activity timeout before now, and whose entry, read in the sweep's
//     transaction with a read conflict, is still the job's. Then no
//     renewal committed from t to the sweep: the job had no activity for
//     at least the timeout, measured by one clock. The range read stops at
//     the versions after that note: an entry after it was renewed later.
//
// Safety needs only that the monitor's clock does not run fast; the clocks
// of different machines may disagree by any amount, and jump. A monitor
// that starts has no notes: it takes nothing back during its first
// timeout. A dead job is taken back between its timeout and its timeout
// plus about two of the monitor's Intervals after its last renewal (the
// monitor learns of the renewal at its next transaction; an idle monitor
// makes one when the renewal's change wakes it). The notes are kept about
// a quarter Interval apart, for the longest timeout seen, at most 4096.
// Scheduled times and retention still use the wall clock (a job scheduled
// by a clock that is off runs early or late by the skew, nothing worse).
//
// A sweep clears, in a transaction of its own, the stamps older than the
// first entry of each timeout group, reading those entries (and the gaps
// between groups) with read conflicts: a renewal at an older read version
// that commits meanwhile makes it retry, and one that commits after it
// writes its stamp again. An idle monitor that finds such stamps sweeps.
//
// Records written before this scheme (formats JSON and 0x01) have
// deadline-keyed entries in (P, 5); a sweep moves each to (P, 12) as if
// its job had heartbeated then, so such a job is taken back a timeout
// after the upgrade unless its worker heartbeats.
//
// A sweep skips a job it cannot change, a record or index entry that does
// not decode or a record that cannot be stored, and goes on with the rest
// of the type: one bad job must not keep every job that expires after it
// running. It logs the job when first skipped and counts it in
// SweepStats.Skipped at every sweep; each sweep reads it once.
//
// What does not decode is ErrCorrupt to the other calls (a record,
// settings or a key that is damaged, or written by a version this one
// cannot read), and the listing and admin calls get past it. List reports
// an entry whose record does not decode, or whose key is not one fdbq
// writes, in Page.Unreadable and lists the rest. Types lists a type whose
// settings do not decode with TypeInfo.Err and its counts; GetType fails
// for it with ErrCorrupt, as do the calls that need its settings, until
// SetType or DeclareType replaces them. OldestDue
// passes over a pending key it cannot read. Get, Cancel and Requeue of a
// job whose record does not decode fail with ErrCorrupt naming it; Remove
// deletes it, with the index entry that points at it and its state's
// count. That entry's key is made from the record's times when format 1's
// header still reads; otherwise Remove first reads the type's three
// indexes, a thousand entries a transaction, until it finds it, which
// takes time in proportion to the type's jobs. A record no entry points at
// is removed alone; a key that names no job can only be reported.
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
// of the zones it chose (see Fairness; one, for a type whose jobs carry no
// key) and the first max(Window, DefaultWindow) entries of
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
// transaction (and what Fairness lists) and, when MaxScheduledAt is zero (the bound is now, and
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
// # Waiting
//
// Wait reads the jobs it waits for and, in the same transaction, watches
// the record (P, 1, type, id) of each one not there yet: put rewrites it
// and drop clears it at every change to the job, and nothing else writes
// it, so a wait for one job wakes for that job alone, not for every
// change to its type. The waits of one Queue share their watches, waits
// on one job one store watch, reference-counted: made in the read of the
// first, cancelled when the last lets go, and replaced once it fired or
// failed. A wait joins a shared watch only if the watch started from the
// value it read itself, so that every change it must wake for fires it;
// the read versions of the two transactions tell a wait whose value
// differs whether it read earlier than the watch (it reads again at once)
// or later (it makes the key's next watch). The argument
// that no wake is missed is at watchShare.
//
// FoundationDB lets a client hold 10,000 watches; past that a new one
// fails with too_many_watches. A Queue's waits hold at most
// Options.WaitWatches watches on records (default DefaultWaitWatches,
// 1,000), leaving the rest to acceptors, the monitor and other queues. A
// wait whose record watches would not fit, one with more than 32 jobs not
// there yet, and one whose record watch the store refused, watch the
// type's change key (P, 4, type) instead: one watch a type, shared by all
// such waits, which wake on every change to a job of the type (the queue
// holds an interest in it while they wait; see Waking). After a
// refusal the queue keeps to the number of record watches the store had
// accepted for half a minute; a change-key watch the store refuses has
// the wait read again when the queue lets go of a watch, or after a
// backoff. So thousands of waits hold about WaitWatches plus one watch a
// type, and a wait never fails for want of a watch. On FoundationDB a
// watch also costs the storage server holding its key the watched value
// plus about 1,000 bytes (fdbserver's watchValue; past the knob
// MAX_STORAGE_SERVER_WATCH_BYTES, 100 MB, it cancels new watches and the
// client polls): the budget bounds that as well, to WaitWatches records.
//
// # Waking
//
// A key that every job of a type writes is that type's limit on a
// cluster: a key lives on one storage team, and FoundationDB cannot split
// it. So no job writes one by itself. The type's change key (P, 4, type),
// which wakes the waiters that cannot watch each job, moves only while a
// process says it watches it: such a process (a Wait for more jobs than
// it watches one by one, an accept passing over zones it cannot take
// from, a monitor with nothing running) first writes its interest entry
// (P, 19, type, holder) and adds 1 to the type's count of them (P, 18,
// type), in a transaction of its own, then reads what it waits for and
// watches the key in the same transaction as that read. Every transaction
// that changes jobs of the type reads the count with a read conflict (one
// point read an attempt, kv.Memo) and bumps the key, once, if it is above
// zero. No change is missed: one that committed before the entry is in
// the holder's read; one that commits after either read the count after
// it and bumps the key, or read it before and fails with a conflict
// (not_committed), and its retry sees it. A Queue holds one entry a type
// for all its holders, and clears it when the last lets go; a holder
// renews it every half minute by its own clock (and reads again then); a
// monitor clears an entry a minute past its expiry by the monitor's clock
// (a process that died), so an entry left behind costs only the bumps
// until then. A holder whose entry a monitor cleared while it lived (its
// clock more than a minute behind the monitor's) writes it again at its
// next renewal: its wake may come up to half a minute late. With nobody waiting this way, a job's whole life writes no
// key the other jobs of its type write: the projection in the README
// gives the busiest key 0.6% of a type's writes.
//
// The count is a key that every change of the type reads (reads of one
// key are spread over its replicas, but they are one team's), and every
// write of it (a hold taken or let go) makes the changes in flight retry.
// Holds come and go with waits and with types going idle or busy, not
// with jobs; a holder that stays (a long coarse Wait, an accept passing
// over jobs scheduled after its bound) brings back a key written by every
// change while it stays.
//
// The monitor learns of running jobs from its own reads instead: while a
// type has running jobs it reads every Interval, or every sixteenth of
// the shortest activity timeout among them if that is longer, plus its
// pause (see Monitor), which is when it notes the versions its staleness
// rule compares with. A type with no running job it holds and watches, so
// an idle monitor makes no transactions but the renewal of its holds,
// every half minute, until a job starts. It watches a hold it takes at
// once (a read right after taking it, not after a pause), and lets go of
// the hold of a type whose change woke it before it pauses: its next
// read takes the hold again if the type is still idle. So a type that
// becomes busy has its change key bumped by the few changes before the
// monitor wakes, not by every change for the one and a half Intervals of
// the monitor's pause (which made it the busiest key of a type's first
// 10,000 jobs in the projection, up to 12% of their writes).
//
// # Unique jobs
//
// A job added with NewJob.Unique is unique among its type's jobs by a
// digest of its data (or of the fields Unique.Fields names): SHA-256 of
// the values as canonical JSON, so member order does not matter. The
// digest is stored in the job's record and keys the unique index
// (P, 20, type, digest), which names the job that holds it. Add reads
// that one key, with a read conflict, and the record it names: no range
// of the queue is read, and concurrent adds of one unique job conflict
// on the key, so exactly one of them adds it and the others, retried,
// see it. The job named is a duplicate when its record still has the
// digest and its state is in Unique.States (default pending, running and
// succeeded; a finished job only while Unique.Window has not passed since
// it finished). Then Add returns it (DuplicateReturn), adds it again with
// the new data under its own id (DuplicateReplace), or fails with a
// *DuplicateError (DuplicateRefuse), and Job.Added says which happened.
// Otherwise the new job is added and takes the key. The index names one
// job per digest, the last added: a job that is not a duplicate (a
// failed one, or one outside the States of a later add) is no longer
// named, and a Requeue of it can make two jobs of one digest. A retry
// that runs the add again after its commit applied finds its own token
// in the named record and answers what the first run did.
//
// # Periodic jobs
//
// A Schedule adds a job at each tick of a cron expression (read on the
// wall clock of a time zone) or of a fixed interval (at the multiples of
// the interval since the Unix epoch). Its definition and state are one
// record, (P, 21, name); the state holds Last, the time up to which every
// tick is handled. A tick transaction (TickSchedule) reads the record
// with a conflict, works out the ticks in (Last, now], adds their jobs
// and moves Last, all in one transaction: so however many Schedulers run
// it at once, on as many machines, one commits and the others conflict,
// are retried, and find the ticks handled. There is no leader and no
// lease. A tick's job has the id NAME@TIME (TickID) and the tick as its
// ScheduledAt; a job of that id that exists already is left as it is
// (a re-add would resubmit it, and run a finished one again), and a
// unique job that refuses its duplicate counts the tick as handled by
// the duplicate (it would refuse it at every retry).
//
// A tick handled more than Grace after its time is missed: every
// scheduler was down, or the tick failed (its type not registered). The
// schedule's Missed policy says what such ticks get: MissedOnce one job,
// for the latest; MissedSkip none; MissedEach one each, for the latest
// MissedLimit. Ticks handled within Grace always get their job. One tick
// transaction adds at most 100 jobs (fewer when the data is large, to
// stay under 4 MB); the scheduler runs the next one at once. A catch-up
// enumerates at most 100,000 ticks: past that it looks back from now for
// the ticks the policy keeps, and Skipped counts at least 100,000.
//
// Clocks: a tick is due when the clock of the process running it passes
// the tick's time. A scheduler whose clock is ahead adds a tick's job
// early by its skew, one whose clock is behind finds the tick handled
// already; the job's id and ScheduledAt are the tick's either way, so
// skew moves when a tick's job is added, never how many there are.
//
// Cron expressions and clock changes: the expression is read on the
// zone's wall clock as if it had no changes, and each wall time that
// matches ticks once, mapped back to an instant. A wall time that occurs twice (when clocks go back) ticks at its
// first occurrence; wall times that do not occur (when clocks go forward)
// tick once, at the instant of the jump, unless a wall time after the
// jump ticks at that instant. So "30 2 * * *" in America/New_York ticks
// at 03:00 EDT on the day clocks go forward, and once at 02:30 on the day
// they go back; "0 * * * *" ticks at 01:00 once on that day, two real
// hours before 02:00. A schedule that must tick at every real hour is an
// interval (Every: time.Hour).
//
// Declaring a schedule that exists keeps its pause, its counts and Last,
// unless its timing (Cron, Timezone, Every) changed: then it starts
// afresh from the declare, and ticks of the old timing are not caught up.
// Resume starts from the resume: ticks that fell while paused get no job.
// A new schedule's first tick is its first after the declare.
//
// # Workflows
//
// AddWorkflow adds a DAG of jobs in one transaction: the workflow's
// record, a node per job, an edge key per dependency, and the jobs with
// no dependency, pending. A job of a workflow has the id WORKFLOW:NAME
// and a flag in its record (codec flag bit 5), so that put, the one
// function every state change goes through, knows to follow it: when such
// a job finishes, put's transaction marks its node done, reads its
// dependents by a range of edge keys, and for each one still waiting
// either counts the dependency done, adding the job (pending) when it was
// the last, or, when the job did not succeed under CancelDependents, marks
// it and everything that depends on it skipped. So readiness is written
// by the transaction that finishes the last dependency: nothing scans for
// ready work, and a crash cannot come between a finish and its
// dependents' release. Two dependencies of one job that finish at once
// both write that job's node and conflict; one retries.
//
// A job removed before it finished counts as not succeeded (outcome
// removed), an unreadable record removed too. A finished job made pending
// again (Requeue, or Add of its id) is done no more, but its dependents
// keep what its first finish gave them: a later finish is not given
// again. A waiting job whose own record is damaged, or whose id a job of
// no workflow took, is logged and skipped with its dependents, so that a
// damaged workflow still ends and never stops a finish. Every job id of
// a workflow must be free when it is added. A
// dependent's ScheduledAt holds it back once added. CancelWorkflow skips
// the waiting jobs and cancels the pending and running ones in one
// transaction. Limits, so that a workflow fits one transaction with room
// to spare: MaxWorkflowJobs (1000), MaxWorkflowDependencies (10,000),
// MaxWorkflowBytes (4 MiB of data), and one job's data and dependency
// names fit a record (kv.MaxValueSize); past them AddWorkflow fails with
// ErrDataTooLarge naming the limit, and adds nothing. A job's
// dependencies' results are read with Parents while they are kept
// (their type's retention).
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
// # What each error promises
//
// Every operation either commits what it says, once, or commits nothing of
// the call nor of the caller's writes in its transaction (the caller must
// return the error from its transactional function, which the operations'
// errors make the store do):
//
//   - ErrHalt (Heartbeat, End, Finish, Fail, Resubmit): the lease no longer holds
//     the job (recycled, canceled, removed, finished, taken by another
//     worker); nothing was written. The worker should stop and drop its
//     work's effects outside the store.
//   - ErrNotFound: no such job; nothing was written. ErrWrongState (Cancel,
//     Requeue): the job is not in a state the call applies to; nothing was
//     written.
//   - ErrInvalidJob, ErrUnknownType, ErrDataTooLarge: the call was refused
//     before anything was written; what it names is wrong (a name, JSON
//     that does not parse, data over the limit, a type not registered).
//   - An error matching kv.ErrCommitUnknownResult (kv.UnknownResultError):
//     the store cannot tell whether the commit applied (its connection to
//     the cluster changed, or the call was canceled while committing); the
//     one answer that promises neither. Read the job to find out.
//   - Any other error of the store (context canceled, the store closed, a
//     retry limit): nothing committed, unless it matches
//     ErrCommitUnknownResult.
//   - nil: the call's writes committed, exactly once, whatever other
//     clients did between an unknown result and the retry that resolved
//     it.
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
