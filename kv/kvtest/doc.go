// Package kvtest is the conformance suite every kv backend runs, a
// fault-injecting backend wrapper for tests of kv and of the layers above,
// and a tracing wrapper with a projection of its traces onto a
// FoundationDB cluster.
//
// A backend's test calls Run (and RunFaulty) with a constructor:
//
//	func TestConformance(t *testing.T) {
//		kvtest.Run(t, func(t *testing.T) *kv.DB { return kv.NewDB(open(t), kv.Options{}) },
//			kvtest.Features{TransactionLifetime: 300 * time.Millisecond})
//	}
//
// Every test is a subtest that works under its own key prefix
// ("kvtest/<test name>/<random hex>/") and clears it when done, so the
// constructor may return one shared database (a FoundationDB cluster) or a
// fresh one per call.
//
// FoundationDB's behaviour is the reference: where the suite and the
// contract's comments could be read two ways, the suite asserts what
// FoundationDB does, so that the same layer code behaves identically on
// every backend. Three places where that matters:
//
//   - GetRange with begin > end returns an empty result in FoundationDB
//     (only ClearRange and the explicit conflict ranges reject an inverted
//     range, with inverted_range); the suite accepts an empty result or
//     kv.ErrInvertedRange for reads and requires kv.ErrInvertedRange from an
//     inverted ClearRange.
//   - A range read stopped by its Limit conflicts only on the keys up to the
//     last one returned, so inserting beyond it does not conflict.
//   - A watch reports a change made by its own transaction after the watch
//     was created, at once; a value the transaction set before creating the
//     watch is the watch's starting value.
//
// # Faults
//
// FaultyBackend wraps any backend and makes FoundationDB's failure modes
// happen on one machine: conflicts, transaction_too_old (at commit and on
// reads), commit_unknown_result both when the commit did not apply and when
// it did, and delays before commit. RunFaulty runs the whole suite through
// it; tests that assert the exact outcome of one raw commit are skipped
// there, everything that goes through DB.Transact's retry loop must still
// pass. Layers above kv use NewFaultyDB to run their own concurrency tests
// through the same faults.
//
// Transactional functions in the suite need no idempotence of their own:
// DB.Transact commits each call once, also after a commit_unknown_result
// that applied, and the suite's increments and atomics under faults are
// what shows it.
//
// # Randomized serializability
//
// RandomizedSerializability runs random transactions from several
// goroutines over a small contended keyspace and checks that the
// committed ones, replayed serially in versionstamp order, give the reads
// each saw and the final state. JOBSTAGE_SEED replays a seed;
// JOBSTAGE_KV_SOAK (a duration) repeats rounds with new seeds for soak
// runs.
//
// # Traces and cluster projections
//
// TracingBackend wraps any backend and records the writes (key, kind,
// size) of every transaction that commits, in commit order; Take hands
// over what committed since the last Take, so a caller cuts its workload
// into windows (N jobs each, say) by taking the trace between them.
// Projection reads such windows the way FoundationDB's data distribution
// would place them on S shards, and reports the share of the writes that
// the busiest shard and the busiest single key take in each window: what
// caps a workload's throughput on a cluster of any size. Projection's
// documentation has the model and FoundationDB's reasons for it.
//
// # Examples
//
// ExampleRun shows the two tests a backend's package writes; the Example
// runs a layer's transactions through a FaultyBackend.
package kvtest
