package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

var testTokens = []httpapi.Token{
	{Name: "ops", Role: httpapi.RoleAdmin, Secret: "admin-secret"},
	{Name: "shop", Role: httpapi.RoleProducer, Secret: "producer-secret"},
	{Name: "mailer", Role: httpapi.RoleWorker, Secret: "worker-secret"},
	{Name: "prometheus", Role: httpapi.RoleMetrics, Secret: "metrics-secret"},
}

func TestAuth(t *testing.T) {
	e := newEnv(t, httpapi.Options{
		Tokens:  testTokens,
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "m 1") }),
	})
	if err := e.q.SetType(context.Background(), e.db, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	// Public routes need no token.
	for _, p := range []string{"/healthz", "/readyz", "/v1/openapi.yaml"} {
		if a := e.do("GET", p, "", ""); a.status != 200 {
			t.Fatalf("GET %s without a token: %d", p, a.status)
		}
	}
	a := e.do("POST", "/v1/types/email/jobs", "", `{}`)
	wantError(t, a, 401, httpapi.CodeUnauthorized, "missing")
	if !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("WWW-Authenticate %q", a.header.Get("WWW-Authenticate"))
	}
	wantError(t, e.do("POST", "/v1/types/email/jobs", "admin-secreT", `{}`), 401, httpapi.CodeUnauthorized, "unknown token")
	wantError(t, e.do("POST", "/v1/types/email/jobs", "admin", `{}`), 401, httpapi.CodeUnauthorized)

	req, _ := http.NewRequest("GET", e.url+"/v1/types", nil)
	req.Header.Set("Authorization", "Basic YWRtaW4tc2VjcmV0")
	resp, err := e.hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("Basic auth answered %d", resp.StatusCode)
	}

	// Who may call what; an unauthorized role is refused before the
	// handler runs, so the paths need not exist.
	const (
		yes = 0
		no  = 403
	)
	for _, tc := range []struct {
		method, path, body        string
		producer, worker, metrics int
	}{
		{"POST", "/v1/types/email/jobs", `{"id":"r"}`, yes, no, no},
		{"GET", "/v1/types/email/jobs", ``, yes, no, no},
		{"GET", "/v1/types/email/jobs/r", ``, yes, yes, no},
		{"GET", "/v1/types/email/jobs/r/wait?timeout=0s", ``, yes, no, no},
		{"POST", "/v1/types/email/jobs/r/cancel", ``, yes, no, no},
		{"POST", "/v1/types/email/jobs/r/requeue", ``, yes, no, no},
		{"GET", "/v1/types", ``, yes, yes, no},
		{"POST", "/v1/types/email/accept", `{}`, no, yes, no},
		{"POST", "/v1/types/email/jobs/r/heartbeat", `{"lock":"l"}`, no, yes, no},
		{"POST", "/v1/types/email/jobs/r/finish", `{"lock":"l"}`, no, yes, no},
		{"POST", "/v1/types/email/jobs/r/fail", `{"lock":"l"}`, no, yes, no},
		{"DELETE", "/v1/types/email/jobs/r", ``, no, no, no},
		{"PUT", "/v1/types/email", `{}`, no, no, no},
		{"POST", "/v1/types/email/pause", ``, no, no, no},
		{"POST", "/v1/types/email/resume", ``, no, no, no},
		{"GET", "/metrics", ``, no, no, yes},
	} {
		for _, who := range []struct {
			token string
			want  int
		}{{"producer-secret", tc.producer}, {"worker-secret", tc.worker}, {"metrics-secret", tc.metrics}, {"admin-secret", yes}} {
			a := e.do(tc.method, tc.path, who.token, tc.body)
			if who.want == no {
				wantError(t, a, 403, httpapi.CodeForbidden, "role")
				continue
			}
			if a.status == 401 || a.status == 403 {
				t.Fatalf("%s %s with %s: %d %s", tc.method, tc.path, who.token, a.status, a.body)
			}
		}
	}

	// With tokens the metrics need one: they name every type and
	// pipeline, and show the traffic.
	a = e.do("GET", "/metrics", "", "")
	wantError(t, a, 401, httpapi.CodeUnauthorized, "missing")
	if a := e.do("GET", "/metrics", "metrics-secret", ""); a.status != 200 || string(a.body) != "m 1\n" {
		t.Fatalf("metrics with the metrics token: %d %s", a.status, a.body)
	}

	// The client sends its token.
	c := e.client("producer-secret")
	if _, err := c.Enqueue(context.Background(), "email", httpapi.NewJob{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client("worker-secret").Enqueue(context.Background(), "email", httpapi.NewJob{}); err == nil || err.(*httpapi.APIError).Status != 403 {
		t.Fatalf("worker enqueue: %v", err)
	}
}

func TestNewChecksTokens(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	for _, tc := range []struct {
		o    httpapi.Options
		want string
	}{
		{httpapi.Options{Tokens: []httpapi.Token{{Name: "a", Role: "root", Secret: "s"}}}, `unknown role "root"`},
		{httpapi.Options{Tokens: []httpapi.Token{{Name: "a", Role: httpapi.RoleAdmin}}}, "token a: empty secret"},
		{httpapi.Options{Tokens: []httpapi.Token{{Name: "a", Role: httpapi.RoleAdmin, Secret: "s"}, {Name: "b", Role: httpapi.RoleWorker, Secret: "s"}}}, "a and b have the same secret"},
		{httpapi.Options{Tokens: []httpapi.Token{{Name: "a", Role: httpapi.RoleAdmin, Secret: " s "}}}, "token a: the secret has whitespace at its start or end"},
		{httpapi.Options{Tokens: []httpapi.Token{{Name: "a", Role: httpapi.RoleAdmin, Secret: "s\x00s"}}}, "token a: the secret holds a control character"},
		{httpapi.Options{MaxBodyBytes: -1}, "MaxBodyBytes"},
		{httpapi.Options{MetricsPath: "metrics"}, "metrics path"},
		{httpapi.Options{Metrics: http.NotFoundHandler(), MetricsPath: "/healthz"}, `route "GET /healthz"`},
	} {
		_, err := httpapi.New(e.q, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error mentioning %q", tc.o, err, tc.want)
		}
	}
	if _, err := httpapi.New(nil, httpapi.Options{}); err == nil {
		t.Error("New(nil queue) succeeded")
	}
}

func TestNoTokensServesLoopbackOnly(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	for _, tc := range []struct {
		remote string
		want   int
	}{
		{"127.0.0.1:5000", 200},
		{"[::1]:5000", 200},
		{"[::ffff:127.0.0.1]:5000", 200},
		{"192.0.2.7:5000", 403},
		{"[2001:db8::1]:5000", 403},
		{"garbage", 403},
	} {
		req := httptest.NewRequest("GET", "http://localhost:8080/v1/types", nil)
		req.RemoteAddr = tc.remote
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("client %s: %d, want %d: %s", tc.remote, rec.Code, tc.want, rec.Body)
		}
	}

	// Over a real listener on a non-loopback address of this machine.
	hs := nonLoopbackServer(t, e.srv)
	resp, err := hs.Client().Get(hs.URL + "/v1/types")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("a client from %s got %d from a server without tokens", hs.URL, resp.StatusCode)
	}
}

// nonLoopbackServer serves h over a real listener on a non-loopback
// address of this machine (skipping the test when there is none), closed
// when the test ends.
func nonLoopbackServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	ip := nonLoopbackIP(t)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s: %v", ip, err)
	}
	hs := httptest.NewUnstartedServer(h)
	hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	t.Cleanup(hs.Close)
	return hs
}

func nonLoopbackIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skip(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address on this machine")
	return ""
}

func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		tokens int
		ok     bool
	}{
		{"127.0.0.1:8080", 0, true},
		{"127.1.2.3:8080", 0, true},
		{"[::1]:8080", 0, true},
		{"localhost:8080", 0, true},
		{":8080", 0, false},
		{"0.0.0.0:8080", 0, false},
		{"[::]:8080", 0, false},
		{"10.0.0.5:8080", 0, false},
		{"example.com:8080", 0, false},
		{":8080", 1, true},
		{"0.0.0.0:8080", 2, true},
		{"127.0.0.1", 0, false},
		{"", 3, false},
	} {
		err := httpapi.CheckListen(tc.addr, tc.tokens)
		if (err == nil) != tc.ok {
			t.Errorf("CheckListen(%q, %d) = %v, want ok %v", tc.addr, tc.tokens, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.addr)) {
			t.Errorf("CheckListen(%q) error does not name the address: %v", tc.addr, err)
		}
	}
	err := httpapi.CheckListen(":8080", 0)
	if !strings.Contains(err.Error(), "without tokens") || !strings.Contains(err.Error(), "every interface") {
		t.Errorf("unclear refusal: %v", err)
	}
}

// TestNoTokensChecksHost: a server without tokens answers only requests
// addressed to it by a loopback name or address, or by the host it was
// told it listens on: a web page whose name its owner pointed at
// 127.0.0.1 (DNS rebinding) reaches the port from the user's own browser,
// a loopback client, but with its own name in Host.
func TestNoTokensChecksHost(t *testing.T) {
	e := newEnv(t, httpapi.Options{UI: fakeUI, Hosts: []string{"jobs.internal:8080"}})
	send := func(method, path, host string) answer {
		t.Helper()
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader(`{"id":"rebound"}`)
		}
		req, err := http.NewRequest(method, e.url+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := e.hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.Close {
			resp.Header.Set("Connection", "close")
		}
		return answer{status: resp.StatusCode, header: resp.Header, body: b}
	}
	for _, host := range []string{"evil.example:8080", "evil.example", "127.0.0.1.nip.io:8080", "localhost.evil.example", "10.0.0.5:8080", "[2001:db8::1]:8080", "jobs.internal.evil.example"} {
		for _, r := range []struct{ method, path string }{
			{"GET", "/v1/types"}, {"POST", "/v1/types/email/jobs"}, {"GET", "/ui/"}, {"GET", "/v1/events"}, {"GET", "/metrics"},
		} {
			a := send(r.method, r.path, host)
			wantError(t, a, 403, httpapi.CodeForbidden, "Host", "loopback")
			if a.header.Get("Connection") != "close" {
				t.Errorf("Host %s: %s %s: the connection stays open", host, r.method, r.path)
			}
		}
	}
	if _, err := e.q.Get(context.Background(), e.db, "email", "rebound"); err == nil {
		t.Fatal("a request for another host enqueued a job")
	}
	for _, host := range []string{"localhost:8080", "LocalHost", "localhost", "127.0.0.1", "127.0.0.1:9", "127.8.9.10:8080", "[::1]:8080", "[::1]", "jobs.internal", "JOBS.internal:1234", strings.TrimPrefix(e.url, "http://")} {
		if a := send("GET", "/v1/types", host); a.status != 200 {
			t.Errorf("Host %s: %d %s", host, a.status, a.body)
		}
	}
	// With tokens a rebound page has no token: the host is not checked.
	withTokens := newEnv(t, httpapi.Options{Tokens: testTokens})
	req, _ := http.NewRequest("GET", withTokens.url+"/v1/types", nil)
	req.Host = "evil.example:8080"
	req.Header.Set("Authorization", "Bearer admin-secret")
	resp, err := withTokens.hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("with tokens, Host evil.example: %d", resp.StatusCode)
	}
}

// A request that changes something, sent to a path that is not clean,
// is refused rather than redirected: a client that follows redirects
// would send it to the cleaned path's route, which may be another one
// (…/jobs/x/../../pause is a pause). A GET is still redirected.
func TestUncleanPathNotRedirected(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens})
	ctx := context.Background()
	auth := []string{"Authorization", "Bearer admin-secret"}
	for _, p := range []string{"/v1/types/email/jobs/x/../../pause", "/v1/types/email//pause", "/v1/types/email/./pause"} {
		wantError(t, e.req("POST", p, "", auth...), http.StatusBadRequest, httpapi.CodeInvalid, "not clean")
		// A client that follows redirects gets the same answer.
		req, _ := http.NewRequest("POST", e.url+p, nil)
		req.Header.Set("Authorization", "Bearer admin-secret")
		resp, err := e.hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("POST %s, following redirects: %d", p, resp.StatusCode)
		}
	}
	if info, err := e.q.GetType(ctx, e.db, "email"); err != nil || info.Settings.Paused {
		t.Fatalf("type email after the requests: %+v, %v; want not paused", info, err)
	}
	if a := e.req("GET", "/v1/types/email/jobs/x/../../stats", "", auth...); a.status < 300 || a.status >= 400 || a.header.Get("Location") != "/v1/types/email/stats" {
		t.Fatalf("GET of an unclean path: %d %v", a.status, a.header)
	}
}
