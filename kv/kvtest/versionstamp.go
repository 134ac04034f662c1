package kvtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/jobstage/jobstage/kv"
)

// placeholderByte fills the 10 placeholder bytes; the backend overwrites
// them, and a real versionstamp of ten 0xee bytes is out of reach.
const placeholderByte = 0xee

// withPlaceholder returns before + 10 placeholder bytes + after + the
// placeholder's offset as 4 little-endian bytes: FoundationDB's (API 520+)
// format for SetVersionstampedKey and SetVersionstampedValue.
func withPlaceholder(before, after []byte) []byte {
	out := append([]byte(nil), before...)
	out = append(out, bytes.Repeat([]byte{placeholderByte}, 10)...)
	out = append(out, after...)
	return binary.LittleEndian.AppendUint32(out, uint32(len(before)))
}

// stamped returns before + stamp + after: what withPlaceholder becomes at
// commit.
func stamped(before []byte, stamp kv.Versionstamp, after []byte) []byte {
	out := append([]byte(nil), before...)
	out = append(out, stamp[:]...)
	return append(out, after...)
}

// stampOf returns the 10 bytes of key after prefix.
func stampOf(prefix, key []byte) (kv.Versionstamp, bool) {
	var s kv.Versionstamp
	if !bytes.HasPrefix(key, prefix) || len(key) < len(prefix)+10 {
		return s, false
	}
	copy(s[:], key[len(prefix):])
	return s, true
}

// stampOfCommit waits for a committed transaction's versionstamp.
func (e *env) stampOfCommit(f *kv.Future[kv.Versionstamp]) kv.Versionstamp {
	e.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, waitTimeout)
	defer cancel()
	s, err := f.Get(ctx)
	if err != nil {
		e.Fatalf("versionstamp of a committed transaction: %v", err)
	}
	return s
}

// testVersionstampFuture: the versionstamp future becomes ready when, and
// only when, the transaction commits; it fails when the transaction is
// abandoned.
func testVersionstampFuture(e *env) {
	var f *kv.Future[kv.Versionstamp]
	e.transact(func(tx kv.Tx) error {
		tx.Set(e.k("k"), []byte("v"))
		f = tx.Versionstamp()
		if closed(f.Ready()) {
			return fmt.Errorf("kvtest: versionstamp ready before commit")
		}
		return nil
	})
	if s := e.stampOfCommit(f); s == (kv.Versionstamp{}) {
		e.Errorf("versionstamp is all zeros")
	}

	tx := e.begin()
	tx.Set(e.k("cancelled"), []byte("v"))
	f = tx.Versionstamp()
	tx.Cancel()
	e.await(f.Ready(), "versionstamp of a cancelled transaction")
	if s, err := f.Get(e.ctx); err == nil {
		e.Errorf("versionstamp of a cancelled transaction = %x, want an error", s)
	}
}

// testVersionstampedKeyAndValue: the placeholder is replaced by exactly the
// commit's versionstamp, at the offset the trailing 4 bytes give, and the 4
// offset bytes are removed.
func testVersionstampedKeyAndValue(e *env) {
	keyPrefix := e.k("vk/")
	var f *kv.Future[kv.Versionstamp]
	e.transact(func(tx kv.Tx) error {
		tx.SetVersionstampedKey(withPlaceholder(keyPrefix, []byte("/suffix")), []byte("val"))
		tx.SetVersionstampedValue(e.k("vv"), withPlaceholder([]byte("pre:"), []byte(":post")))
		tx.SetVersionstampedValue(e.k("vv0"), withPlaceholder(nil, nil))
		f = tx.Versionstamp()
		return nil
	})
	s := e.stampOfCommit(f)

	kvs := e.scan(e.r("vk/"))
	want := stamped(keyPrefix, s, []byte("/suffix"))
	found := false
	for _, kv := range kvs {
		if bytes.Equal(kv.Key, want) {
			found = true
			if string(kv.Value) != "val" {
				e.Errorf("versionstamped key's value = %s, want \"val\"", show(kv.Value))
			}
		} else if len(kv.Key) != len(want) || !bytes.HasSuffix(kv.Key, []byte("/suffix")) {
			e.Errorf("stray key %x", kv.Key)
		}
	}
	if !found {
		e.Errorf("versionstamped keys = %x, want one that is %x", keysOf(kvs), want)
	}
	// Transact commits once, also through commit_unknown_result.
	if len(kvs) != 1 {
		e.Errorf("%d versionstamped keys, want 1", len(kvs))
	}
	e.wantValue("vv", stamped([]byte("pre:"), s, []byte(":post")))
	e.wantValue("vv0", s[:])
}

// testVersionstampSameTransaction: every versionstamped key of one
// transaction gets the same stamp; a user version after the stamp tells
// them apart.
func testVersionstampSameTransaction(e *env) {
	prefix := e.k("two/")
	var f *kv.Future[kv.Versionstamp]
	e.transact(func(tx kv.Tx) error {
		tx.SetVersionstampedKey(withPlaceholder(prefix, []byte{0, 0}), []byte("first"))
		tx.SetVersionstampedKey(withPlaceholder(prefix, []byte{0, 1}), []byte("second"))
		f = tx.Versionstamp()
		return nil
	})
	s := e.stampOfCommit(f)
	byStamp := map[kv.Versionstamp][]string{}
	kvs := e.scan(e.r("two/"))
	for _, kv := range kvs {
		ks, ok := stampOf(prefix, kv.Key)
		if !ok || len(kv.Key) != len(prefix)+12 {
			e.Fatalf("malformed versionstamped key %x", kv.Key)
		}
		byStamp[ks] = append(byStamp[ks], fmt.Sprintf("%x=%s", kv.Key[len(kv.Key)-2:], kv.Value))
	}
	for ks, got := range byStamp {
		if want := []string{"0000=first", "0001=second"}; !slices.Equal(got, want) {
			e.Errorf("keys with stamp %x: %v, want %v", ks, got, want)
		}
	}
	if _, ok := byStamp[s]; !ok {
		e.Errorf("no key has the transaction's stamp %x; stamps: %v", s, byStamp)
	}
	if !e.f.Faults && len(byStamp) != 1 {
		e.Errorf("%d distinct stamps, want 1", len(byStamp))
	}
}

// testVersionstampOrder: versionstamps are unique across concurrent commits
// and strictly increase from one commit to the next.
func testVersionstampOrder(e *env) {
	const workers, perWorker, sequential = 8, 200, 100
	prefix := e.k("c/")
	stamps := make([][]kv.Versionstamp, workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				var f *kv.Future[kv.Versionstamp]
				err := e.db.Transact(e.ctx, func(tx kv.Tx) error {
					tx.SetVersionstampedKey(withPlaceholder(prefix, []byte(fmt.Sprintf("/%d/%d", w, i))), nil)
					f = tx.Versionstamp()
					return nil
				})
				if err == nil {
					ctx, cancel := context.WithTimeout(e.ctx, waitTimeout)
					var s kv.Versionstamp
					s, err = f.Get(ctx)
					cancel()
					stamps[w] = append(stamps[w], s)
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d, commit %d: %w", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.Fatal(err)
	}
	seen := map[kv.Versionstamp]bool{}
	for w, ss := range stamps {
		for i, s := range ss {
			if seen[s] {
				e.Errorf("versionstamp %x given to two commits", s)
			}
			seen[s] = true
			if i > 0 && bytes.Compare(s[:], ss[i-1][:]) <= 0 {
				e.Errorf("worker %d: commit %d's versionstamp %x is not after the previous commit's %x", w, i, s, ss[i-1])
			}
		}
	}
	kvs := e.scan(e.r("c/"))
	stored := map[kv.Versionstamp]bool{}
	for _, kv := range kvs {
		s, ok := stampOf(prefix, kv.Key)
		if !ok {
			e.Fatalf("malformed versionstamped key %x", kv.Key)
		}
		stored[s] = true
	}
	for s := range seen {
		if !stored[s] {
			e.Errorf("no key stored with committed versionstamp %x", s)
		}
	}
	if n := workers * perWorker; len(kvs) < n || (!e.f.Faults && len(kvs) != n) {
		e.Errorf("%d versionstamped keys stored after %d commits", len(kvs), n)
	}

	var prev kv.Versionstamp
	for i := range sequential {
		var f *kv.Future[kv.Versionstamp]
		e.transact(func(tx kv.Tx) error {
			tx.SetVersionstampedValue(e.k("seq"), withPlaceholder(nil, nil))
			f = tx.Versionstamp()
			return nil
		})
		s := e.stampOfCommit(f)
		if i > 0 && bytes.Compare(s[:], prev[:]) <= 0 {
			e.Fatalf("sequential commit %d: versionstamp %x is not after the previous %x", i, s, prev)
		}
		prev = s
		e.wantValue("seq", s[:])
	}
}

func keysOf(kvs []kv.KeyValue) [][]byte {
	out := make([][]byte, len(kvs))
	for i, kv := range kvs {
		out[i] = kv.Key
	}
	return out
}

// testReadVersionOrdersCommits: a commit's version (the first 8 bytes of
// its versionstamp) is above the read version of its transaction and of
// every transaction that began before it committed and cannot see it, and
// at most the read version of every transaction that begins after it
// committed; the snapshot view reports the same read version. This is the
// order that FoundationDB's versions give (a read version is at least
// every version committed before it was asked for, fdbclient's
// NativeAPI.actor.cpp getReadVersion), and that the jobs layer's activity
// monitor relies on.
func testReadVersionOrdersCommits(e *env) {
	before := e.begin()
	defer before.Cancel()
	rvBefore, err := before.ReadVersion()
	if err != nil {
		e.Fatalf("ReadVersion: %v", err)
	}
	if rv, err := before.Snapshot().ReadVersion(); err != nil || rv != rvBefore {
		e.Fatalf("snapshot ReadVersion = %d, %v; the transaction's is %d", rv, err, rvBefore)
	}
	w := e.begin()
	rvW, err := w.ReadVersion()
	if err != nil {
		e.Fatalf("ReadVersion: %v", err)
	}
	w.Set(e.k("rv"), []byte("v"))
	f := w.Versionstamp()
	if err := w.Commit(); err != nil {
		e.Fatalf("commit: %v", err)
	}
	cv := e.stampOfCommit(f).CommitVersion()
	if cv <= rvW || cv <= rvBefore {
		e.Errorf("commit version %d, not above the read versions %d (its own) and %d (an earlier transaction's)", cv, rvW, rvBefore)
	}
	if v, err := before.Get(e.k("rv")); err != nil || v != nil {
		e.Errorf("a transaction that began before the commit reads %q, %v", v, err)
	}
	after := e.begin()
	defer after.Cancel()
	rvAfter, err := after.ReadVersion()
	if err != nil {
		e.Fatalf("ReadVersion: %v", err)
	}
	if rvAfter < cv {
		e.Errorf("read version %d of a transaction begun after a commit at %d", rvAfter, cv)
	}
}
