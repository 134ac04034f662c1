package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

const eventsConfig = `
store:
  path: %s
types:
  echo: {}
pipelines:
  echo:
    type: echo
    handler:
      exec:
        command: ["cat"]
`

// follower is a process that follows the event stream and prints lines.
type follower struct {
	name  string
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	added chan struct{} // gets a value whenever a line is added
	done  chan struct{}
}

func startFollower(t *testing.T, name string, cmd *exec.Cmd) *follower {
	t.Helper()
	f := &follower{name: name, cmd: cmd, added: make(chan struct{}, 1), done: make(chan struct{})}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(f.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f.mu.Lock()
			f.lines = append(f.lines, sc.Text())
			f.mu.Unlock()
			select {
			case f.added <- struct{}{}:
			default:
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-f.done
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s printed:\n%s", f.name, strings.Join(f.snapshot(), "\n"))
		}
	})
	return f
}

func (f *follower) snapshot() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.lines...)
}

// waitFor waits until the follower printed a line containing each of
// want (in any lines), and returns the lines.
func (f *follower) waitFor(t *testing.T, want ...string) []string {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		lines := f.snapshot()
		all := strings.Join(lines, "\n")
		missing := ""
		for _, w := range want {
			if !strings.Contains(all, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return lines
		}
		select {
		case <-f.added:
		case <-f.done:
			t.Fatalf("%s ended without printing %q:\n%s", f.name, missing, all)
		case <-deadline:
			t.Fatalf("%s did not print %q within %v:\n%s", f.name, missing, waitLimit, all)
		}
	}
}

// The event stream end to end: `jobstage events` and the Python example
// follow a server that works jobs, is killed with SIGKILL and restarted;
// both go on from their last cursor and miss nothing.
func TestEventsFollowers(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jobstage.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, eventsConfig, filepath.Join(dir, "data")), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cfg)
	ctx := context.Background()

	var fs []*follower
	cli := exec.Command(binary, "events", "echo", "--server", s.url)
	fs = append(fs, startFollower(t, "jobstage events", cli))
	python, err := exec.LookPath("python3")
	if err == nil {
		py := exec.Command(python, filepath.Join("..", "..", "examples", "events", "follow.py"), "--server", s.url, "echo")
		fs = append(fs, startFollower(t, "follow.py", py))
	} else if os.Getenv("JOBSTAGE_REQUIRE_PYTHON") != "" {
		t.Fatal("python3 not found, and JOBSTAGE_REQUIRE_PYTHON is set")
	} else {
		t.Log("python3 not found: the Python example is not run")
	}
	for _, f := range fs {
		f.waitFor(t, "following from")
	}

	cl := httpapi.NewClient(s.url, "", nil)
	for _, id := range []string{"a", "b"} {
		if _, err := cl.Enqueue(ctx, "echo", httpapi.NewJob{ID: id, Data: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range fs {
		f.waitFor(t, "echo a pending", "echo a running", "echo a finished (succeeded)", "echo b finished (succeeded)")
	}

	// Killed and restarted: the followers reconnect with their cursors.
	s.kill()
	if _, err := cl.Enqueue(ctx, "echo", httpapi.NewJob{ID: "down"}); err == nil {
		t.Fatal("an enqueue succeeded with the server killed")
	}
	s = startServer(t, cfg, "JOBSTAGE_HTTP__LISTEN="+strings.TrimPrefix(s.url, "http://"))
	cl = httpapi.NewClient(s.url, "", nil)
	if _, err := cl.Enqueue(ctx, "echo", httpapi.NewJob{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	if j, err := cl.Wait(ctx, "echo", "c", fdbq.Finished, 30*time.Second); err != nil || j.State != fdbq.Finished {
		t.Fatalf("c: %v %+v", err, j)
	}
	for _, f := range fs {
		lines := f.waitFor(t, "echo c finished (succeeded)")
		for _, l := range lines {
			if strings.HasPrefix(l, "reset") {
				t.Errorf("%s was reset after a restart within the lease: %s", f.name, l)
			}
		}
		// Each change once: a resumed stream repeats nothing.
		n := 0
		for _, l := range lines {
			if strings.Contains(l, "echo a finished (succeeded)") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s printed a's finish %d times", f.name, n)
		}
	}
	s.stop()
}
