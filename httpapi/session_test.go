package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

// fakeUI stands for package webui: it answers the path it was given.
var fakeUI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.WriteString(w, "ui "+r.URL.Path)
})

// req is a raw request with headers; it follows no redirect.
func (e *env) req(method, path, body string, headers ...string) answer {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	c := *e.hs.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(r)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// sessionCookie is the Cookie header of a session of the test token with
// this secret, as a login makes it; a secret no token has makes a
// session of the first token signed with it.
func sessionCookie(secret string) string {
	name := testTokens[0].Name
	for _, tk := range testTokens {
		if tk.Secret == secret {
			name = tk.Name
		}
	}
	return httpapi.SessionCookie + "=" + httpapi.SessionValue(name, secret, time.Now().Add(time.Hour))
}

func whoamiOf(t *testing.T, a answer) httpapi.Whoami {
	t.Helper()
	if a.status != 200 {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	var w httpapi.Whoami
	if err := json.Unmarshal(a.body, &w); err != nil {
		t.Fatalf("%v: %s", err, a.body)
	}
	return w
}

func TestWhoami(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens})
	for _, tc := range []struct {
		secret, name string
		role         httpapi.Role
	}{
		{"admin-secret", "ops", httpapi.RoleAdmin},
		{"producer-secret", "shop", httpapi.RoleProducer},
		{"worker-secret", "mailer", httpapi.RoleWorker},
		{"metrics-secret", "prometheus", httpapi.RoleMetrics},
	} {
		got := whoamiOf(t, e.do("GET", "/v1/whoami", tc.secret, ""))
		if got != (httpapi.Whoami{Role: tc.role, Token: tc.name, Auth: httpapi.AuthBearer}) {
			t.Errorf("bearer %s: %+v", tc.secret, got)
		}
		got = whoamiOf(t, e.req("GET", "/v1/whoami", "", "Cookie", sessionCookie(tc.secret)))
		if got != (httpapi.Whoami{Role: tc.role, Token: tc.name, Auth: httpapi.AuthCookie}) {
			t.Errorf("cookie %s: %+v", tc.secret, got)
		}
	}
	wantError(t, e.do("GET", "/v1/whoami", "", ""), 401, httpapi.CodeUnauthorized, "missing")
	wantError(t, e.do("GET", "/v1/whoami", "nope", ""), 401, httpapi.CodeUnauthorized, "unknown token")

	open := newEnv(t, httpapi.Options{})
	if got := whoamiOf(t, open.do("GET", "/v1/whoami", "", "")); got != (httpapi.Whoami{Role: httpapi.RoleAdmin, Auth: httpapi.AuthNone}) {
		t.Errorf("no tokens: %+v", got)
	}
}

func TestLoginLogout(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens})
	ui := []string{"X-Jobstage-UI", "1", "Content-Type", "application/json"}

	// The login sets the cookie, with its attributes.
	a := e.req("POST", "/v1/login", `{"token":"producer-secret"}`, ui...)
	if got := whoamiOf(t, a); got != (httpapi.Whoami{Role: httpapi.RoleProducer, Token: "shop", Auth: httpapi.AuthCookie}) {
		t.Fatalf("login answered %+v", got)
	}
	resp := http.Response{Header: a.header}
	cookies := resp.Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies %v", a.header["Set-Cookie"])
	}
	c := cookies[0]
	if c.Name != httpapi.SessionCookie || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure {
		t.Fatalf("cookie %s", a.header.Get("Set-Cookie"))
	}
	cookie := c.Name + "=" + c.Value

	// Refused logins set no cookie.
	for _, tc := range []struct {
		body    string
		headers []string
		status  int
		code    string
	}{
		{`{"token":"wrong"}`, ui, 401, httpapi.CodeUnauthorized},
		{`{"token":""}`, ui, 400, httpapi.CodeInvalid},
		{`{"token":"admin-secret","x":1}`, ui, 400, httpapi.CodeInvalidJSON},
		{`token=admin-secret`, ui, 400, httpapi.CodeInvalidJSON},
		{`{"token":"admin-secret"}`, nil, 403, httpapi.CodeForbidden},
		{`{"token":"admin-secret"}`, []string{"X-Jobstage-UI", "yes"}, 403, httpapi.CodeForbidden},
		{`{"token":"admin-secret"}`, append([]string{"Origin", "https://evil.example"}, ui...), 403, httpapi.CodeForbidden},
		{`{"token":"admin-secret"}`, append([]string{"Origin", "null"}, ui...), 403, httpapi.CodeForbidden},
		{`{"token":"admin-secret"}`, append([]string{"Sec-Fetch-Site", "cross-site"}, ui...), 403, httpapi.CodeForbidden},
		{`{"token":"` + strings.Repeat("a", httpapi.MaxLoginBytes) + `"}`, ui, 413, httpapi.CodeTooLarge},
	} {
		a := e.req("POST", "/v1/login", tc.body, tc.headers...)
		wantError(t, a, tc.status, tc.code)
		if a.header.Get("Set-Cookie") != "" {
			t.Errorf("refused login %.60s set a cookie", tc.body)
		}
	}
	// A same-origin browser's headers are fine.
	a = e.req("POST", "/v1/login", `{"token":"admin-secret"}`, append([]string{"Origin", e.url, "Sec-Fetch-Site", "same-origin"}, ui...)...)
	if whoamiOf(t, a).Role != httpapi.RoleAdmin {
		t.Fatal(string(a.body))
	}

	// The cookie authenticates reads; changes need the UI's header.
	if e.req("GET", "/v1/types", "", "Cookie", cookie).status != 200 {
		t.Fatal("GET with the cookie refused")
	}
	wantError(t, e.req("POST", "/v1/types/email/jobs", `{"id":"c1"}`, "Cookie", cookie), 403, httpapi.CodeForbidden, httpapi.UIHeader)
	wantError(t, e.req("POST", "/v1/types/email/jobs", `{"id":"c1"}`, "Cookie", cookie, "X-Jobstage-UI", "1", "Origin", "http://evil.example"), 403, httpapi.CodeForbidden, "Origin")
	if a := e.req("POST", "/v1/types/email/jobs", `{"id":"c1"}`, "Cookie", cookie, "X-Jobstage-UI", "1", "Origin", e.url); a.status != 201 {
		t.Fatalf("enqueue with the cookie and the header: %d %s", a.status, a.body)
	}
	// The role still holds: a producer may not pause.
	wantError(t, e.req("POST", "/v1/types/email/pause", "", "Cookie", cookie, "X-Jobstage-UI", "1"), 403, httpapi.CodeForbidden, "role producer")
	// A bearer token wins over the cookie and needs no header.
	if a := e.req("POST", "/v1/types/email/pause", "", "Cookie", cookie, "Authorization", "Bearer admin-secret"); a.status != 200 {
		t.Fatalf("admin bearer with a producer cookie: %d %s", a.status, a.body)
	}

	// Bad cookies.
	for _, v := range []string{
		httpapi.SessionCookie + "=!!!",
		httpapi.SessionCookie + "=",
		sessionCookie("not-a-token"),
		httpapi.SessionCookie + "=" + strings.Repeat("QUFB", 1000),
	} {
		a := e.req("GET", "/v1/types", "", "Cookie", v)
		wantError(t, a, 401, httpapi.CodeUnauthorized)
	}
	// Another cookie alone is no session.
	wantError(t, e.req("GET", "/v1/types", "", "Cookie", "other=1"), 401, httpapi.CodeUnauthorized, "missing")

	// Logout clears the cookie; it needs the header too.
	wantError(t, e.req("POST", "/v1/logout", ""), 403, httpapi.CodeForbidden)
	a = e.req("POST", "/v1/logout", "", "X-Jobstage-UI", "1", "Cookie", cookie)
	if a.status != 204 {
		t.Fatalf("logout %d %s", a.status, a.body)
	}
	resp = http.Response{Header: a.header}
	if cs := resp.Cookies(); len(cs) != 1 || cs[0].Name != httpapi.SessionCookie || cs[0].MaxAge >= 0 {
		t.Fatalf("logout cookie %v", a.header["Set-Cookie"])
	}
}

func TestLoginOverTLSSetsSecure(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens})
	hs := httptest.NewTLSServer(e.srv)
	t.Cleanup(hs.Close)
	req, _ := http.NewRequest("POST", hs.URL+"/v1/login", strings.NewReader(`{"token":"admin-secret"}`))
	req.Header.Set("X-Jobstage-UI", "1")
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if cs := resp.Cookies(); resp.StatusCode != 200 || len(cs) != 1 || !cs[0].Secure {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header["Set-Cookie"])
	}
}

func TestNoTokensLoginAndCrossSite(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	a := e.req("POST", "/v1/login", `{"token":"anything"}`, "X-Jobstage-UI", "1")
	if got := whoamiOf(t, a); got.Auth != httpapi.AuthNone || a.header.Get("Set-Cookie") != "" {
		t.Fatalf("%+v %v", got, a.header)
	}
	// A loopback client's browser visiting another site: that site's
	// page may not change anything here.
	wantError(t, e.req("POST", "/v1/types/email/jobs", `{"id":"x"}`, "Origin", "https://evil.example"), 403, httpapi.CodeForbidden, "Origin")
	wantError(t, e.req("POST", "/v1/types/email/pause", "", "Sec-Fetch-Site", "cross-site"), 403, httpapi.CodeForbidden, "another site")
	// Reads, and clients that are not browsers, are served as before.
	if a := e.req("GET", "/v1/types", "", "Origin", "https://evil.example"); a.status != 200 {
		t.Fatalf("GET: %d", a.status)
	}
	if a := e.req("POST", "/v1/types/email/jobs", `{"id":"x"}`); a.status != 201 {
		t.Fatalf("curl-like enqueue: %d %s", a.status, a.body)
	}
	if a := e.req("POST", "/v1/types/email/jobs", `{"id":"y"}`, "Origin", e.url, "Sec-Fetch-Site", "same-origin"); a.status != 201 {
		t.Fatalf("same-origin enqueue: %d %s", a.status, a.body)
	}
}

func TestUIRoutes(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens, UI: fakeUI})
	a := e.req("GET", "/", "")
	if a.status != 302 || a.header.Get("Location") != "/ui/" {
		t.Fatalf("GET /: %d %v", a.status, a.header)
	}
	for _, p := range []string{"/ui/login.html", "/ui/assets/app.js"} {
		a := e.req("GET", p, "")
		if a.status != 200 || string(a.body) != "ui "+strings.TrimPrefix(p, "/ui") {
			t.Fatalf("GET %s: %d %s", p, a.status, a.body)
		}
		if !strings.Contains(a.header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Fatalf("GET %s: CSP %q", p, a.header.Get("Content-Security-Policy"))
		}
	}
	// The page needs a token: without one, or with a bad one, the
	// browser goes to the login page.
	for _, c := range []string{"", httpapi.SessionCookie + "=%%%", sessionCookie("wrong")} {
		a := e.req("GET", "/ui/", "", "Cookie", c)
		if a.status != 303 || a.header.Get("Location") != "/ui/login.html" || strings.Contains(string(a.body), "ui /") {
			t.Fatalf("GET /ui/ with cookie %q: %d %v %s", c, a.status, a.header, a.body)
		}
	}
	for _, secret := range []string{"admin-secret", "producer-secret", "worker-secret", "metrics-secret"} {
		if a := e.req("GET", "/ui/", "", "Cookie", sessionCookie(secret)); a.status != 200 || string(a.body) != "ui /" {
			t.Fatalf("GET /ui/ as %s: %d %s", secret, a.status, a.body)
		}
	}
	// Nothing else under /ui is served.
	for _, p := range []string{"/ui/index.html", "/ui/x", "/ui/../v1/types"} {
		if a := e.req("GET", p, "", "Cookie", sessionCookie("admin-secret")); a.status < 300 || strings.HasPrefix(string(a.body), "ui ") {
			t.Fatalf("GET %s: %d %s", p, a.status, a.body)
		}
	}
	// Without Options.UI there is no UI.
	plain := newEnv(t, httpapi.Options{Tokens: testTokens})
	for _, p := range []string{"/", "/ui/", "/ui/login.html"} {
		if a := plain.req("GET", p, ""); a.status != 404 {
			t.Fatalf("no UI: GET %s: %d", p, a.status)
		}
	}
	// Without tokens the UI is served to loopback clients only.
	open := newEnv(t, httpapi.Options{UI: fakeUI})
	if a := open.req("GET", "/ui/", ""); a.status != 200 {
		t.Fatalf("no tokens, loopback: %d", a.status)
	}
	for _, p := range []string{"/ui/", "/ui/login.html", "/"} {
		r := httptest.NewRequest("GET", p, nil)
		r.RemoteAddr = "192.0.2.7:5000"
		rec := httptest.NewRecorder()
		open.srv.ServeHTTP(rec, r)
		if rec.Code != 403 {
			t.Fatalf("no tokens, remote client, GET %s: %d", p, rec.Code)
		}
	}
}

func TestTypeStats(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	ctx := context.Background()
	var st httpapi.TypeStats
	a := e.do("GET", "/v1/types/email/stats", "", "")
	if a.status != 200 || json.Unmarshal(a.body, &st) != nil || st.OldestDueAt != nil || st.OldestDueAge != 0 {
		t.Fatalf("empty queue: %d %s", a.status, a.body)
	}
	due := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	if _, err := e.q.AddBatch(ctx, e.db, []fdbq.NewJob{
		{Type: "email", ID: "old", ScheduledAt: due},
		{Type: "email", ID: "later", ScheduledAt: time.Now().Add(time.Hour)},
	}); err != nil {
		t.Fatal(err)
	}
	a = e.do("GET", "/v1/types/email/stats", "", "")
	if a.status != 200 || json.Unmarshal(a.body, &st) != nil || st.OldestDueAt == nil || !st.OldestDueAt.Equal(due) || st.OldestDueAge < 3600 {
		t.Fatalf("%d %s, want due at %s", a.status, a.body, due)
	}
	wantError(t, e.do("GET", "/v1/types/nosuch/stats", "", ""), 404, httpapi.CodeUnknownType)
	wantError(t, e.do("GET", "/v1/types/%ff/stats", "", ""), 400, httpapi.CodeInvalid)
}

// decodeCookie returns the secret of the test token a session cookie's
// value names ("" if it names none).
func decodeCookie(v string) string {
	parts := strings.Split(v, ".")
	if len(parts) != 4 {
		return ""
	}
	name, _ := base64.RawURLEncoding.DecodeString(parts[1])
	for _, tk := range testTokens {
		if tk.Name == string(name) {
			return tk.Secret
		}
	}
	return ""
}

// The session cookie names its token and its end, signed with the token's
// secret: it holds no secret, and one that was altered, that ended, that
// an earlier version made (the token itself), or whose token's secret
// changed since, authenticates nothing.
func TestSessionCookieSigned(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, httpapi.Options{Tokens: testTokens, Now: clock, SessionTTL: time.Hour})
	ui := []string{"X-Jobstage-UI", "1", "Content-Type", "application/json"}
	a := e.req("POST", "/v1/login", `{"token":"producer-secret"}`, ui...)
	cookies := (&http.Response{Header: a.header}).Cookies()
	if a.status != 200 || len(cookies) != 1 {
		t.Fatalf("login: %d %v", a.status, a.header["Set-Cookie"])
	}
	c := cookies[0]
	if strings.Contains(c.Value, "producer-secret") || strings.Contains(c.Value, base64.RawURLEncoding.EncodeToString([]byte("producer-secret"))) {
		t.Fatalf("the cookie %q holds the token's secret", c.Value)
	}
	if c.MaxAge != 3600 || c.Expires.IsZero() {
		t.Fatalf("cookie lasts MaxAge %d, Expires %v; want an hour", c.MaxAge, c.Expires)
	}
	cookie := c.Name + "=" + c.Value
	if got := whoamiOf(t, e.req("GET", "/v1/whoami", "", "Cookie", cookie)); got.Token != "shop" || got.Role != httpapi.RoleProducer {
		t.Fatalf("whoami with the cookie: %+v", got)
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 4 {
		t.Fatalf("cookie value %q", c.Value)
	}
	forged := func(name, end string) string {
		return httpapi.SessionCookie + "=" + strings.Join([]string{parts[0], base64.RawURLEncoding.EncodeToString([]byte(name)), end, parts[3]}, ".")
	}
	for what, bad := range map[string]string{
		"another token's name":  forged("ops", parts[2]),
		"a later end":           forged("shop", fmt.Sprint(now.Add(100*time.Hour).Unix())),
		"the token itself":      httpapi.SessionCookie + "=" + base64.RawURLEncoding.EncodeToString([]byte("admin-secret")),
		"signed by another key": sessionCookie("not-a-secret"),
		"garbage":               httpapi.SessionCookie + "=s1.%%.1.x",
	} {
		t.Run(what, func(t *testing.T) {
			wantError(t, e.req("GET", "/v1/whoami", "", "Cookie", bad), 401, httpapi.CodeUnauthorized, "log in again")
		})
	}
	// An hour later the session has ended.
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	wantError(t, e.req("GET", "/v1/whoami", "", "Cookie", cookie), 401, httpapi.CodeUnauthorized, "expired")

	// A server whose token "shop" has another secret refuses the
	// sessions of the old one.
	rotated := slices.Clone(testTokens)
	for i := range rotated {
		if rotated[i].Name == "shop" {
			rotated[i].Secret = "new-producer-secret"
		}
	}
	f := newEnv(t, httpapi.Options{Tokens: rotated})
	wantError(t, f.req("GET", "/v1/whoami", "", "Cookie", sessionCookie("producer-secret")), 401, httpapi.CodeUnauthorized, "log in again")
	if got := whoamiOf(t, f.req("GET", "/v1/whoami", "", "Cookie", sessionCookie("admin-secret"))); got.Token != "ops" {
		t.Fatalf("another token's session on the rotated server: %+v", got)
	}
}

// Past MaxAuthFailures failed authentications in a minute, an address is
// refused (429 with Retry-After) until the minute is over, even with a
// good token; another address is served meanwhile.
func TestAuthFailuresLimited(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, httpapi.Options{Tokens: testTokens, Now: clock})
	call := func(addr, auth, path, body string) *httptest.ResponseRecorder {
		return guessCall(e, addr, auth, "", path, body)
	}
	const attacker, other = "192.0.2.1:1000", "192.0.2.2:1000"
	for i := range httpapi.MaxAuthFailures {
		// Bad bearer tokens and bad logins count alike.
		var rec *httptest.ResponseRecorder
		if i%2 == 0 {
			rec = call(attacker, fmt.Sprint("guess-", i), "/v1/whoami", "")
		} else {
			rec = call(attacker, "", "/v1/login", fmt.Sprintf(`{"token":"guess-%d"}`, i))
		}
		if rec.Code != 401 {
			t.Fatalf("guess %d: %d %s, want 401", i, rec.Code, rec.Body)
		}
	}
	for _, rec := range []*httptest.ResponseRecorder{
		call(attacker, "admin-secret", "/v1/whoami", ""),
		call(attacker, "", "/v1/login", `{"token":"admin-secret"}`),
	} {
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "60" || !strings.Contains(rec.Body.String(), "too_many_requests") {
			t.Fatalf("after %d failures: %d %v %s, want 429 with Retry-After 60", httpapi.MaxAuthFailures, rec.Code, rec.Header(), rec.Body)
		}
	}
	if rec := call(other, "admin-secret", "/v1/whoami", ""); rec.Code != 200 {
		t.Fatalf("another address: %d %s", rec.Code, rec.Body)
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	if rec := call(attacker, "admin-secret", "/v1/whoami", ""); rec.Code != 200 {
		t.Fatalf("a minute later: %d %s", rec.Code, rec.Body)
	}
}
