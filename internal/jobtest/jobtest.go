// Package jobtest holds helpers that the tests of several packages share.
package jobtest

import (
	"bufio"
	"context"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/tuple"
)

// Recv receives from ch, or fails the test after limit.
func Recv[T any](t testing.TB, ch <-chan T, limit time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(limit):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// ChangeKey is the key an fdbq queue with the default prefix changes
// whenever a job of typ changes while a process holds an interest in it
// (tag 4 of the data model in fdbq/doc.go; see HoldChanges).
func ChangeKey(typ string) []byte {
	return tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{4, typ})
}

// HoldChanges writes an interest entry in typ's change key, as a process
// that watches it does (tags 18 and 19 of the data model in fdbq/doc.go),
// so that every change to a job of typ bumps the key until the returned
// func clears it.
func HoldChanges(t testing.TB, db *kv.DB, typ string) func() {
	t.Helper()
	root := tuple.FromBytes(fdbq.DefaultPrefix)
	entry := root.MustPack(tuple.Tuple{19, typ, "jobtest." + t.Name()})
	count := root.MustPack(tuple.Tuple{18, typ})
	change := func(set bool) error {
		return db.Transact(context.Background(), func(tx kv.Tx) error {
			was, err := tx.Get(entry)
			if err != nil || (was != nil) == set {
				return err
			}
			if set {
				tx.Set(entry, tuple.Tuple{int64(math.MaxInt64 / 2)}.MustPack())
				tx.Add(count, 1)
			} else {
				tx.Clear(entry)
				tx.Add(count, -1)
			}
			return nil
		})
	}
	if err := change(true); err != nil {
		t.Fatalf("holding the change key of %s: %v", typ, err)
	}
	return func() { _ = change(false) }
}

// WaitStore waits, up to limit, until cond holds, re-checking it after each
// change to a job of typ: a watch on the type's change key, armed before
// each check so that no change between the check and the wait is missed.
func WaitStore(t testing.TB, db *kv.DB, typ string, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	defer HoldChanges(t, db, typ)()
	key := ChangeKey(typ)
	for {
		w, err := kv.Transact(ctx, db, func(tx kv.Tx) (kv.Watch, error) { return tx.Watch(key), nil })
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if cond() {
			w.Cancel()
			return
		}
		if err := w.Wait(ctx); err != nil {
			w.Cancel()
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
}

// StartChild runs the test binary again as a child process, with env added
// to its environment and no test selected (its TestMain, seeing env, plays
// the child), and returns it with a scanner over its standard output. The
// child is killed at the end of the test if it still runs.
func StartChild(t testing.TB, env ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, bufio.NewScanner(stdout)
}

// OpenDB opens a durable embedded store in a directory of the test's, and
// closes it when the test ends.
func OpenDB(t testing.TB) *kv.DB {
	t.Helper()
	st, err := embedded.Open(t.TempDir(), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	t.Cleanup(func() { db.Close() })
	return db
}

// MonitorLoops counts the activity monitors (fdbq.Monitor) whose loop
// runs in the process, once the count is want or after a second: a
// monitor's goroutine that has not run yet is not counted as its loop,
// and one whose Stop returned may still be leaving it. Goroutine stacks
// are all there is to observe, so it looks again every few milliseconds.
func MonitorLoops(want int) int {
	loops := func() int {
		buf := make([]byte, 1<<22)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "fdbq.(*Monitor).loop(")
	}
	n := loops()
	for deadline := time.Now().Add(time.Second); n != want && time.Now().Before(deadline); n = loops() {
		time.Sleep(5 * time.Millisecond)
	}
	return n
}

// Seed is the seed of a randomized test: JOBSTAGE_SEED if set (to replay
// a failure), else a new one. The test prints it when it fails.
func Seed(t testing.TB) uint64 {
	t.Helper()
	if s := os.Getenv("JOBSTAGE_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("JOBSTAGE_SEED=%q: %v", s, err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// RenameJob gives the job from of typ, in a store with fdbq's default
// prefix, the id to, as an earlier version that let that id in would have
// written it: every key of the queue naming the job by its id (its
// record and its index entries) is moved to the same key naming it to.
// A job's record does not hold its id, and its zone is stored in it, so
// the job is then to. It fails the test when no key names from.
func RenameJob(t testing.TB, db *kv.DB, typ, from, to string) {
	t.Helper()
	root := tuple.FromBytes(fdbq.DefaultPrefix)
	moved := 0
	if err := db.Transact(context.Background(), func(tx kv.Tx) error {
		moved = 0
		kvs, err := tx.GetRange(root.Range(), kv.RangeOptions{})
		if err != nil {
			return err
		}
		for _, x := range kvs {
			tup, err := root.Unpack(x.Key)
			if err != nil || len(tup) < 3 || tup[1] != typ {
				continue
			}
			renamed := false
			for i := 2; i < len(tup); i++ {
				if s, ok := tup[i].(string); ok && s == from {
					tup[i], renamed = to, true
				}
			}
			if !renamed {
				continue
			}
			key, err := root.Pack(tup)
			if err != nil {
				return err
			}
			tx.Clear(x.Key)
			tx.Set(key, x.Value)
			moved++
		}
		return nil
	}); err != nil {
		t.Fatalf("renaming job %s/%s to %q: %v", typ, from, to, err)
	}
	if moved == 0 {
		t.Fatalf("renaming job %s/%s to %q: no key names it", typ, from, to)
	}
}
