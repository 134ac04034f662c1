package kvtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// RunFaulty runs the conformance suite with every database newDB returns
// wrapped in a FaultyBackend (DefaultFaultOptions, through NewFaultyDB),
// with f.Faults set, and then the FaultyBackend's own tests under
// "FaultyBackend/". Each test's seed derives from its name and is logged,
// so a failure can be replayed with NewFaultyBackend.
func RunFaulty(t *testing.T, newDB func(t *testing.T) *kv.DB, f Features) {
	f.Faults = true
	Run(t, func(t *testing.T) *kv.DB {
		seed := seedFor(t.Name())
		t.Logf("fault seed %d", seed)
		db, fb := NewFaultyDB(newDB(t), DefaultFaultOptions(seed))
		t.Cleanup(func() { t.Logf("faults: %+v", fb.Counts()) })
		return db
	}, f)
	t.Run("FaultyBackend", func(t *testing.T) {
		for _, tc := range faultTests() {
			t.Run(tc.name, func(t *testing.T) { tc.run(newEnv(t, newDB(t), f)) })
		}
	})
}

func seedFor(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

func faultTests() []test {
	return []test{
		{name: "InjectedCommitFaults", run: testInjectedCommitFaults},
		{name: "InjectedReadFault", run: testInjectedReadFault},
		{name: "Delay", run: testInjectedDelay},
		{name: "PassesItselfToFunctions", run: testFaultyPassesItself},
		{name: "EveryFaultHappens", run: testEveryFaultHappens},
		{name: "Reproducible", run: testFaultsReproducible},
		{name: "CommitOnce", run: testCommitOnce},
		{name: "CommitOnceGivesUp", run: testCommitOnceGivesUp},
		{name: "CommitMarkersCleared", run: testCommitMarkersCleared},
	}
}

// faulty returns a DB over the test's backend with faults o.
func (e *env) faulty(o FaultOptions) (*kv.DB, *FaultyBackend) {
	if o.Seed == 0 {
		o.Seed = seedFor(e.Name())
	}
	return NewFaultyDB(e.db, o)
}

// wantInjected fails the test unless err matches target and says it was
// injected.
func (e *env) wantInjected(err, target error, what string) {
	e.Helper()
	var kerr *kv.Error
	if !errors.Is(err, target) || !errors.As(err, &kerr) || !strings.Contains(kerr.Detail, "injected") {
		e.Errorf("%s: err = %v, want an injected %v", what, err, target)
	}
}

// testInjectedCommitFaults: each commit fault, made certain, gives its
// error, applies or not as it says, and fails the transaction's watches
// and versionstamp with the same error.
func testInjectedCommitFaults(e *env) {
	for _, c := range []struct {
		name    string
		o       FaultOptions
		want    error
		applied bool
		count   func(FaultCounts) int64
	}{
		{"conflict", FaultOptions{ConflictRate: 1}, kv.ErrNotCommitted, false,
			func(c FaultCounts) int64 { return c.Conflicts }},
		{"too-old", FaultOptions{TooOldRate: 1}, kv.ErrTransactionTooOld, false,
			func(c FaultCounts) int64 { return c.TooOld }},
		{"unknown-not-applied", FaultOptions{UnknownNotAppliedRate: 1}, kv.ErrCommitUnknownResult, false,
			func(c FaultCounts) int64 { return c.UnknownNotApplied }},
		{"unknown-applied", FaultOptions{UnknownAppliedRate: 1}, kv.ErrCommitUnknownResult, true,
			func(c FaultCounts) int64 { return c.UnknownApplied }},
	} {
		_, fb := e.faulty(c.o)
		tx, err := fb.Begin(e.ctx)
		if err != nil {
			e.Fatal(err)
		}
		key := e.k(c.name)
		tx.Set(key, []byte("v"))
		w := tx.Watch(e.k(c.name + "/watched"))
		stamp := tx.Versionstamp()
		err = tx.Commit()
		e.wantInjected(err, c.want, c.name)
		if got := e.getKey(key) != nil; got != c.applied {
			e.Errorf("%s: applied = %t, want %t", c.name, got, c.applied)
		}
		e.await(w.Ready(), c.name+": watch")
		e.wantErr(w.Wait(e.ctx), c.want, c.name+": watch")
		e.await(stamp.Ready(), c.name+": versionstamp")
		// FoundationDB fails the versionstamp of any failed commit with
		// transaction_invalid_version; the detail names the injected error.
		_, serr := stamp.Get(e.ctx)
		e.wantErr(serr, kv.ErrTransactionInvalidVersion, c.name+": versionstamp")
		e.wantInjected(serr, kv.ErrTransactionInvalidVersion, c.name+": versionstamp")
		if n := c.count(fb.Counts()); n != 1 {
			e.Errorf("%s: counted %d, want 1", c.name, n)
		}
		if n := fb.Counts().Injected(); n != 1 {
			e.Errorf("%s: %d faults injected in all, want 1", c.name, n)
		}
	}
}

// testInjectedReadFault: once a read fails with transaction_too_old, the
// transaction stays too old: every later read and the commit fail, and
// nothing applies.
func testInjectedReadFault(e *env) {
	e.put("k", "v")
	_, fb := e.faulty(FaultOptions{TooOldRate: 1}) // reads: ReadTooOldFraction
	tx, err := fb.Begin(e.ctx)
	if err != nil {
		e.Fatal(err)
	}
	tx.Set(e.k("written"), []byte("x"))
	reads := 0
	for ; err == nil && reads < 1000; reads++ {
		_, err = tx.Get(e.k("k"))
	}
	e.wantInjected(err, kv.ErrTransactionTooOld, fmt.Sprintf("after %d reads", reads))
	_, err = tx.GetRange(e.all(), kv.RangeOptions{})
	e.wantInjected(err, kv.ErrTransactionTooOld, "GetRange after a too-old read")
	_, err = tx.Snapshot().Get(e.k("k"))
	e.wantInjected(err, kv.ErrTransactionTooOld, "snapshot Get after a too-old read")
	it := tx.Iterate(e.all(), kv.RangeOptions{})
	if it.Next() {
		e.Errorf("Iterate after a too-old read returned a key-value")
	}
	e.wantInjected(it.Err(), kv.ErrTransactionTooOld, "Iterate after a too-old read")
	e.wantInjected(tx.Commit(), kv.ErrTransactionTooOld, "Commit after a too-old read")
	e.wantValue("written", nil)
	if c := fb.Counts(); c.TooOldReads != 1 || c.TooOld != 0 {
		e.Errorf("counts %+v, want exactly one too-old read", c)
	}
}

// testInjectedDelay: a delay slows the commit down and changes nothing
// else.
func testInjectedDelay(e *env) {
	const delay = 20 * time.Millisecond
	db, fb := e.faulty(FaultOptions{DelayRate: 1, MaxDelay: delay})
	for i := range 5 {
		if err := db.Transact(e.ctx, func(tx kv.Tx) error {
			tx.Set(e.k(fmt.Sprint(i)), []byte("v"))
			return nil
		}); err != nil {
			e.Fatal(err)
		}
	}
	e.wantKeys(e.all(), "0", "1", "2", "3", "4")
	if c := fb.Counts(); c.Delays != 5 || c.Injected() != 0 {
		e.Errorf("counts %+v, want 5 delays and nothing else", c)
	}
}

// testFaultyPassesItself: functions run inside a wrapped transaction see the
// wrapper, not the inner transaction, so their reads meet the faults too.
func testFaultyPassesItself(e *env) {
	_, fb := e.faulty(FaultOptions{})
	tx, err := fb.Begin(e.ctx)
	if err != nil {
		e.Fatal(err)
	}
	defer tx.Cancel()
	var inTransact, inReadTransact, inSnapshot kv.ReadTx
	if err := tx.Transact(e.ctx, func(t kv.Tx) error { inTransact = t; return nil }); err != nil {
		e.Fatal(err)
	}
	if err := tx.ReadTransact(e.ctx, func(t kv.ReadTx) error { inReadTransact = t; return nil }); err != nil {
		e.Fatal(err)
	}
	snap := tx.Snapshot()
	if err := snap.ReadTransact(e.ctx, func(t kv.ReadTx) error { inSnapshot = t; return nil }); err != nil {
		e.Fatal(err)
	}
	if inTransact != kv.ReadTx(tx) {
		e.Errorf("Transact passed %T, want the wrapper", inTransact)
	}
	if inReadTransact != kv.ReadTx(tx) {
		e.Errorf("ReadTransact passed %T, want the wrapper", inReadTransact)
	}
	if inSnapshot != snap {
		e.Errorf("Snapshot().ReadTransact passed %T, want the wrapper's snapshot view", inSnapshot)
	}
}

// testEveryFaultHappens: at moderate rates, enough transactions meet every
// kind of fault, and the retry loop still commits each of them once.
func testEveryFaultHappens(e *env) {
	db, fb := e.faulty(FaultOptions{
		ConflictRate: 0.1, TooOldRate: 0.1, UnknownNotAppliedRate: 0.1, UnknownAppliedRate: 0.1,
		DelayRate: 0.1, MaxDelay: time.Millisecond,
	})
	const n = 400
	e.put("r", "v")
	for i := range n {
		if err := db.Transact(e.ctx, func(tx kv.Tx) error {
			for range 5 {
				if _, err := tx.Get(e.k("r")); err != nil {
					return err
				}
			}
			tx.Set(e.k(fmt.Sprintf("w/%03d", i)), []byte("v"))
			return nil
		}); err != nil {
			e.Fatal(err)
		}
	}
	if got := len(e.scan(e.r("w/"))); got != n {
		e.Errorf("%d keys written, want %d", got, n)
	}
	c := fb.Counts()
	e.Logf("counts after %d transactions: %+v", n, c)
	for name, v := range map[string]int64{
		"Conflicts": c.Conflicts, "TooOld": c.TooOld, "TooOldReads": c.TooOldReads,
		"UnknownNotApplied": c.UnknownNotApplied, "UnknownApplied": c.UnknownApplied, "Delays": c.Delays,
	} {
		if v == 0 {
			e.Errorf("no %s injected", name)
		}
	}
}

// testFaultsReproducible: the same seed and the same sequential work inject
// the same faults.
func testFaultsReproducible(e *env) {
	o := DefaultFaultOptions(42)
	o.ConflictRate, o.UnknownAppliedRate = 0.2, 0.2
	run := func(name string) FaultCounts {
		db, fb := NewFaultyDB(e.db, o)
		for i := range 100 {
			if err := db.Transact(e.ctx, func(tx kv.Tx) error {
				if _, err := tx.Get(e.k(name + "/r")); err != nil {
					return err
				}
				tx.Set(e.k(fmt.Sprintf("%s/%03d", name, i)), []byte("v"))
				return nil
			}); err != nil {
				e.Fatal(err)
			}
		}
		return fb.Counts()
	}
	first, second := run("first"), run("second")
	if first != second {
		e.Errorf("same seed, same work, different faults:\n%+v\n%+v", first, second)
	}
	if first.Injected() == 0 {
		e.Errorf("no faults injected: %+v", first)
	}
}

// testCommitOnce: under commit_unknown_result faults, a plain increment
// through DB.Transact ends exactly right, because Transact's commit marker
// tells the retry that an unknown commit applied; the same increment
// retried by hand on raw transactions counts every such commit twice,
// which shows the faults were real. The versionstamp Transact hands fn is
// the one of the attempt that committed, also when that attempt's commit
// answered commit_unknown_result.
func testCommitOnce(e *env) {
	db, fb := e.faulty(FaultOptions{UnknownNotAppliedRate: 0.2, UnknownAppliedRate: 0.2})
	const workers, perWorker = 8, 25
	const n = workers * perWorker
	var stampsOK, stampsChecked atomic.Int64
	before := fb.Counts()
	statsBefore := db.Stats().UnknownApplied.Load()
	runWorkers(e, workers, func(w int) error {
		for i := range perWorker {
			rec := e.k(fmt.Sprintf("stamp/%d/%d", w, i))
			var f *kv.Future[kv.Versionstamp]
			if err := db.Transact(e.ctx, func(tx kv.Tx) error {
				tx.Add(e.k("once"), 1)
				tx.SetVersionstampedValue(rec, make([]byte, 14))
				f = tx.Versionstamp()
				return nil
			}); err != nil {
				return err
			}
			stamp, err := f.Get(e.ctx)
			if err != nil {
				return fmt.Errorf("versionstamp of a committed call: %w", err)
			}
			stampsChecked.Add(1)
			if stored := e.getKey(rec); bytes.Equal(stored, stamp[:]) {
				stampsOK.Add(1)
			} else {
				e.Errorf("call %d/%d: versionstamp %x, its committed value holds %x", w, i, stamp, stored)
			}
		}
		return nil
	})
	applied := fb.Counts().UnknownApplied - before.UnknownApplied
	if got := db.Stats().UnknownApplied.Load() - statsBefore; got != applied {
		e.Errorf("Stats.UnknownApplied grew by %d, the backend applied %d commits it reported unknown", got, applied)
	}

	// By hand: the retry loop of a program that does not check.
	before = fb.Counts()
	runWorkers(e, workers, func(int) error {
		for range perWorker {
			if err := addByHand(e.ctx, db, e.k("naive")); err != nil {
				return err
			}
		}
		return nil
	})
	naiveApplied := fb.Counts().UnknownApplied - before.UnknownApplied

	once, naive := kv.DecodeInt64(e.get("once")), kv.DecodeInt64(e.get("naive"))
	e.Logf("through Transact %d, by hand %d, after %d increments each; %d and %d commits applied and were reported unknown",
		once, naive, n, applied, naiveApplied)
	if once != n {
		e.Errorf("counter incremented through Transact = %d, want %d", once, n)
	}
	if naive != n+naiveApplied {
		e.Errorf("counter incremented by hand = %d, want %d increments + %d applied commits retried", naive, n, naiveApplied)
	}
	if applied == 0 || naiveApplied == 0 {
		e.Errorf("no commit_unknown_result after applying injected: %+v", fb.Counts())
	}
	if stampsChecked.Load() != n || stampsOK.Load() != n {
		e.Errorf("%d of %d versionstamps checked, %d right", stampsChecked.Load(), n, stampsOK.Load())
	}
}

// runWorkers runs worker in workers goroutines, waits for them all and
// fails the test with the errors they returned: a worker returns its error
// rather than calling Fatal, which only the test's goroutine may call.
func runWorkers(e *env, workers int, worker func(w int) error) {
	e.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			if err := worker(w); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.Fatal(err)
	}
}

// addByHand adds 1 to key in a raw transaction, retrying retryable errors
// as a program that does not check would: a commit that applied and
// answered commit_unknown_result is retried, and so applied twice.
func addByHand(ctx context.Context, db *kv.DB, key []byte) error {
	for {
		tx, err := db.CreateTransaction(ctx)
		if err != nil {
			return err
		}
		tx.Add(key, 1)
		err = tx.Commit()
		if err == nil {
			return nil
		}
		if !kv.IsRetryable(err) {
			return err
		}
	}
}

// testCommitOnceGivesUp: a call that stops while an unknown commit's
// outcome is still unknown says so: its error matches
// ErrCommitUnknownResult, whatever stopped it.
func testCommitOnceGivesUp(e *env) {
	fb := NewFaultyBackend(e.db.Backend(), FaultOptions{Seed: seedFor(e.Name()), UnknownAppliedRate: 1})
	db := kv.NewDB(fb, kv.Options{RetryLimit: -1})
	err := db.Transact(e.ctx, func(tx kv.Tx) error {
		tx.Add(e.k("n"), 1)
		return nil
	})
	if !errors.Is(err, kv.ErrCommitUnknownResult) || !kv.IsMaybeCommitted(err) {
		e.Errorf("Transact without retries after an unknown commit: %v, want commit_unknown_result", err)
	}
	if kv.IsRetryable(err) {
		e.Errorf("Transact's final error %v is retryable; the loop already gave up", err)
	}
	if got := kv.DecodeInt64(e.get("n")); got != 1 {
		e.Errorf("n = %d, want 1 (the commit applied)", got)
	}

	// A context that ends in the backoff after an unknown commit.
	ctx, cancel := context.WithCancel(e.ctx)
	db = kv.NewDB(fb, kv.Options{InitialBackoff: time.Hour, MaxBackoff: time.Hour, OnRetry: func(error) { cancel() }})
	err = db.Transact(ctx, func(tx kv.Tx) error {
		tx.Add(e.k("n"), 1)
		return nil
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, kv.ErrCommitUnknownResult) {
		e.Errorf("Transact cancelled after an unknown commit: %v, want context.Canceled and commit_unknown_result", err)
	}

	// Once the check ran, the outcome is known and the error says so.
	fb.SetEnabled(false)
	db = kv.NewDB(fb, kv.Options{})
	calls := 0
	err = db.Transact(e.ctx, func(tx kv.Tx) error {
		calls++
		tx.Add(e.k("n"), 1)
		fb.SetEnabled(calls == 1)
		return nil
	})
	if err != nil || calls != 1 {
		e.Errorf("Transact after an unknown commit that applied: err %v after %d runs of fn, want nil after 1", err, calls)
	}
	if got := kv.DecodeInt64(e.get("n")); got != 3 {
		e.Errorf("n = %d, want 3", got)
	}
}

// testCommitMarkersCleared: commit markers do not pile up. Each call's
// marker is cleared by a later transaction that writes; a marker older
// than the retention (left by a process that died) is cleared by the next
// writer, and a younger one, which a live call may still need, is kept.
// A call that only reads writes none.
func testCommitMarkersCleared(e *env) {
	prefix := append(e.k("markers/"), 0)
	fb := NewFaultyBackend(e.db.Backend(), FaultOptions{Seed: seedFor(e.Name())})
	markers := func() []kv.KeyValue {
		r, err := kv.PrefixRange(prefix)
		if err != nil {
			e.Fatal(err)
		}
		return e.scan(r)
	}
	// A marker is a bucket byte (0x80 and up), the second it was written
	// in and 16 random bytes; markers of the format before buckets have
	// no bucket byte, and are swept too.
	marker := func(bucket []byte, age time.Duration) []byte {
		k := binary.BigEndian.AppendUint64(append(bytes.Clone(prefix), bucket...), uint64(time.Now().Add(-age).Unix()))
		return append(k, bytes.Repeat([]byte{0x5a}, 16)...)
	}
	var olds, youngs [][]byte
	for _, bucket := range [][]byte{nil, {0x80}, {0xc3}, {0xff}} {
		olds = append(olds, marker(bucket, 2*time.Hour))
		youngs = append(youngs, marker(bucket, time.Minute))
	}
	e.transact(func(tx kv.Tx) error {
		for i := range olds {
			tx.Set(olds[i], nil)
			tx.Set(youngs[i], nil)
		}
		return nil
	})

	db := kv.NewDB(fb, kv.Options{MarkerPrefix: prefix, MarkerRetention: time.Hour})
	for i := range 50 {
		if err := db.Transact(e.ctx, func(tx kv.Tx) error {
			tx.Set(e.k(fmt.Sprintf("k/%d", i)), []byte("v"))
			return nil
		}); err != nil {
			e.Fatal(err)
		}
		if err := db.ReadTransact(e.ctx, func(tx kv.ReadTx) error {
			_, err := tx.Get(e.k("k/0"))
			return err
		}); err != nil {
			e.Fatal(err)
		}
	}
	got := markers()
	has := func(k []byte) bool {
		return slices.ContainsFunc(got, func(m kv.KeyValue) bool { return bytes.Equal(m.Key, k) })
	}
	for i := range olds {
		if has(olds[i]) {
			e.Errorf("a marker older than the retention survived 50 writes: %q", olds[i])
		}
		if !has(youngs[i]) {
			e.Errorf("a marker younger than the retention was cleared: %q", youngs[i])
		}
	}
	// The young ones, and the last call's own, which only a later write
	// clears.
	if len(got) != len(youngs)+1 {
		e.Errorf("%d markers after 50 calls that wrote and 50 that read, want %d", len(got), len(youngs)+1)
	}
	// Every marker the DB wrote is in a bucket: the last call's.
	for _, m := range got {
		if rest := m.Key[len(prefix):]; len(rest) != 25 || rest[0] < 0x80 {
			if !slices.ContainsFunc(youngs, func(k []byte) bool { return bytes.Equal(k, m.Key) }) {
				e.Errorf("a marker the DB wrote is not bucket byte, seconds, 16 random bytes: %q", m.Key)
			}
		}
	}
}
