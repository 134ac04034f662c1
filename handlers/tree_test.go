//go:build linux

package handlers_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jobstage/jobstage/handlers"
	"github.com/jobstage/jobstage/internal/proctest"
)

// treeSize is how many pids testdata/tree.sh writes.
const treeSize = 13

// treeCommand returns the command that starts testdata/tree.sh's process
// tree, and the file its pids go to.
func treeCommand(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	script, err := filepath.Abs("testdata/tree.sh")
	if err != nil {
		t.Fatal(err)
	}
	pids := filepath.Join(t.TempDir(), "pids")
	return append([]string{script, pids}, args...), pids
}

// treePids waits, up to waitLimit, for the tree to be up (all its pids
// written) and returns them; done ends the wait early, as a failure.
func treePids(t *testing.T, file string, done <-chan error) []int {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		b, _ := os.ReadFile(file)
		if lines := strings.Fields(string(b)); len(lines) >= treeSize {
			pids := make([]int, len(lines))
			for i, l := range lines {
				pid, err := strconv.Atoi(l)
				if err != nil || pid <= 0 {
					t.Fatalf("pid file line %q", l)
				}
				pids[i] = pid
			}
			return pids
		}
		select {
		case err := <-done:
			t.Fatalf("the handler returned (%v) before the tree was up: %s", err, b)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tree was not up within %v: %s", waitLimit, b)
		}
	}
}

// allDie waits, up to waitLimit, until none of pids lives on, and fails
// naming those that do (killing them).
func allDie(t *testing.T, pids []int) {
	t.Helper()
	fds := map[int]string{}
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if errors.Is(err, unix.ESRCH) {
			continue // gone already
		}
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		fds[fd] = strconv.Itoa(pid)
	}
	alive, err := proctest.WaitExit(fds, waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	if len(alive) > 0 {
		t.Fatalf("%d of the command's %d processes outlived it: %v", len(alive), len(pids), alive)
	}
}

func runTree(t *testing.T, ctx context.Context, args ...string) ([]int, <-chan error) {
	t.Helper()
	cmd, file := treeCommand(t, args...)
	h := mustExec(t, handlers.ExecOptions{Command: cmd})
	done := make(chan error, 1)
	go func() {
		_, err := h(ctx, job(`null`))
		done <- err
	}()
	return treePids(t, file, done), done
}

func handlerResult(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(waitLimit):
		t.Fatal("the handler did not return")
		return nil
	}
}

// TestExecHaltKillsProcessTree: when the job's context is cancelled (the job
// was halted), every process the command started dies, those in sessions
// of their own and those orphaned by a double fork included.
func TestExecHaltKillsProcessTree(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	pids, done := runTree(t, ctx)
	halted := errors.New("halted by the test")
	cancel(halted)
	if err := handlerResult(t, done); !errors.Is(err, halted) || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("error %v, want it to say the command was killed, with the cause", err)
	}
	allDie(t, pids)
}

// TestExecTimeoutKillsProcessTree: the same when the job's timeout passes.
func TestExecTimeoutKillsProcessTree(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pids, done := runTree(t, ctx)
	if err := handlerResult(t, done); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the deadline", err)
	}
	allDie(t, pids)
}

// TestExecExitKillsProcessTree: when the command exits, what it left
// running dies, wherever it moved.
func TestExecExitKillsProcessTree(t *testing.T) {
	pids, done := runTree(t, context.Background(), "exit")
	if err := handlerResult(t, done); err != nil {
		t.Fatal(err)
	}
	allDie(t, pids)
}
