package embedded_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// The crash test runs this test binary again as a child process that
// writes to a store and reports each acknowledged commit on stdout; the
// parent kills it with SIGKILL mid-load, reopens the store and checks that
// every acknowledged commit survived and that no transaction survived in
// part.
const childEnv = "JOBSTAGE_EMBEDDED_CRASH_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "load":
		first, _ := strconv.Atoi(os.Getenv("JOBSTAGE_EMBEDDED_FIRST"))
		crashChildLoad(os.Getenv("JOBSTAGE_EMBEDDED_DIR"), first)
		return
	case "hold":
		crashChildHold(os.Getenv("JOBSTAGE_EMBEDDED_DIR"))
		return
	case "nosync":
		first, _ := strconv.Atoi(os.Getenv("JOBSTAGE_EMBEDDED_FIRST"))
		crashChildNoSync(os.Getenv("JOBSTAGE_EMBEDDED_DIR"), first)
		return
	}
	goleak.VerifyTestMain(m)
}

func crashKeyA(n int) []byte { return fmt.Appendf(nil, "a/%09d", n) }
func crashKeyB(n int) []byte { return fmt.Appendf(nil, "b/%09d", n) }

var crashCounter = []byte("counter")

// crashChild commits forever from 16 goroutines on the store in dir: each
// takes the next number from first on, commits it with commit and prints
// the line commit returns once the commit is acknowledged. Any error ends
// the process with status 2.
func crashChild(dir string, opts embedded.Options, first int, commit func(db *kv.DB, n int) (string, error)) {
	st, err := embedded.Open(dir, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	db := kv.NewDB(st, kv.Options{})
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	next := first
	for range 16 {
		go func() {
			for {
				mu.Lock()
				n := next
				next++
				mu.Unlock()
				line, err := commit(db, n)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				mu.Lock()
				fmt.Fprintln(out, line)
				out.Flush()
				mu.Unlock()
			}
		}()
	}
	select {}
}

// crashChildLoad: each transaction writes two keys and bumps a counter.
func crashChildLoad(dir string, first int) {
	crashChild(dir, embedded.Options{}, first, func(db *kv.DB, n int) (string, error) {
		value := bytes.Repeat([]byte{byte(n)}, 200)
		return strconv.Itoa(n), db.Transact(context.Background(), func(tx kv.Tx) error {
			tx.Set(crashKeyA(n), value)
			tx.Set(crashKeyB(n), value)
			tx.Add(crashCounter, 1)
			return nil
		})
	})
}

// crashChildNoSync: on a NoSync store, each transaction writes one key
// whose value is its versionstamp and bumps a counter; the line carries
// the versionstamp.
func crashChildNoSync(dir string, first int) {
	crashChild(dir, embedded.Options{NoSync: true}, first, func(db *kv.DB, n int) (string, error) {
		var f *kv.Future[kv.Versionstamp]
		if err := db.Transact(context.Background(), func(tx kv.Tx) error {
			tx.SetVersionstampedValue(crashKeyA(n), make([]byte, 14))
			tx.Add(crashCounter, 1)
			f = tx.Versionstamp()
			return nil
		}); err != nil {
			return "", err
		}
		vs, err := f.Get(context.Background())
		return fmt.Sprintf("%d %x", n, vs), err
	})
}

// TestCrashNoSync: a NoSync store killed with -9 may lose acknowledged
// commits, but what it keeps is a prefix of the commits in versionstamp
// order, with no transaction in part, and the versionstamps of the next
// run come after every one handed out before the crash.
func TestCrashNoSync(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a child process mid-load")
	}
	dir := t.TempDir()
	var highest kv.Versionstamp // the highest versionstamp acknowledged so far
	lost := 0
	for round := 0; round < 3; round++ {
		cmd, lines := startChild(t, "nosync", dir, fmt.Sprintf("JOBSTAGE_EMBEDDED_FIRST=%d", round*1_000_000))
		acked := map[int]kv.Versionstamp{}
		parse := func(line string) {
			var n int
			var hexStamp string
			if _, err := fmt.Sscanf(line, "%d %s", &n, &hexStamp); err != nil {
				t.Fatalf("child wrote %q", line)
			}
			var vs kv.Versionstamp
			if b, err := hex.DecodeString(hexStamp); err != nil || copy(vs[:], b) != len(vs) {
				t.Fatalf("child wrote %q", line)
			}
			acked[n] = vs
		}
		for len(acked) < 5000 && lines.Scan() {
			parse(lines.Text())
		}
		if len(acked) < 5000 {
			t.Fatalf("round %d: child stopped after %d commits", round, len(acked))
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		// The kill may cut the child's last line short: it acknowledged
		// nothing then, and is left out; every line before it is whole.
		var last string
		for lines.Scan() {
			if last != "" {
				parse(last)
			}
			last = lines.Text()
		}
		var n int
		var hexStamp string
		if _, err := fmt.Sscanf(last, "%d %s", &n, &hexStamp); err == nil && len(hexStamp) == 2*len(kv.Versionstamp{}) {
			parse(last)
		}

		st, err := embedded.Open(dir, embedded.Options{NoSync: true})
		if err != nil {
			t.Fatalf("reopen after kill -9: %v", err)
		}
		db := kv.NewDB(st, kv.Options{})
		ctx := context.Background()
		var present map[int]kv.Versionstamp
		err = db.ReadTransact(ctx, func(tx kv.ReadTx) error {
			present = map[int]kv.Versionstamp{}
			as, err := tx.GetRange(kv.Range{Begin: []byte("a/"), End: []byte("a0")}, kv.RangeOptions{})
			if err != nil {
				return err
			}
			counter, err := tx.Get(crashCounter)
			if err != nil {
				return err
			}
			if got := kv.DecodeInt64(counter); got != int64(len(as)) {
				return fmt.Errorf("counter %d but %d transactions: a transaction survived in part", got, len(as))
			}
			for _, a := range as {
				n, err := strconv.Atoi(strings.TrimPrefix(string(a.Key), "a/"))
				if err != nil || len(a.Value) != 10 {
					return fmt.Errorf("unexpected key-value %q = %x", a.Key, a.Value)
				}
				present[n] = kv.Versionstamp(a.Value)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		// The newest surviving commit of this round; every commit of the
		// round acknowledged before it must have survived too.
		var newest kv.Versionstamp
		for n, vs := range present {
			if n >= round*1_000_000 && bytes.Compare(vs[:], newest[:]) > 0 {
				newest = vs
			}
		}
		roundLost := 0
		for n, vs := range acked {
			if bytes.Compare(vs[:], highest[:]) <= 0 {
				t.Fatalf("round %d: commit %d has versionstamp %x, not after %x of an earlier run", round, n, vs, highest)
			}
			got, ok := present[n]
			switch {
			case ok && got != vs:
				t.Fatalf("round %d: commit %d acknowledged with %x, stored %x", round, n, vs, got)
			case !ok && bytes.Compare(vs[:], newest[:]) < 0:
				t.Fatalf("round %d: commit %d (%x) lost although %x survived: not a prefix", round, n, vs, newest)
			case !ok:
				roundLost++
			}
		}
		for _, vs := range acked {
			if bytes.Compare(vs[:], highest[:]) > 0 {
				highest = vs
			}
		}
		lost += roundLost
		t.Logf("round %d: %d acknowledged, %d lost by kill -9", round, len(acked), roundLost)
		if cerr := db.Close(); cerr != nil {
			t.Fatal(cerr)
		}
	}
	t.Logf("%d acknowledged commits lost in all", lost)
}

// crashChildHold opens the store, says so, and waits to be killed.
func crashChildHold(dir string) {
	if _, err := embedded.Open(dir, embedded.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("open")
	select {}
}

func startChild(t *testing.T, mode, dir string, env ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	return jobtest.StartChild(t, append([]string{childEnv + "=" + mode, "JOBSTAGE_EMBEDDED_DIR=" + dir}, env...)...)
}

func TestCrashDurability(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a child process mid-load")
	}
	dir := t.TempDir()
	for round := 0; round < 3; round++ {
		// Each round writes new keys, so every key written is one
		// transaction and the counter must equal the number of keys.
		cmd, lines := startChild(t, "load", dir, fmt.Sprintf("JOBSTAGE_EMBEDDED_FIRST=%d", round*1_000_000))
		acked := map[int]bool{}
		for len(acked) < 2000 && lines.Scan() {
			n, err := strconv.Atoi(lines.Text())
			if err != nil {
				t.Fatalf("child wrote %q", lines.Text())
			}
			acked[n] = true
		}
		if len(acked) < 2000 {
			t.Fatalf("round %d: child stopped after %d commits", round, len(acked))
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		// Lines still in the pipe are acknowledged commits too.
		for lines.Scan() {
			if n, err := strconv.Atoi(lines.Text()); err == nil {
				acked[n] = true
			}
		}

		st, err := embedded.Open(dir, embedded.Options{})
		if err != nil {
			t.Fatalf("reopen after kill -9: %v", err)
		}
		db := kv.NewDB(st, kv.Options{})
		err = db.ReadTransact(context.Background(), func(tx kv.ReadTx) error {
			as, err := tx.GetRange(kv.Range{Begin: []byte("a/"), End: []byte("a0")}, kv.RangeOptions{})
			if err != nil {
				return err
			}
			bs, err := tx.GetRange(kv.Range{Begin: []byte("b/"), End: []byte("b0")}, kv.RangeOptions{})
			if err != nil {
				return err
			}
			counter, err := tx.Get(crashCounter)
			if err != nil {
				return err
			}
			if len(as) != len(bs) {
				return fmt.Errorf("%d a-keys but %d b-keys: a transaction survived in part", len(as), len(bs))
			}
			if got := kv.DecodeInt64(counter); got != int64(len(as)) {
				return fmt.Errorf("counter %d but %d transactions: a transaction survived in part", got, len(as))
			}
			present := map[int]bool{}
			for i, a := range as {
				if !bytes.Equal(a.Key[1:], bs[i].Key[1:]) || !bytes.Equal(a.Value, bs[i].Value) {
					return fmt.Errorf("a/b mismatch at %q / %q", a.Key, bs[i].Key)
				}
				n, err := strconv.Atoi(strings.TrimPrefix(string(a.Key), "a/"))
				if err != nil {
					return fmt.Errorf("unexpected key %q", a.Key)
				}
				present[n] = true
			}
			for n := range acked {
				if !present[n] {
					return fmt.Errorf("acknowledged commit %d lost", n)
				}
			}
			t.Logf("round %d: %d acknowledged, %d present after kill -9", round, len(acked), len(as))
			return nil
		})
		if cerr := db.Close(); cerr != nil {
			t.Fatal(cerr)
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

func TestDirectoryLockedByAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	_, lines := startChild(t, "hold", dir)
	if !lines.Scan() || lines.Text() != "open" {
		t.Fatalf("child did not open the store")
	}
	_, err := embedded.Open(dir, embedded.Options{})
	if !errors.Is(err, embedded.ErrLocked) {
		t.Fatalf("Open of a directory held by another process: %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "process") {
		t.Fatalf("error does not name the directory and holder: %v", err)
	}
}

func TestDirectoryLockedInProcess(t *testing.T) {
	dir := t.TempDir()
	st, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := embedded.Open(dir, embedded.Options{}); !errors.Is(err, embedded.ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = embedded.Open(dir, embedded.Options{})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	st.Close()
}

func TestCorruptDirectory(t *testing.T) {
	dir := t.TempDir()
	st, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	if err := db.Transact(context.Background(), func(tx kv.Tx) error {
		tx.Set([]byte("k"), []byte("v"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	manifests, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	if len(manifests) == 0 {
		t.Fatal("no MANIFEST in the store directory")
	}
	for _, m := range manifests {
		if err := os.WriteFile(m, bytes.Repeat([]byte{0xde, 0xad}, 100), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err = embedded.Open(dir, embedded.Options{})
	if err == nil {
		t.Fatal("Open of a corrupt directory succeeded")
	}
	if !strings.Contains(err.Error(), dir) {
		t.Fatalf("error does not name the directory: %v", err)
	}
	t.Logf("corrupt directory: %v", err)
}

func TestNotAStoreDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "CURRENT"), []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := embedded.Open(dir, embedded.Options{}); err == nil {
		t.Fatal("Open of a directory with a bogus CURRENT file succeeded")
	}
}

func TestVersionstampsIncreaseAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	var last kv.Versionstamp
	for round := 0; round < 3; round++ {
		st, err := embedded.Open(dir, embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		db := kv.NewDB(st, kv.Options{})
		for i := 0; i < 5; i++ {
			f, err := kv.Transact(context.Background(), db, func(tx kv.Tx) (*kv.Future[kv.Versionstamp], error) {
				tx.Set([]byte("k"), []byte{byte(i)})
				return tx.Versionstamp(), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			vs, err := f.Get(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Compare(vs[:], last[:]) <= 0 {
				t.Fatalf("round %d: versionstamp %x not after %x", round, vs, last)
			}
			last = vs
		}
		db.Close()
	}
}

func TestCloseFailsWatchesAndTransactions(t *testing.T) {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	ctx := context.Background()
	w, err := kv.Transact(ctx, db, func(tx kv.Tx) (kv.Watch, error) {
		return tx.Watch([]byte("k")), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	open, err := db.CreateTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.Wait(waitCtx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("watch after Close: %v, want a store error", err)
	}
	if _, err := open.Get([]byte("k")); err == nil {
		t.Fatal("read after Close succeeded")
	}
	open.Set([]byte("k"), []byte("v"))
	if err := open.Commit(); err == nil {
		t.Fatal("commit after Close succeeded")
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
