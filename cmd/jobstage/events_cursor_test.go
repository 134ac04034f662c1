package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
)

// readyWatcher passes an event stream's answer on and says once the
// ready event went through.
type readyWatcher struct {
	http.ResponseWriter
	seen  bytes.Buffer
	ready func()
	once  sync.Once
}

func (w *readyWatcher) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.seen.Write(b[:n])
	return n, err
}

func (w *readyWatcher) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	if strings.Contains(w.seen.String(), "event: ready") {
		w.once.Do(w.ready)
	}
}

func (w *readyWatcher) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestEventsResumesFromReady: `jobstage events`, and the Python example,
// whose stream drops after its ready event, before any job event,
// reconnect from the ready event's cursor: a change committed while they
// were away is reported.
func TestEventsResumesFromReady(t *testing.T) {
	t.Run("jobstage events", func(t *testing.T) {
		resumesFromReady(t, " email while-away pending ", func(ctx context.Context, url string) (string, string, int) {
			var out, errOut bytes.Buffer
			code := run(ctx, nil, []string{"events", "email", "--count", "1", "--server", url}, strings.NewReader(""), &out, &errOut)
			return out.String(), errOut.String(), code
		})
	})
	t.Run("follow.py", func(t *testing.T) {
		python, err := exec.LookPath("python3")
		if err != nil {
			t.Skip("no python3")
		}
		resumesFromReady(t, "email while-away pending ", func(ctx context.Context, url string) (string, string, int) {
			var out, errOut bytes.Buffer
			py := exec.CommandContext(ctx, python, filepath.Join("..", "..", "examples", "events", "follow.py"), "--count", "1", "--server", url, "email")
			py.Stdout, py.Stderr = &out, &errOut
			err := py.Run()
			code := 0
			if err != nil {
				code = -1
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				}
			}
			return out.String(), errOut.String(), code
		})
	})
}

// emailServer is an HTTP API over a store of its own with type email.
func emailServer(t *testing.T) (*fdbq.Queue, *kv.DB, *httpapi.Server) {
	t.Helper()
	db := jobtest.OpenDB(t)
	q := fdbq.New(db, fdbq.Options{})
	if err := q.SetType(context.Background(), db, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(q, httpapi.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return q, db, srv
}

// resumesFromReady runs a follower of email's events (follow) against a
// server whose first stream ends right after its ready event and whose
// second waits until a job was enqueued meanwhile; the follower must
// print want, that job's event.
func resumesFromReady(t *testing.T, want string, follow func(ctx context.Context, url string) (out, errOut string, code int)) {
	ctx := context.Background()
	_, _, srv := emailServer(t)
	dropped := make(chan struct{})   // the first stream ended after its ready event
	gate := make(chan struct{})      // the second stream may start
	reconnected := make(chan string) // the second stream's Last-Event-ID, once its ready went through
	var mu sync.Mutex
	streams := 0
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/events" {
			srv.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		streams++
		n := streams
		mu.Unlock()
		switch n {
		case 1:
			rctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			srv.ServeHTTP(&readyWatcher{ResponseWriter: w, ready: cancel}, r.WithContext(rctx))
			close(dropped)
		case 2:
			<-gate
			from := r.Header.Get("Last-Event-ID") + r.URL.Query().Get("cursor")
			srv.ServeHTTP(&readyWatcher{ResponseWriter: w, ready: func() { reconnected <- from }}, r)
		default:
			http.Error(w, "no third stream in this test", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(hs.Close)
	c := httpapi.NewClient(hs.URL, "", nil)

	type result struct {
		out, errOut string
		code        int
	}
	done := make(chan result, 1)
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() {
		out, errOut, code := follow(cctx, hs.URL)
		done <- result{out, errOut, code}
	}()

	select {
	case <-dropped:
	case <-time.After(30 * time.Second):
		t.Fatal("the first stream did not end")
	}
	// While the follower is away.
	if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: "while-away"}); err != nil {
		t.Fatal(err)
	}
	close(gate)
	var from string
	select {
	case from = <-reconnected:
	case <-time.After(30 * time.Second):
		t.Fatal("the follower did not reconnect")
	}
	// A change after the reconnection, so that the follower ends either way.
	if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: "after"}); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the follower did not end")
	}
	if r.code != 0 {
		t.Fatalf("exit %d: %s%s", r.code, r.out, r.errOut)
	}
	if from == "" || !strings.Contains(r.out, want) {
		t.Fatalf("reconnected from cursor %q; printed:\n%s%s", from, r.out, r.errOut)
	}
}

// The Python example prints what the stream carries with control and
// bidi characters escaped: a job id may hold a right-to-left override,
// which would otherwise turn the rest of the line around.
func TestFollowPyEscapes(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	ctx := context.Background()
	q, db, srv := emailServer(t)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	py := exec.CommandContext(rctx, python, filepath.Join("..", "..", "examples", "events", "follow.py"), "--count", "1", "--server", hs.URL, "email")
	stdout, err := py.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	py.Stderr = &errOut
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	buf := make([]byte, 4096)
	for !strings.Contains(out.String(), "following from") {
		n, err := stdout.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			t.Fatalf("follow.py ended before it was ready: %v; %s %s", err, out.String(), errOut.String())
		}
	}
	if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: "order-\u202e1234"}); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stdout)
	out.Write(rest)
	if err := py.Wait(); err != nil {
		t.Fatalf("follow.py: %v; %s %s", err, out.String(), errOut.String())
	}
	if got := out.String(); strings.ContainsRune(got, '\u202e') || !strings.Contains(got, `email order-\u202e1234 pending`) {
		t.Fatalf("follow.py printed %q, want the id with its override escaped", got)
	}
}
