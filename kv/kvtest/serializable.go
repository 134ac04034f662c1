package kvtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// The randomized serializability check (testRandomizedSerializability).
//
// Workers run random transactions through DB.Transact over a small shared
// keyspace, so that they contend; each transaction also writes its own
// commit versionstamp to a record key. Afterwards the committed
// transactions, found from their record keys and ordered by versionstamp,
// are replayed one after the other on an in-memory model: every read each
// of them saw must be what the model returns at that point, and the store
// must end equal to the model.
//
// Environment:
//
//   - JOBSTAGE_SEED=N fixes the seed (decimal or 0x hex), else it is
//     random. The seed fixes every worker's transactions (one generator per
//     worker, derived from it); the interleaving of the workers is up to
//     the scheduler, so a replay reruns the same transactions, not the
//     same history. The seed is always logged, and a failure prints the
//     command that replays it.
//   - JOBSTAGE_KV_SOAK=<duration> (a Go duration: 10m, 2h) runs rounds
//     until that much time has passed, each on a fresh part of the
//     keyspace with its own seed derived from the first and logged; a
//     failing round's seed replays that round alone. Raise go test's
//     -timeout to match (it defaults to 10m). Unset, one short round runs.
//
// The check relies on DB.Transact's contract: a call commits at most once,
// also through commit_unknown_result, and when it returns nil the last run
// of its function is the one that committed. Each run records the
// operations it did and what every read returned, and numbers itself in
// the record key's value, so the record names the run that committed even
// for a call that returned an error.

// The default round: enough transactions to contend on every key, short
// enough for well under a few seconds under -race on two cores.
const (
	serWorkers = 8
	serTxs     = 60 // per worker and round
	serKeys    = 32
	serMaxOps  = 10 // operations per transaction, at least 1
)

// Environment variables of the check.
const (
	serSeedEnv = "JOBSTAGE_SEED"
	serSoakEnv = "JOBSTAGE_KV_SOAK"
)

// serKind is a kind of operation of a random transaction.
type serKind int

const (
	serGet serKind = iota
	serGetRange
	serIterate
	serSet
	serClear
	serClearRange
	serAtomic
)

// serOp is one planned operation; a transaction's plan is drawn once and
// every run of its function performs it.
type serOp struct {
	kind  serKind
	key   []byte          // Get, Set, Clear, Atomic
	r     kv.Range        // GetRange, Iterate, ClearRange
	opts  kv.RangeOptions // GetRange, Iterate
	mut   kv.MutationType // Atomic
	value []byte          // Set's value, Atomic's param
}

func (op serOp) isRead() bool {
	return op.kind == serGet || op.kind == serGetRange || op.kind == serIterate
}

// serRead is what one read returned.
type serRead struct {
	value    []byte        // Get (nil: absent)
	kvs      []kv.KeyValue // GetRange, Iterate
	inverted bool          // the range was inverted and the read failed with inverted_range
}

// serRun is one run of a transaction's function.
type serRun struct {
	reads []serRead // by operation; only the first done are set
	done  int       // operations performed
	err   error     // the function's error
}

// serTx is one Transact call.
type serTx struct {
	worker, n int
	ops       []serOp
	runs      []*serRun
	err       error // Transact's

	// From the record key.
	committed bool
	stamp     kv.Versionstamp
	run       int // the run that committed, from 1
}

func (t *serTx) id() string { return fmt.Sprintf("t/%d/%d", t.worker, t.n) }

// serRound is one round of the check, under its own part of the test's
// keyspace.
type serRound struct {
	e      *env
	ctx    context.Context
	seed   uint64
	round  int
	prefix string   // of the round's keys, under the test's prefix
	keys   [][]byte // the contended keys, in order
	bounds [][]byte // range bounds, in order: on keys, between them, around them
	space  kv.Range // every contended key
	muts   []kv.MutationType
	txs    [][]*serTx // by worker, then by transaction
	report strings.Builder
	failed bool // check reported a failure
}

// testRandomizedSerializability: random contending transactions through
// the retry loop are serializable in versionstamp order (see above).
func testRandomizedSerializability(e *env) {
	seed := serSeed(e)
	soak := serSoak(e)
	start := time.Now()
	for round := 0; ; round++ {
		if !serRunRound(e, round, serRoundSeed(seed, round)) {
			return
		}
		if soak == 0 || time.Since(start) >= soak {
			if soak > 0 {
				e.Logf("soak: %d rounds in %v, all serializable", round+1, time.Since(start).Round(time.Millisecond))
			}
			return
		}
	}
}

// serSeed returns JOBSTAGE_SEED, else a random seed.
func serSeed(e *env) uint64 {
	s := os.Getenv(serSeedEnv)
	if s == "" {
		return rand.Uint64()
	}
	n, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		e.Fatalf("%s=%q: %v", serSeedEnv, s, err)
	}
	return n
}

// serSoak returns JOBSTAGE_KV_SOAK, 0 when unset.
func serSoak(e *env) time.Duration {
	s := os.Getenv(serSoakEnv)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		e.Fatalf("%s=%q: want a Go duration such as 10m", serSoakEnv, s)
	}
	return d
}

// serRoundSeed derives round's seed from the first (splitmix64); round 0
// runs on the seed itself, so any round's seed replays it as round 0.
func serRoundSeed(seed uint64, round int) uint64 {
	if round == 0 {
		return seed
	}
	z := seed + uint64(round)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// serRunRound runs and checks one round; false: it failed.
func serRunRound(e *env, round int, seed uint64) bool {
	e.Helper()
	ctx, cancel := context.WithTimeout(e.Context(), testTimeout)
	defer cancel()
	r := &serRound{e: e, ctx: ctx, seed: seed, round: round, prefix: fmt.Sprintf("r%03d/", round)}
	r.setup()
	e.Logf("round %d: seed %d (%s)", round, seed, r.replayCommand())

	stats := e.db.Stats()
	retries0, conflicts0 := stats.Retries.Load(), stats.Conflicts.Load()
	began := time.Now()
	var wg sync.WaitGroup
	for w := range serWorkers {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		r.txs[w] = make([]*serTx, 0, serTxs)
		wg.Go(func() { r.work(w, rng) })
	}
	wg.Wait()
	elapsed := time.Since(began)

	ok := r.check()
	if ok {
		e.Logf("round %d: %s in %v; %d retries, %d conflicts", round, r.report.String(),
			elapsed.Round(time.Millisecond), stats.Retries.Load()-retries0, stats.Conflicts.Load()-conflicts0)
		// Keep a long soak's store small; the test's cleanup clears the
		// rest.
		if err := e.db.Transact(ctx, func(tx kv.Tx) error {
			tx.ClearRange(r.rangeOf(""))
			return nil
		}); err != nil {
			e.Errorf("round %d: clearing its keys: %v", round, err)
			return false
		}
	}
	return ok
}

// replayCommand says how to rerun this round's transactions.
func (r *serRound) replayCommand() string {
	return fmt.Sprintf("replay: %s=%d go test -race -run '%s' ./kv/kvtest", serSeedEnv, r.seed, r.e.Name())
}

func (r *serRound) k(name string) []byte { return r.e.k(r.prefix + name) }

func (r *serRound) rangeOf(name string) kv.Range { return r.e.r(r.prefix + name) }

// name is key without the test's and the round's prefixes.
func (r *serRound) name(key []byte) string {
	n := strings.TrimPrefix(r.e.name(key), r.prefix)
	if q := strconv.Quote(n); strings.ContainsRune(q, '\\') {
		return q
	}
	return n
}

func (r *serRound) recordKey(worker, n int) []byte { return r.k(fmt.Sprintf("t/%d/%d", worker, n)) }

func (r *serRound) setup() {
	r.space = r.rangeOf("s/")
	r.bounds = append(r.bounds, r.space.Begin)
	for i := range serKeys {
		k := r.k(fmt.Sprintf("s/%02d", i))
		r.keys = append(r.keys, k)
		r.bounds = append(r.bounds, k, kv.KeyAfter(k))
	}
	r.bounds = append(r.bounds, r.space.End)
	for m := range kv.MutationType(256) {
		if m.Valid() {
			r.muts = append(r.muts, m)
		}
	}
	r.txs = make([][]*serTx, serWorkers)
}

// --- the workload ---

// serAlphabet makes values short and alike, so that ByteMin, ByteMax and
// CompareAndClear meet equal values, and carries and 0xff bytes happen.
var serAlphabet = []byte{0x00, 0x01, 0x02, 0x7f, 0x80, 0xfe, 0xff, 'a'}

func serValue(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = serAlphabet[rng.IntN(len(serAlphabet))]
	}
	return b
}

// plan draws a transaction's operations. recent holds values the worker
// wrote lately, for CompareAndClear to match now and then.
func (r *serRound) plan(rng *rand.Rand, recent *[][]byte) []serOp {
	ops := make([]serOp, 1+rng.IntN(serMaxOps))
	for i := range ops {
		op := &ops[i]
		switch p := rng.IntN(100); {
		case p < 20:
			op.kind, op.key = serGet, r.randKey(rng)
		case p < 32:
			op.kind, op.r, op.opts = serGetRange, r.readRange(rng), r.randOpts(rng)
		case p < 40:
			op.kind, op.r, op.opts = serIterate, r.readRange(rng), r.randOpts(rng)
		case p < 58:
			op.kind, op.key, op.value = serSet, r.randKey(rng), serValue(rng, rng.IntN(7))
			*recent = append(*recent, op.value)
			if len(*recent) > 8 {
				*recent = (*recent)[1:]
			}
		case p < 64:
			op.kind, op.key = serClear, r.randKey(rng)
		case p < 68:
			op.kind, op.r = serClearRange, r.randRange(rng, 6)
		default:
			op.kind, op.key, op.mut = serAtomic, r.randKey(rng), r.muts[rng.IntN(len(r.muts))]
			op.value = r.param(rng, op.mut, *recent)
		}
	}
	return ops
}

func (r *serRound) randKey(rng *rand.Rand) []byte { return r.keys[rng.IntN(len(r.keys))] }

// randRange returns a range between two bounds, begin <= end; maxSpan > 0
// bounds the distance between them in bounds (two per key).
func (r *serRound) randRange(rng *rand.Rand, maxSpan int) kv.Range {
	n := len(r.bounds)
	i, j := rng.IntN(n), rng.IntN(n)
	if maxSpan > 0 {
		j = min(n-1, i+rng.IntN(maxSpan+1))
	}
	if j < i {
		i, j = j, i
	}
	return kv.KeyRange(r.bounds[i], r.bounds[j])
}

// readRange is a range to read: half of them narrow, a few inverted
// (begin > end), which reads answer with nothing or inverted_range.
func (r *serRound) readRange(rng *rand.Rand) kv.Range {
	span := 0
	if rng.IntN(2) == 0 {
		span = 12
	}
	rg := r.randRange(rng, span)
	if rng.IntN(30) == 0 {
		rg.Begin, rg.End = rg.End, rg.Begin
	}
	return rg
}

func (r *serRound) randOpts(rng *rand.Rand) kv.RangeOptions {
	return kv.RangeOptions{Limit: rng.IntN(6), Reverse: rng.IntN(2) == 0}
}

// param draws an atomic operand, of random length so that shorter and
// longer values are zero-padded and truncated.
func (r *serRound) param(rng *rand.Rand, m kv.MutationType, recent [][]byte) []byte {
	switch m {
	case kv.MutationAdd:
		if rng.IntN(4) != 0 {
			return kv.EncodeInt64(rng.Int64N(7) - 3)
		}
		return serValue(rng, 1+rng.IntN(10))
	case kv.MutationAppendIfFits:
		return serValue(rng, 1+rng.IntN(4))
	case kv.MutationCompareAndClear:
		if len(recent) > 0 && rng.IntN(2) == 0 {
			if v := recent[rng.IntN(len(recent))]; len(v) > 0 {
				return v
			}
		}
	}
	return serValue(rng, 1+rng.IntN(9))
}

// work runs one worker's transactions.
func (r *serRound) work(w int, rng *rand.Rand) {
	var recent [][]byte
	for n := range serTxs {
		t := &serTx{worker: w, n: n, ops: r.plan(rng, &recent)}
		r.txs[w] = append(r.txs[w], t)
		record := r.recordKey(w, n)
		t.err = r.e.db.Transact(r.ctx, func(tx kv.Tx) error {
			run := &serRun{reads: make([]serRead, len(t.ops))}
			t.runs = append(t.runs, run)
			tx.SetVersionstampedValue(record, withPlaceholder(nil, binary.AppendUvarint(nil, uint64(len(t.runs)))))
			run.err = r.exec(tx, t.ops, run)
			return run.err
		})
		if r.ctx.Err() != nil {
			return
		}
	}
}

// exec performs ops in tx, recording what the reads return. A read error
// is returned as is, for the retry loop to judge.
func (r *serRound) exec(tx kv.Tx, ops []serOp, run *serRun) error {
	for i, op := range ops {
		rd := &run.reads[i]
		switch op.kind {
		case serGet:
			v, err := tx.Get(op.key)
			if err != nil {
				return err
			}
			rd.value = v
		case serGetRange:
			kvs, err := tx.GetRange(op.r, op.opts)
			if err != nil && !(op.r.Empty() && errors.Is(err, kv.ErrInvertedRange)) {
				return err
			}
			rd.kvs, rd.inverted = kvs, err != nil
		case serIterate:
			it := tx.Iterate(op.r, op.opts)
			for it.Next() {
				x := it.KeyValue()
				rd.kvs = append(rd.kvs, kv.KeyValue{Key: bytes.Clone(x.Key), Value: bytes.Clone(x.Value)})
			}
			if err := it.Err(); err != nil {
				if !op.r.Empty() || !errors.Is(err, kv.ErrInvertedRange) {
					return err
				}
				rd.inverted = true
			}
		case serSet:
			tx.Set(op.key, op.value)
		case serClear:
			tx.Clear(op.key)
		case serClearRange:
			tx.ClearRange(op.r)
		case serAtomic:
			tx.Atomic(op.mut, op.key, op.value)
		}
		run.done = i + 1
	}
	return nil
}

// --- the check ---

// check reads the record keys, replays the committed transactions in
// versionstamp order and compares; false: the round failed (reported).
func (r *serRound) check() bool {
	e := r.e
	e.Helper()
	if !r.readRecords() {
		return false
	}
	committed, runs := r.committedTxs()
	if r.failed {
		return false
	}
	slices.SortFunc(committed, func(a, b *serTx) int { return bytes.Compare(a.stamp[:], b.stamp[:]) })
	for i := 1; i < len(committed); i++ {
		if a, b := committed[i-1], committed[i]; a.stamp == b.stamp {
			r.fail("transactions %s and %s committed with the same versionstamp %x", a.id(), b.id(), a.stamp)
			return false
		}
	}

	m, reads, rangeKVs, ok := r.replay(committed)
	if !ok {
		return false
	}

	// The store ends where the replay did.
	final, err := kv.ReadTransact(r.ctx, e.db, func(tx kv.ReadTx) ([]kv.KeyValue, error) {
		return tx.GetRange(r.space, kv.RangeOptions{})
	})
	if err != nil {
		r.fail("reading the keyspace: %v", err)
		return false
	}
	want := m.read(serOp{kind: serGetRange, r: r.space})
	if !serSameKVs(final, want.kvs) {
		r.fail("after replaying the %d committed transactions in versionstamp order, the store differs from the model:\n%s",
			len(committed), r.explainFinal(committed, final, want.kvs))
		return false
	}
	fmt.Fprintf(&r.report, "%d of %d transactions committed (%d runs), %d reads (%d key-values from ranges) and %d keys at the end match the serial replay",
		len(committed), serWorkers*serTxs, runs, reads, rangeKVs, len(final))
	return true
}

// fail reports a failure of the round, with its seed and how to replay it,
// and marks the round failed.
func (r *serRound) fail(format string, args ...any) {
	e := r.e
	e.Helper()
	r.failed = true
	hint := ""
	if e.f.Faults {
		hint = "\n(faults are injected: a call whose commit applied, answered commit_unknown_result and was run again " +
			"also shows up here, as effects the replay lacks; DB.Transact must commit each call at most once)"
	}
	e.Errorf("round %d, seed %d: %s%s\n%s", r.round, r.seed, fmt.Sprintf(format, args...), hint, r.replayCommand())
}

// readRecords reads the round's record keys and marks each transaction
// they name committed, with its versionstamp and the run that committed.
// A record that names no transaction of the round, or whose value is not
// a versionstamp and a run number, is reported and skipped; false: the
// records could not be read at all.
func (r *serRound) readRecords() bool {
	r.e.Helper()
	records, err := kv.ReadTransact(r.ctx, r.e.db, func(tx kv.ReadTx) ([]kv.KeyValue, error) {
		return tx.GetRange(r.rangeOf("t/"), kv.RangeOptions{})
	})
	if err != nil {
		r.fail("reading the record keys: %v", err)
		return false
	}
	for _, rec := range records {
		var w, n int
		name := r.name(rec.Key)
		if _, err := fmt.Sscanf(name, "t/%d/%d", &w, &n); err != nil || w < 0 || w >= len(r.txs) || n < 0 || n >= len(r.txs[w]) ||
			!bytes.Equal(rec.Key, r.recordKey(w, n)) {
			r.fail("stray record key %s", name)
			continue
		}
		t := r.txs[w][n]
		run, size := binary.Uvarint(rec.Value[min(10, len(rec.Value)):])
		if len(rec.Value) < 10 || size <= 0 || 10+size != len(rec.Value) {
			r.fail("transaction %s: record value %x is not a versionstamp and a run number", t.id(), rec.Value)
			continue
		}
		t.committed, t.run = true, int(run)
		copy(t.stamp[:], rec.Value)
	}
	return true
}

// committedTxs holds each Transact call's answer against its record key
// and returns the calls that committed, unordered, and how many runs of
// their functions all calls made. A call that returned nil must have
// committed, by its last run; whichever run committed must be one whose
// function succeeded. The first five failed calls are reported one by one,
// the rest only counted.
func (r *serRound) committedTxs() (committed []*serTx, runs int) {
	r.e.Helper()
	errs := 0
	for _, txs := range r.txs {
		for _, t := range txs {
			runs += len(t.runs)
			if t.err != nil {
				errs++
				if errs <= 5 {
					r.fail("transaction %s: Transact after %d runs: %v (its record key says committed: %t)",
						t.id(), len(t.runs), t.err, t.committed)
				}
			}
			switch {
			case !t.committed:
				if t.err == nil {
					r.fail("transaction %s: Transact returned nil after %d runs, but no run's record key is in the store: the commit was lost",
						t.id(), len(t.runs))
				}
				continue
			case t.run < 1 || t.run > len(t.runs):
				r.fail("transaction %s: its record key names run %d, but its function ran %d times", t.id(), t.run, len(t.runs))
				continue
			case t.err == nil && t.run != len(t.runs):
				r.fail("transaction %s: Transact returned nil after %d runs, but run %d committed (the last run must be the one that commits)",
					t.id(), len(t.runs), t.run)
			case t.runs[t.run-1].err != nil:
				r.fail("transaction %s: run %d committed although its function failed: %v", t.id(), t.run, t.runs[t.run-1].err)
				continue
			}
			committed = append(committed, t)
		}
	}
	if errs > 5 {
		r.fail("%d Transact calls failed in all", errs)
	}
	return committed, runs
}

// replay runs the committed transactions, in versionstamp order, one after
// the other on a model of the store, checking each read of the run that
// committed against the model at that point. It returns the model at the
// end and how many reads and range key-values it checked; false: a read
// differed (reported, with the history that explains it).
func (r *serRound) replay(committed []*serTx) (m serModel, reads, rangeKVs int, ok bool) {
	r.e.Helper()
	m = serModel{}
	for pos, t := range committed {
		run := t.runs[t.run-1]
		for i, op := range t.ops {
			if op.isRead() {
				want := m.read(op)
				got := run.reads[i]
				if !serSameRead(got, want, op) {
					r.fail("%s", r.explain(committed, pos, i, m))
					return m, reads, rangeKVs, false
				}
				reads++
				rangeKVs += len(got.kvs)
			}
			m.apply(op)
		}
	}
	return m, reads, rangeKVs, true
}

// serSameRead reports whether a read returned what the model says; an
// inverted range may also fail with inverted_range.
func serSameRead(got, want serRead, op serOp) bool {
	if op.kind == serGet {
		return sameValue(got.value, want.value)
	}
	if got.inverted {
		return bytes.Compare(op.r.Begin, op.r.End) > 0
	}
	return serSameKVs(got.kvs, want.kvs)
}

// serSameKVs compares key-values; a present key's empty value may be nil.
func serSameKVs(a, b []kv.KeyValue) bool {
	return slices.EqualFunc(a, b, func(x, y kv.KeyValue) bool {
		return bytes.Equal(x.Key, y.Key) && bytes.Equal(x.Value, y.Value)
	})
}

// serModel is the store as the serial replay has it: key → value.
type serModel map[string][]byte

// read answers a read op.
func (m serModel) read(op serOp) serRead {
	if op.kind == serGet {
		return serRead{value: bytes.Clone(m[string(op.key)])}
	}
	var out []kv.KeyValue
	for k, v := range m {
		if op.r.Contains([]byte(k)) {
			out = append(out, kv.KeyValue{Key: []byte(k), Value: bytes.Clone(v)})
		}
	}
	slices.SortFunc(out, func(a, b kv.KeyValue) int { return bytes.Compare(a.Key, b.Key) })
	if op.opts.Reverse {
		slices.Reverse(out)
	}
	if op.opts.Limit > 0 && len(out) > op.opts.Limit {
		out = out[:op.opts.Limit]
	}
	return serRead{kvs: out}
}

// apply applies a write op; reads change nothing.
func (m serModel) apply(op serOp) {
	switch op.kind {
	case serSet:
		m[string(op.key)] = append([]byte{}, op.value...)
	case serClear:
		delete(m, string(op.key))
	case serClearRange:
		for k := range m {
			if op.r.Contains([]byte(k)) {
				delete(m, k)
			}
		}
	case serAtomic:
		cur, exists := m[string(op.key)]
		v, exists := kv.ApplyMutation(op.mut, cur, exists, op.value)
		if exists {
			m[string(op.key)] = append([]byte{}, v...)
		} else {
			delete(m, string(op.key))
		}
	}
}

// writes reports whether op writes key.
func (op serOp) writes(key []byte) bool {
	switch op.kind {
	case serSet, serClear, serAtomic:
		return bytes.Equal(op.key, key)
	case serClearRange:
		return op.r.Contains(key)
	}
	return false
}

// --- failure reports ---

func (r *serRound) showOp(op serOp) string {
	rg := func() string { return fmt.Sprintf("[%s, %s)", r.name(op.r.Begin), r.name(op.r.End)) }
	opts := func() string {
		s := ""
		if op.opts.Limit > 0 {
			s += fmt.Sprintf(" limit %d", op.opts.Limit)
		}
		if op.opts.Reverse {
			s += " reverse"
		}
		return s
	}
	switch op.kind {
	case serGet:
		return "Get " + r.name(op.key)
	case serGetRange:
		return "GetRange " + rg() + opts()
	case serIterate:
		return "Iterate " + rg() + opts()
	case serSet:
		return fmt.Sprintf("Set %s = %s", r.name(op.key), show(op.value))
	case serClear:
		return "Clear " + r.name(op.key)
	case serClearRange:
		return "ClearRange " + rg()
	case serAtomic:
		return fmt.Sprintf("Atomic %v %s %s", op.mut, r.name(op.key), show(op.value))
	}
	return fmt.Sprintf("op(%d)", int(op.kind))
}

func (r *serRound) showRead(op serOp, rd serRead) string {
	switch {
	case op.kind == serGet:
		return show(rd.value)
	case rd.inverted:
		return "inverted_range"
	}
	return r.showKVs(rd.kvs)
}

func (r *serRound) showKVs(kvs []kv.KeyValue) string {
	parts := make([]string, len(kvs))
	for i, x := range kvs {
		v := x.Value
		if v == nil {
			v = []byte{} // present: an empty value
		}
		parts[i] = r.name(x.Key) + "=" + show(v)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// showTx lists a committed transaction's operations, with what each read
// returned and, for the ops in replayed, what the replay said instead.
func (r *serRound) showTx(b *strings.Builder, t *serTx, replayed map[int]serRead) {
	fmt.Fprintf(b, "    %s (run %d of %d, versionstamp %x):\n", t.id(), t.run, len(t.runs), t.stamp)
	run := t.runs[t.run-1]
	for i, op := range t.ops {
		fmt.Fprintf(b, "      %2d %s", i, r.showOp(op))
		if op.isRead() {
			fmt.Fprintf(b, " → %s", r.showRead(op, run.reads[i]))
			if want, ok := replayed[i]; ok {
				fmt.Fprintf(b, "  (replay: %s)", r.showRead(op, want))
			}
		}
		b.WriteByte('\n')
	}
}

// explain describes the first read of committed[pos] (op i) that differs
// from the replay, m being the model just before that op, and the earlier
// transactions that wrote the keys in question.
func (r *serRound) explain(committed []*serTx, pos, i int, m serModel) string {
	t := committed[pos]
	op := t.ops[i]
	got, want := t.runs[t.run-1].reads[i], m.read(op)
	var b strings.Builder
	fmt.Fprintf(&b, "transaction %s: replayed read differs: op %d, %s\n", t.id(), i, r.showOp(op))
	fmt.Fprintf(&b, "  read:     %s\n  replayed: %s\n", r.showRead(op, got), r.showRead(op, want))
	fmt.Fprintf(&b, "  the transaction, %d of %d committed in versionstamp order (its earlier reads matched the replay):\n",
		pos+1, len(committed))
	r.showTx(&b, t, map[int]serRead{i: want})

	keys := r.keysOf(op, got, want)
	fmt.Fprintf(&b, "  earlier committed transactions that wrote %s (latest last):\n", r.showKeys(keys))
	r.writers(&b, committed[:pos], keys)
	return b.String()
}

// keysOf returns the keys a differing read is about: those on which the
// two results differ, else every key of either.
func (r *serRound) keysOf(op serOp, got, want serRead) [][]byte {
	if op.kind == serGet {
		return [][]byte{op.key}
	}
	vals := func(kvs []kv.KeyValue) map[string][]byte {
		out := map[string][]byte{}
		for _, kv := range kvs {
			out[string(kv.Key)] = kv.Value
		}
		return out
	}
	g, w := vals(got.kvs), vals(want.kvs)
	var diff, all [][]byte
	for k, v := range g {
		all = append(all, []byte(k))
		if wv, ok := w[k]; !ok || !bytes.Equal(v, wv) {
			diff = append(diff, []byte(k))
		}
	}
	for k := range w {
		if _, ok := g[k]; !ok {
			all = append(all, []byte(k))
			diff = append(diff, []byte(k))
		}
	}
	if len(diff) == 0 {
		diff = all
	}
	slices.SortFunc(diff, bytes.Compare)
	return diff
}

func (r *serRound) showKeys(keys [][]byte) string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = r.name(k)
	}
	return strings.Join(names, ", ")
}

// writers lists the last few of txs that wrote any of keys.
func (r *serRound) writers(b *strings.Builder, txs []*serTx, keys [][]byte) {
	const most = 4
	var found []*serTx
	for j := len(txs) - 1; j >= 0 && len(found) < most; j-- {
		if slices.ContainsFunc(txs[j].ops, func(op serOp) bool {
			return slices.ContainsFunc(keys, op.writes)
		}) {
			found = append(found, txs[j])
		}
	}
	if len(found) == 0 {
		b.WriteString("    none\n")
	}
	for j := len(found) - 1; j >= 0; j-- {
		r.showTx(b, found[j], nil)
	}
}

// explainFinal describes how the store's keyspace differs from the model's.
func (r *serRound) explainFinal(committed []*serTx, store, model []kv.KeyValue) string {
	var b strings.Builder
	keys := r.keysOf(serOp{kind: serGetRange}, serRead{kvs: store}, serRead{kvs: model})
	const most = 8
	sv, mv := map[string][]byte{}, map[string][]byte{}
	for _, kv := range store {
		sv[string(kv.Key)] = kv.Value
	}
	for _, kv := range model {
		mv[string(kv.Key)] = kv.Value
	}
	for j, k := range keys {
		if j == most {
			fmt.Fprintf(&b, "  … %d keys in all\n", len(keys))
			break
		}
		s, sok := sv[string(k)]
		w, wok := mv[string(k)]
		if sok && s == nil {
			s = []byte{} // present, empty
		}
		if wok && w == nil {
			w = []byte{}
		}
		fmt.Fprintf(&b, "  %s: store %s, model %s\n", r.name(k), show(s), show(w))
	}
	keys = keys[:min(len(keys), most)]
	fmt.Fprintf(&b, "  the last committed transactions that wrote %s (latest last):\n", r.showKeys(keys))
	r.writers(&b, committed, keys)
	return b.String()
}
