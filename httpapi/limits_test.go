package httpapi_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

// deadline bounds every wait of these tests; they fail past it.
const deadline = 30 * time.Second

// rawConn is a client connection that writes requests by hand.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, url string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (rc *rawConn) send(s string) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, s); err != nil {
		rc.t.Fatal(err)
	}
}

// answer reads one answer, within the tests' deadline.
func (rc *rawConn) answer() *http.Response {
	rc.t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(deadline))
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		rc.t.Fatalf("reading the answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	return resp
}

// closed checks the server closes the connection, within the deadline.
func (rc *rawConn) closed() {
	rc.t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(deadline))
	n, err := rc.br.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		rc.t.Fatalf("the server kept the connection open for %s", deadline)
	case err == nil:
		rc.t.Fatalf("read %d more bytes, want the connection closed", n)
	}
}

// TestRefusalDoesNotWaitForTheBody: a request refused for its token is
// answered and its connection closed at once, though the body it
// announced never comes: the server has no read timeout here, so only
// the refusal itself can end the connection.
func TestRefusalDoesNotWaitForTheBody(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens})
	for _, tc := range []struct {
		name, auth string
		status     int
	}{
		{"no token", "", 401},
		{"unknown token", "Authorization: Bearer nope\r\n", 401},
		{"role", "Authorization: Bearer worker-secret\r\n", 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := dialRaw(t, e.url)
			rc.send("POST /v1/types/email/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n" + tc.auth + "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
			resp := rc.answer()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if !resp.Close {
				t.Errorf("the answer does not say Connection: close (%v)", resp.Header)
			}
			rc.closed()
		})
	}
	// A client that sent its whole body still reads the refusal.
	wantError(t, e.do("POST", "/v1/types/email/jobs", "", `{"id":"a"}`), 401, httpapi.CodeUnauthorized)
}

// TestNoTokensRefusalDoesNotWaitForTheBody: the refusal of a
// non-loopback client of a server without tokens closes too.
func TestNoTokensRefusalDoesNotWaitForTheBody(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	hs := nonLoopbackServer(t, e.srv)
	rc := dialRaw(t, hs.URL)
	rc.send("POST /v1/types/email/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n")
	if resp := rc.answer(); resp.StatusCode != 403 || !resp.Close {
		t.Fatalf("status %d, close %v", resp.StatusCode, resp.Close)
	}
	rc.closed()
}

// TestRequestTimeout: a request that outlives RequestTimeout answers 503
// not_ready; the long polls get MaxWait more and are not cut.
func TestRequestTimeout(t *testing.T) {
	e := newEnv(t, httpapi.Options{RequestTimeout: time.Nanosecond})
	wantError(t, e.do("GET", "/v1/types", "", ""), 503, httpapi.CodeNotReady, "request_timeout")

	e = newEnv(t, httpapi.Options{RequestTimeout: 50 * time.Millisecond})
	if _, err := e.q.Add(context.Background(), e.db, fdbq.NewJob{Type: "email", ID: "w"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a := e.do("GET", "/v1/types/email/jobs/w/wait?timeout=500ms", "", "")
	if a.status != 200 || time.Since(start) < 500*time.Millisecond {
		t.Fatalf("wait: %d after %s: %s", a.status, time.Since(start), a.body)
	}
	start = time.Now()
	a = e.do("POST", "/v1/types/email/accept", "", `{"max":1,"wait":"500ms"}`)
	if a.status != 200 {
		t.Fatalf("accept: %d after %s: %s", a.status, time.Since(start), a.body)
	}
}

// TestClientThatReadsNothingIsDisconnected: a client that does not read
// its answer holds the request only until its bound (and a second) has
// passed; then the server gives up on the answer and closes.
func TestClientThatReadsNothingIsDisconnected(t *testing.T) {
	handled := make(chan struct{})
	e := newEnv(t, httpapi.Options{RequestTimeout: 4 * time.Second}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r)
			if r.URL.Path == "/v1/types/email/jobs" && r.Method == "GET" {
				close(handled)
			}
		})
	})
	// An answer of about 8 MB, more than the connection's buffers hold
	// while nothing reads them.
	data := []byte(`"` + strings.Repeat("x", 80_000) + `"`)
	var jobs []fdbq.NewJob
	for i := range 100 {
		jobs = append(jobs, fdbq.NewJob{Type: "email", ID: fmt.Sprint(i), Data: data})
	}
	for i := 0; i < len(jobs); i += 50 {
		if _, err := e.q.AddBatch(context.Background(), e.db, jobs[i:i+50]); err != nil {
			t.Fatal(err)
		}
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /v1/types/email/jobs?limit=1000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-handled:
	case <-time.After(deadline):
		t.Fatalf("the handler still writes to a client that reads nothing after %s", deadline)
	}
	c.SetReadDeadline(time.Now().Add(deadline))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return // closed before the headers came through
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil {
		t.Fatalf("the whole answer (%d bytes, status %d) came through to a client that read nothing", n, resp.StatusCode)
	}
}

// TestLimitListener: past n open connections the next waits to be
// accepted until one closes; closing the listener ends a waiting Accept.
func TestLimitListener(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) }) // after the env's cleanups
	e := newEnv(t, httpapi.Options{})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := httpapi.LimitListener(inner, 2)
	hs := &http.Server{Handler: e.srv}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	url := "http://" + inner.Addr().String()
	get := "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

	var held []*rawConn
	for range 2 {
		rc := dialRaw(t, url)
		rc.send(get)
		if resp := rc.answer(); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		held = append(held, rc)
	}
	third := dialRaw(t, url)
	third.send(get)
	// Nothing announces that a connection was not accepted: a short wait
	// is the only check that the third is not served while two are open.
	third.c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := third.br.Peek(1); err == nil {
		t.Fatal("a third connection was served while two were open")
	}
	held[0].c.Close()
	if resp := third.answer(); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// At the limit again: Accept waits, and Close ends the wait.
	if err := hs.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(deadline):
		t.Fatal("Serve did not return after Close")
	}
	if httpapi.LimitListener(inner, 0) != inner {
		t.Error("LimitListener(l, 0) is not l")
	}
}

// TestLimitListenerCloseEndsAccept: an Accept waiting for a slot returns
// net.ErrClosed when the listener closes.
func TestLimitListenerCloseEndsAccept(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := httpapi.LimitListener(inner, 1)
	go func() {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err == nil {
			defer c.Close()
			io.Copy(io.Discard, c)
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	accepted := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		accepted <- err
	}()
	ln.Close()
	select {
	case err := <-accepted:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
	case <-time.After(deadline):
		t.Fatal("Accept still waiting after Close")
	}
	// A connection closed twice gives its slot back once.
	c.Close()
	c.Close()
}

// TestUnknownTypeEverywhere: every route that names an unregistered type
// answers 404 unknown_type, and a missing job of a registered type 404
// not_found. (A worker's lock on such a type is a lock that is gone: 409
// halt, as worker_test checks.)
func TestUnknownTypeEverywhere(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/types/nope/jobs", `{}`},
		{"GET", "/v1/types/nope/jobs", ``},
		{"GET", "/v1/types/nope/jobs/x", ``},
		{"GET", "/v1/types/nope/jobs/x/wait?timeout=0s", ``},
		{"GET", "/v1/types/nope/jobs/x/wait?timeout=100ms", ``},
		{"DELETE", "/v1/types/nope/jobs/x", ``},
		{"POST", "/v1/types/nope/jobs/x/cancel", ``},
		{"POST", "/v1/types/nope/jobs/x/requeue", ``},
		{"POST", "/v1/types/nope/pause", ``},
		{"POST", "/v1/types/nope/resume", ``},
		{"POST", "/v1/types/nope/accept", `{}`},
	} {
		t.Run(fmt.Sprintf("%s %s", r.method, r.path), func(t *testing.T) {
			wantError(t, e.do(r.method, r.path, "", r.body), 404, httpapi.CodeUnknownType, `"nope"`)
		})
	}
	wantError(t, e.do("GET", "/v1/types/email/jobs/x", "", ""), 404, httpapi.CodeNotFound)
	wantError(t, e.do("GET", "/v1/types/email/jobs/x/wait?timeout=0s", "", ""), 404, httpapi.CodeNotFound)
}
