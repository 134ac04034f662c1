package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/kv"
)

// stream is a Client.Events running in its own goroutine.
type stream struct {
	events chan httpapi.Event
	done   chan error
	cancel context.CancelFunc
}

func startStream(t *testing.T, c *httpapi.Client, types []string, cursor string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{events: make(chan httpapi.Event, 1000), done: make(chan error, 1), cancel: cancel}
	go func() {
		s.done <- c.Events(ctx, types, cursor, func(e httpapi.Event) error {
			select {
			case s.events <- e:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-s.done })
	return s
}

func (s *stream) next(t *testing.T) httpapi.Event {
	t.Helper()
	select {
	case e := <-s.events:
		return e
	case err := <-s.done:
		s.done <- err
		t.Fatalf("stream ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return httpapi.Event{}
}

// expect reads job events, "id state" each, and returns the last.
func (s *stream) expect(t *testing.T, want ...string) httpapi.Event {
	t.Helper()
	var last httpapi.Event
	for i, w := range want {
		e := s.next(t)
		if got := e.ID + " " + e.State; e.Kind != "job" || got != w || e.Type != "email" || e.Cursor == "" || e.At == nil {
			t.Fatalf("event %d: %+v, want %q", i, e, w)
		}
		last = e
	}
	return last
}

func TestEventsStream(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens})
	ctx := context.Background()
	c := httpapi.NewClient(e.url, "admin-secret", nil)
	s := startStream(t, c, []string{"email"}, "")
	if r := s.next(t); r.Kind != "ready" || r.Cursor == "" {
		t.Fatalf("first event %+v, want ready with a cursor", r)
	}
	if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, "email", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Requeue(ctx, "email", "a"); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "email", "a"); err != nil {
		t.Fatal(err)
	}
	last := s.expect(t, "a pending", "a finished", "a pending", "a removed")
	s.cancel()
	<-s.done
	s.done <- nil

	// Gone, then back with the last cursor: what happened meanwhile.
	if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	r := startStream(t, c, []string{"email"}, last.Cursor)
	if e := r.next(t); e.Kind != "ready" || e.Cursor != last.Cursor {
		t.Fatalf("resumed stream begins with %+v, want ready at %s", e, last.Cursor)
	}
	r.expect(t, "b pending")
}

// What a browser's EventSource does: reconnect with Last-Event-ID; and the
// cursor parameter, for clients that cannot set headers.
func TestEventsResumeHeaderAndParameter(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	ctx := context.Background()
	c := httpapi.NewClient(e.url, "", nil)
	s := startStream(t, c, nil, "")
	ready := s.next(t)
	if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	a := s.expect(t, "a pending")
	if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	s.expect(t, "b pending")
	for _, how := range []string{"header", "parameter"} {
		u := e.url + "/v1/events?type=email"
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if how == "header" {
			req.Header.Set("Last-Event-ID", a.Cursor)
		} else {
			req.URL.RawQuery += "&cursor=" + a.Cursor
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
			t.Fatalf("%s: %s, %s", how, resp.Status, ct)
		}
		br := bufio.NewReader(resp.Body)
		var ids, names []string
		for len(ids) < 2 {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("%s: %v", how, err)
			}
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				names = append(names, strings.TrimSpace(v))
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				var ev httpapi.Event
				if err := json.Unmarshal([]byte(v), &ev); err != nil {
					t.Fatalf("%s: data %q: %v", how, v, err)
				}
				ids = append(ids, ev.ID)
			}
		}
		resp.Body.Close() // ends the stream: the server sees the connection go
		if strings.Join(names, ",") != "ready,job" || ids[1] != "b" {
			t.Fatalf("%s: events %v of jobs %v, want ready then b", how, names, ids)
		}
	}
	if ready.Cursor >= a.Cursor {
		t.Fatalf("cursors %s then %s", ready.Cursor, a.Cursor)
	}
}

func TestEventsRefusals(t *testing.T) {
	ended := make(chan struct{}, 10)
	e := newEnv(t, httpapi.Options{Tokens: testTokens, MaxStreams: 1, Observe: func(route string, status int, _ time.Duration) {
		if route == "GET /v1/events" && status == http.StatusOK {
			ended <- struct{}{}
		}
	}})
	ctx := context.Background()
	for _, tc := range []struct {
		token, query, lastID string
		status               int
		code, says           string
	}{
		{"", "", "", 401, httpapi.CodeUnauthorized, "token"},
		{"worker-secret", "", "", 403, httpapi.CodeForbidden, "GET /v1/events"},
		{"metrics-secret", "", "", 403, httpapi.CodeForbidden, "GET /v1/events"},
		{"admin-secret", "?type=%ff", "", 400, httpapi.CodeInvalid, "type"},
		{"admin-secret", "?type=", "", 400, httpapi.CodeInvalid, "type"},
		{"admin-secret", "?cursor=zz", "", 400, httpapi.CodeInvalid, "cursor"},
		{"admin-secret", "?types=email", "", 400, httpapi.CodeInvalid, `unknown query parameter "types"`},
		{"admin-secret", "?cursor=&cursor=zz", "", 400, httpapi.CodeInvalid, "cursor: given 2 times"},
		{"admin-secret", "?type=email&type=nosuch", "", 404, httpapi.CodeUnknownType, "nosuch"},
		{"admin-secret", "", "0123", 400, httpapi.CodeInvalid, "Last-Event-ID"},
		{"admin-secret", "?type=" + strings.Repeat("t&type=", 100) + "t", "", 400, httpapi.CodeInvalid, "at most 100"},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/v1/events"+tc.query, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		if tc.lastID != "" {
			req.Header.Set("Last-Event-ID", tc.lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var ae httpapi.APIError
		_ = json.Unmarshal(b, &ae)
		if resp.StatusCode != tc.status || ae.Code != tc.code || !strings.Contains(ae.Message, tc.says) {
			t.Errorf("%q %q %q: %d %s, want %d %s naming %q", tc.token, tc.query, tc.lastID, resp.StatusCode, b, tc.status, tc.code, tc.says)
		}
	}

	// One stream at most: a second is refused, and taken once the first
	// has gone.
	c := httpapi.NewClient(e.url, "admin-secret", nil)
	s := startStream(t, c, nil, "")
	s.next(t)
	err := c.Events(ctx, nil, "", func(httpapi.Event) error { return nil })
	var ae *httpapi.APIError
	if !errors.As(err, &ae) || ae.Status != 503 || ae.Code != httpapi.CodeBusy {
		t.Fatalf("a second stream: %v, want 503 busy", err)
	}
	s.cancel()
	<-s.done
	s.done <- nil
	// The server lets go of the stream once it sees its connection closed.
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream's handler did not end 10s after its client left")
	}
	if err := c.Events(ctx, nil, "", func(httpapi.Event) error { return errStop }); !errors.Is(err, errStop) {
		t.Fatalf("a stream once the first has gone: %v", err)
	}
}

// A HEAD answers what a GET would, at once, and takes no stream: with
// room for one stream, a stream still starts after many HEADs, and while
// one runs a HEAD is still answered (the limit is on streams, not
// requests that hold none).
func TestEventsHead(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens, MaxStreams: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	head := func() {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodHead, e.url+"/v1/events?type=email", nil)
		req.Header.Set("Authorization", "Bearer admin-secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("HEAD /v1/events: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("HEAD /v1/events: %d %q, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	for range 3 {
		head()
	}
	c := httpapi.NewClient(e.url, "admin-secret", nil)
	s := startStream(t, c, []string{"email"}, "")
	if r := s.next(t); r.Kind != "ready" {
		t.Fatalf("first event %+v, want ready", r)
	}
	head()
}

var errStop = errors.New("stop")

// Stopping ends the streams at once; their clients see the stream end
// and can resume with their cursors.
func TestEventsEndWhenStopping(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	c := httpapi.NewClient(e.url, "", nil)
	s := startStream(t, c, []string{"email"}, "")
	s.next(t)
	e.srv.Stopping()
	select {
	case err := <-s.done:
		var re *httpapi.RequestError
		if !errors.As(err, &re) {
			t.Fatalf("stream ended with %v, want a RequestError", err)
		}
		s.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("stream still open 10s after Stopping")
	}
	err := c.Events(context.Background(), nil, "", func(httpapi.Event) error { return nil })
	var ae *httpapi.APIError
	if !errors.As(err, &ae) || ae.Status != 503 {
		t.Fatalf("a stream after Stopping: %v, want 503", err)
	}
}

// FuzzReadEvents feeds the client's stream parser arbitrary bytes: it
// must return, never panic, and report every event with data.
func FuzzReadEvents(f *testing.F) {
	f.Add([]byte("retry: 2000\n\nid: 1\nevent: ready\ndata: {\"cursor\":\"1\"}\n\n"))
	f.Add([]byte("event: job\ndata: {\"type\":\"email\",\"id\":\"a\",\"state\":\"pending\"}\n\n: keepalive\n\n"))
	f.Add([]byte("event: error\ndata: {\"error\":\"boom\"}\n\n"))
	f.Add([]byte("data: not json\n\n"))
	f.Add([]byte("event: job\ndata: " + strings.Repeat("x", 2<<20) + "\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		_ = httpapi.ReadEvents(strings.NewReader(string(b)), func(e httpapi.Event) error {
			if e.Kind == "" {
				t.Fatalf("event without a kind: %+v", e)
			}
			n++
			return nil
		})
		if n > strings.Count(string(b), "data:") {
			t.Fatalf("%d events from %d data lines", n, strings.Count(string(b), "data:"))
		}
	})
}

// A stream of every type follows at most fdbq.MaxFollowAllTypes: past
// that, it is refused with a status and a message that say so (not a
// 500), and a stream that names its types still starts.
func TestEventsEveryTypePastTheLimit(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens})
	ctx := context.Background()
	c := httpapi.NewClient(e.url, "admin-secret", nil)
	// Many types, but not too many: every type is followed.
	for i := range 150 {
		if err := e.q.SetType(ctx, e.db, fmt.Sprintf("t%04d", i), fdbq.DefaultTypeSettings()); err != nil {
			t.Fatal(err)
		}
	}
	s := startStream(t, c, nil, "")
	if r := s.next(t); r.Kind != "ready" {
		t.Fatalf("a stream of 151 types: first event %+v, want ready", r)
	}
	if _, err := e.q.Add(ctx, e.db, fdbq.NewJob{Type: "t0149", ID: "last"}); err != nil {
		t.Fatal(err)
	}
	if ev := s.next(t); ev.Kind != "job" || ev.Type != "t0149" || ev.ID != "last" {
		t.Fatalf("event %+v, want the add of t0149 last", ev)
	}
	s.cancel()
	<-s.done
	s.done <- nil

	for i := 150; i < fdbq.MaxFollowAllTypes; i++ {
		if err := e.q.SetType(ctx, e.db, fmt.Sprintf("t%04d", i), fdbq.DefaultTypeSettings()); err != nil {
			t.Fatal(err)
		}
	}
	err := c.Events(ctx, nil, "", func(httpapi.Event) error { return errStop })
	var ae *httpapi.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusUnprocessableEntity || ae.Code != httpapi.CodeTooManyTypes ||
		!strings.Contains(ae.Message, fmt.Sprint(fdbq.MaxFollowAllTypes)) || !strings.Contains(ae.Message, "name the types") {
		t.Fatalf("a stream of every type of %d: %v, want 422 too_many_types naming the limit", fdbq.MaxFollowAllTypes+1, err)
	}
	if err := c.Events(ctx, []string{"email", "t0999"}, "", func(httpapi.Event) error { return errStop }); !errors.Is(err, errStop) {
		t.Fatalf("a stream naming two types: %v", err)
	}
}

// storeDump is every key and value of the store, to see that a request
// wrote nothing.
func storeDump(t *testing.T, db *kv.DB) string {
	t.Helper()
	var b strings.Builder
	if err := db.ReadTransact(context.Background(), func(tx kv.ReadTx) error {
		kvs, err := tx.GetRange(kv.Range{Begin: []byte{}, End: []byte{0xff}}, kv.RangeOptions{})
		for _, x := range kvs {
			fmt.Fprintf(&b, "%x=%x\n", x.Key, x.Value)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestEventsCrossSite: a stream takes holds on the types' event logs (it
// writes them in the store), so a page of another site may not open one
// through the user's browser (an EventSource, an img): a GET of
// /v1/events whose Origin is another or whose Sec-Fetch-Site says another
// site sent it is refused, with tokens (the session cookie) or without,
// and writes nothing; the UI's own same-origin stream, and a client with
// a bearer token, are served.
func TestEventsCrossSite(t *testing.T) {
	open := newEnv(t, httpapi.Options{})
	tokens := newEnv(t, httpapi.Options{Tokens: testTokens})
	cookie := sessionCookie("admin-secret")
	for _, tc := range []struct {
		e       *env
		name    string
		headers []string
		status  int
	}{
		{open, "origin", []string{"Origin", "https://evil.example"}, 403},
		{open, "origin of another port", []string{"Origin", "http://127.0.0.1:1"}, 403},
		{open, "null origin", []string{"Origin", "null"}, 403},
		{open, "cross-site", []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{open, "same-site", []string{"Sec-Fetch-Site", "same-site"}, 403},
		{open, "same origin", []string{"Origin", open.url, "Sec-Fetch-Site", "same-origin"}, 200},
		{open, "same origin, no Origin", []string{"Sec-Fetch-Site", "same-origin"}, 200},
		{open, "typed in", []string{"Sec-Fetch-Site", "none"}, 200},
		{open, "not a browser", nil, 200},
		{tokens, "cookie, origin", []string{"Cookie", cookie, "Origin", "https://evil.example"}, 403},
		{tokens, "cookie, cross-site", []string{"Cookie", cookie, "Sec-Fetch-Site", "cross-site"}, 403},
		{tokens, "cookie, same origin", []string{"Cookie", cookie, "Origin", tokens.url, "Sec-Fetch-Site", "same-origin"}, 200},
		{tokens, "bearer, origin", []string{"Authorization", "Bearer admin-secret", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := storeDump(t, tc.e.db)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", tc.e.url+"/v1/events", nil)
			for i := 0; i+1 < len(tc.headers); i += 2 {
				req.Header.Set(tc.headers[i], tc.headers[i+1])
			}
			resp, err := tc.e.hs.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.status {
				b := make([]byte, 512)
				n, _ := resp.Body.Read(b) // a stream never ends: its first bytes
				t.Fatalf("%d %s, want %d", resp.StatusCode, b[:n], tc.status)
			}
			if tc.status != 200 {
				wantError(t, answer{status: resp.StatusCode, body: must(io.ReadAll(resp.Body))}, 403, httpapi.CodeForbidden, "this server")
				if after := storeDump(t, tc.e.db); after != before {
					t.Fatalf("a refused stream wrote in the store:\nbefore:\n%s\nafter:\n%s", before, after)
				}
			}
		})
	}
}

// TestWaitsCrossSite: the waits hold watches, and holds in the store,
// while they run: like the event stream, another site's page may not
// start one; a client that is no browser, and a bearer token, may.
func TestWaitsCrossSite(t *testing.T) {
	open := newEnv(t, httpapi.Options{})
	for _, p := range []string{"/v1/types/email/jobs/x/wait?timeout=1ms", "/v1/workflows/w/wait?timeout=1ms"} {
		wantError(t, open.req("GET", p, "", "Origin", "https://evil.example"), 403, httpapi.CodeForbidden, "Origin")
		wantError(t, open.req("GET", p, "", "Sec-Fetch-Site", "cross-site"), 403, httpapi.CodeForbidden, "another site")
		if a := open.req("GET", p, ""); a.status != 404 {
			t.Fatalf("GET %s, not a browser: %d %s", p, a.status, a.body)
		}
	}
	tokens := newEnv(t, httpapi.Options{Tokens: testTokens})
	p := "/v1/types/email/jobs/x/wait?timeout=1ms"
	wantError(t, tokens.req("GET", p, "", "Cookie", sessionCookie("admin-secret"), "Origin", "https://evil.example"), 403, httpapi.CodeForbidden, "Origin")
	if a := tokens.req("GET", p, "", "Authorization", "Bearer admin-secret", "Origin", "https://evil.example"); a.status != 404 {
		t.Fatalf("GET %s with a bearer token: %d %s", p, a.status, a.body)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
