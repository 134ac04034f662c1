package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

// The HTTP fuzzing sends requests over a real listener, written byte by
// byte: random and malformed bodies, paths with odd bytes, on every route,
// with and without tokens. Whatever arrives, the server answers, and
// never with a 5xx.

// fuzzEnv is a server with tokens over a real listener on 127.0.0.1, with
// a pending job "j" of type email and a running one "r".
func fuzzEnv(t testing.TB) *env {
	e := newEnv(t, httpapi.Options{Tokens: testTokens, MaxBodyBytes: 8192, RequestTimeout: 10 * time.Second, MaxStreams: 10000})
	ctx := context.Background()
	for _, id := range []string{"r", "j"} {
		if _, err := e.q.Add(ctx, e.db, fdbq.NewJob{Type: "email", ID: id}); err != nil {
			t.Fatal(err)
		}
		if id == "r" {
			if _, err := e.q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return e
}

// rawRequest is one request as bytes on the wire.
type rawRequest struct {
	method, target string // target: path and query, as sent
	auth           string // the Authorization header's value; "": none
	body           []byte
	chunked        bool
}

func (r rawRequest) bytes() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: fuzz\r\n", r.method, r.target)
	if r.auth != "" {
		fmt.Fprintf(&b, "Authorization: %s\r\n", r.auth)
	}
	if r.chunked {
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		if len(r.body) > 0 {
			fmt.Fprintf(&b, "%x\r\n%s\r\n", len(r.body), r.body)
		}
		b.WriteString("0\r\n\r\n")
		return b.Bytes()
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(r.body))
	b.Write(r.body)
	return b.Bytes()
}

// roundTrip sends r on a new connection and returns the status answered,
// or fails the test if the server answered nothing (a crash of the
// handler closes the connection without an answer).
func roundTrip(t testing.TB, addr string, r rawRequest) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(deadline))
	if _, err := c.Write(r.bytes()); err != nil {
		t.Fatalf("%q: writing: %v", r.bytes(), err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: r.method})
	if err != nil {
		t.Fatalf("%q: no answer: %v", truncate(r.bytes()), err)
	}
	if resp.StatusCode == http.StatusOK && r.method != http.MethodHead && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// An event stream runs until its client leaves: its first event
		// is all there is to check, and closing the connection (not the
		// body, which would read the stream to its end) leaves.
		if err := firstStreamEvent(resp.Body, "ready"); err != nil {
			t.Fatalf("%q: %v", truncate(r.bytes()), err)
		}
		return resp.StatusCode
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		t.Fatalf("%q: %d %s", truncate(r.bytes()), resp.StatusCode, b)
	}
	return resp.StatusCode
}

// firstStreamEvent reads an event stream up to the end of its first
// event and checks it is one named name.
func firstStreamEvent(r io.Reader, name string) error {
	br := bufio.NewReader(r)
	got := ""
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return fmt.Errorf("event stream ended before its first event: %w", err)
		}
		line = strings.TrimRight(line, "\n")
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			got = v
		}
		if line == "" && got != "" {
			if got != name {
				return fmt.Errorf("first event %q, want %q", got, name)
			}
			return nil
		}
	}
}

func truncate(b []byte) []byte {
	if len(b) > 600 {
		return append(b[:600:600], "…"...)
	}
	return b
}

// longPoll reports whether r would block for long (a valid wait or accept
// of more than 100ms), which the fuzzing leaves out to stay quick.
func longPoll(r rawRequest) bool {
	const quick = 100 * time.Millisecond
	path, query, _ := strings.Cut(r.target, "?")
	switch {
	case strings.HasSuffix(path, "/wait"):
		q, err := url.ParseQuery(query)
		if err != nil {
			return false
		}
		if !q.Has("timeout") {
			return true // the default wait, 30s
		}
		d, err := time.ParseDuration(q.Get("timeout"))
		return err == nil && d > quick
	case strings.HasSuffix(path, "/accept"):
		o, err := httpapi.DecodeAccept(bytes.NewReader(r.body))
		return err == nil && o.Timeout > quick
	}
	return false
}

// Parts the generator draws on.
var (
	fuzzMethods = []string{"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "FOO", "get", ""}
	fuzzAuths   = []string{"Bearer admin-secret", "Bearer admin-secret", "Bearer admin-secret", "Bearer producer-secret",
		"Bearer worker-secret", "", "Bearer nope", "Basic YWRtaW4=", "Bearer", "bearer  admin-secret  "}
	fuzzSegments = []string{"email", "email", "nope", "j", "r", "a.b", "x%2Fy", "%ff", "%00", "%20", "..", ".", "",
		"%e2%98%83", "é", "a%0d%0ab", strings.Repeat("x", 300), "%", "%zz", "a?b", "a#b", "{type}"}
	fuzzQueries = []string{"", "", "?timeout=0s", "?timeout=10ms", "?timeout=-1s", "?timeout=9999h", "?timeout=x",
		"?state=running&timeout=0s", "?state=nope&timeout=0s", "?limit=0", "?limit=1001", "?limit=5&state=finished",
		"?cursor=%ff", "?cursor=zzz", "?a=b&timeout=0s", "?%zz", "?timeout=1ms&timeout=2ms", "?state=",
		// The list route's filters, good and bad.
		"?key=k1", "?key=%00", "?key=%ff%fe", "?id_prefix=j", "?id_prefix=%ff&state=running", "?id_prefix=r&state=running&limit=1",
		"?since=2020-01-01T00:00:00Z&until=2100-01-01T00:00:00Z&state=finished", "?since=2030-01-01T00:00:00Z&until=2020-01-01T00:00:00Z",
		"?since=x", "?until=2030-01-02T15:04:05+02:00", "?until=2030-01-02T15:04:05%2B02:00&state=running", "?since=0000-01-01T00:00:00Z",
		"?until=9999-12-31T23:59:59.999999999-23:59", "?since=2030-02-30T00:00:00Z", "?key=k&id_prefix=j&limit=1&cursor=AAAA.BBBB",
		"?cursor=.&key=", "?cursor=..&since=2020-01-01T00:00:00Z", "?key=" + strings.Repeat("k", 129), "?id_prefix=" + strings.Repeat("%e2%98%83", 90),
		"?state=pending&key=&id_prefix=&since=&until=",
		"?limit=200", "?limit=201&after=k", "?after=%ff", "?after=a%01b", "?after=k&limit=1", "?after=", "?after=%e2%80%ae",
		// The history route's span.
		"?minutes=1", "?minutes=1440", "?minutes=1441", "?minutes=0", "?minutes=-5", "?minutes=1e3", "?minutes=60&until=2030-01-02T15:04:05Z",
		"?until=0000-01-01T00:00:00Z&minutes=1440", "?until=9999-12-31T23:59:59Z", "?minutes=99999999999999999999"}
	fuzzBodies = []string{``, `{}`, `[]`, `null`, `{"id":"j","data":{"a":1}}`, `[{"data":1},{"id":"b"}]`,
		`{"max":2,"wait":"0s"}`, `{"max":0}`, `{"max":"1"}`, `{"lock":"x","progress":1}`, `{"lock":"x","result":{}}`,
		`{"lock":"x","error":"e"}`, `{"retention":"1h","paused":true}`, `{"retry":{"max_attempts":0}}`,
		`{"activity_timeout":"1ms"}`, `[{"priority":-9223372036854775808}]`, `{"id":"\ud800"}`, "{\"id\":\"\xff\"}",
		`{"data":` + strings.Repeat("[", 2000) + `}`, `{"a":1}{"b":2}`, `{"scheduled_at":"2030-13-45T99:00:00Z"}`}
)

// mutate changes b a few random ways: bytes flipped, inserted, cut, or a
// piece repeated.
func mutate(rng *rand.Rand, b []byte) []byte {
	b = append([]byte(nil), b...)
	for range rng.IntN(4) {
		switch op := rng.IntN(5); {
		case op == 0 && len(b) > 0:
			b[rng.IntN(len(b))] = byte(rng.IntN(256))
		case op == 1:
			i := rng.IntN(len(b) + 1)
			b = append(b[:i], append([]byte{byte(rng.IntN(256))}, b[i:]...)...)
		case op == 2 && len(b) > 0:
			b = b[:rng.IntN(len(b))]
		case op == 3 && len(b) > 0:
			i := rng.IntN(len(b))
			b = append(b, bytes.Repeat(b[i:], 1+rng.IntN(20))...)
		default:
			b = append(b, fuzzBodies[rng.IntN(len(fuzzBodies))]...)
		}
	}
	return b
}

// randomRequest makes a request for one of the routes, more or less
// malformed.
func randomRequest(rng *rand.Rand, routes []string) rawRequest {
	method, pattern, _ := strings.Cut(routes[rng.IntN(len(routes))], " ")
	if rng.IntN(8) == 0 {
		method = fuzzMethods[rng.IntN(len(fuzzMethods))]
	}
	seg := func() string {
		s := fuzzSegments[rng.IntN(len(fuzzSegments))]
		if rng.IntN(6) == 0 {
			s = string(mutate(rng, []byte(s)))
		}
		return s
	}
	path := strings.NewReplacer("{type}", seg(), "{id}", seg()).Replace(pattern)
	if rng.IntN(10) == 0 {
		path = string(mutate(rng, []byte(path)))
	}
	r := rawRequest{
		method:  method,
		target:  path + fuzzQueries[rng.IntN(len(fuzzQueries))],
		auth:    fuzzAuths[rng.IntN(len(fuzzAuths))],
		chunked: rng.IntN(10) == 0,
	}
	switch rng.IntN(6) {
	case 0:
		r.body = make([]byte, rng.IntN(10000))
		for i := range r.body {
			r.body[i] = byte(rng.IntN(256))
		}
	case 1:
		r.body = []byte(fuzzBodies[rng.IntN(len(fuzzBodies))])
	default:
		r.body = mutate(rng, []byte(fuzzBodies[rng.IntN(len(fuzzBodies))]))
	}
	return r
}

// TestHTTPFuzz sends random requests to every route, bounded in count and
// time so that it runs in every test run; `go test -fuzz FuzzHTTP` goes
// on for longer.
func TestHTTPFuzz(t *testing.T) {
	e := fuzzEnv(t)
	addr := strings.TrimPrefix(e.url, "http://")
	rng := rand.New(rand.NewPCG(11, 2026))
	routes := e.srv.Routes()
	statuses := map[int]int{}
	const count, budget = 3000, 4 * time.Second
	start := time.Now()
	n := 0
	for ; n < count && time.Since(start) < budget; n++ {
		r := randomRequest(rng, routes)
		if longPoll(r) {
			continue
		}
		statuses[roundTrip(t, addr, r)]++
	}
	if n < 200 {
		t.Fatalf("only %d requests in %s", n, budget)
	}
	t.Logf("%d requests in %s; answers by status: %v", n, time.Since(start).Round(time.Millisecond), statuses)
}

// FuzzHTTP is the longer mode of TestHTTPFuzz: go test -fuzz FuzzHTTP
// ./httpapi. The fuzzer picks the route, the path's segments, the query,
// the token and the body.
func FuzzHTTP(f *testing.F) {
	e := fuzzEnv(f)
	addr := strings.TrimPrefix(e.url, "http://")
	routes := e.srv.Routes()
	for i, b := range fuzzBodies {
		f.Add(uint8(i), uint8(i), "email", "j", fuzzQueries[i%len(fuzzQueries)], []byte(b))
	}
	f.Add(uint8(0), uint8(5), "%ff", "a%0d%0ab", "?timeout=0s", []byte("{"))
	f.Fuzz(func(t *testing.T, route, auth uint8, typ, id, query string, body []byte) {
		method, pattern, _ := strings.Cut(routes[int(route)%len(routes)], " ")
		r := rawRequest{
			method: method,
			target: strings.NewReplacer("{type}", typ, "{id}", id).Replace(pattern) + query,
			auth:   fuzzAuths[int(auth)%len(fuzzAuths)],
			body:   body,
		}
		if longPoll(r) {
			return
		}
		roundTrip(t, addr, r)
	})
}
