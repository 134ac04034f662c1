package httpapi_test

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/httpapi"
)

func attackCall(e *env, addr, auth, cookie, path, body string) *httptest.ResponseRecorder {
	method := "GET"
	var rd io.Reader
	if body != "" {
		method, rd = "POST", strings.NewReader(body)
	}
	r := httptest.NewRequest(method, "http://jobstage.test"+path, rd)
	r.RemoteAddr = addr
	if auth != "" {
		r.Header.Set("Authorization", "Bearer "+auth)
	}
	if cookie != "" {
		r.Header.Set("Cookie", cookie)
	}
	if body != "" {
		r.Header.Set("X-Jobstage-UI", "1")
		r.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	e.srv.ServeHTTP(rec, r)
	return rec
}

// A request that carries no credentials at all guesses nothing, yet it
// counts as a failed authentication: a browser (or a probe) that asks
// for pages or the API before logging in locks its address out, and the
// user's correct login is then refused with 429. The README documents
// only "bad bearer tokens, bad logins, bad cookies" as counted.
func TestAttackNoCredentialsCountAsGuesses(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens, UI: fakeUI})
	const addr = "192.0.2.7:1000"
	for i := range httpapi.MaxAuthFailures {
		path := "/v1/whoami"
		if i%2 == 0 {
			path = "/ui/" // a browser opening the UI before logging in
		}
		rec := attackCall(e, addr, "", "", path, "")
		if rec.Code == 429 {
			t.Fatalf("request %d without credentials already 429", i)
		}
	}
	if rec := attackCall(e, addr, "", "", "/v1/login", `{"token":"admin-secret"}`); rec.Code != 200 {
		t.Fatalf("a correct login after %d requests without any credentials (no guess made): %d %s",
			httpapi.MaxAuthFailures, rec.Code, rec.Body)
	}
}

// An expired session cookie (the UI's open tab keeps polling after the
// session ends) counts as a failed guess on every request: the tab locks
// its own user out of logging in again.
func TestAttackExpiredCookieLocksOutLogin(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, httpapi.Options{Tokens: testTokens, Now: clock, SessionTTL: time.Hour})
	const addr = "192.0.2.8:1000"
	cookie := httpapi.SessionCookie + "=" + httpapi.SessionValue("ops", "admin-secret", now.Add(time.Hour))
	if rec := attackCall(e, addr, "", cookie, "/v1/whoami", ""); rec.Code != 200 {
		t.Fatalf("fresh cookie: %d %s", rec.Code, rec.Body)
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	for range httpapi.MaxAuthFailures {
		attackCall(e, addr, "", cookie, "/v1/types", "")
	}
	if rec := attackCall(e, addr, "", "", "/v1/login", `{"token":"admin-secret"}`); rec.Code != 200 {
		t.Fatalf("login after the session expired under a polling tab: %d %s", rec.Code, rec.Body)
	}
}

// The limiter counts each IPv6 address apart: one host, which is
// routinely given a whole /64, guesses without limit by changing the low
// bits of its address.
func TestAttackIPv6SubnetUnlimitedGuesses(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens})
	refused := 0
	const n = 5 * httpapi.MaxAuthFailures
	for i := range n {
		addr := fmt.Sprintf("[2001:db8:1:2::%x]:4000", i+1)
		if rec := attackCall(e, addr, fmt.Sprint("guess-", i), "", "/v1/whoami", ""); rec.Code == 429 {
			refused++
		}
	}
	if refused == 0 {
		t.Fatalf("%d guesses from one /64 within a minute, none refused (limit %d)", n, httpapi.MaxAuthFailures)
	}
}

// A session cookie's END is parsed by strconv.ParseInt but signed as %d:
// "+END" and "000END" are other cookie values accepted as the same
// session (the value is malleable; a log or a cache keyed by it sees
// different sessions).
func TestAttackSessionValueMalleable(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens})
	v := httpapi.SessionValue("ops", "admin-secret", time.Now().Add(time.Hour))
	parts := strings.Split(v, ".")
	parts[2] = "+00" + parts[2]
	alt := httpapi.SessionCookie + "=" + strings.Join(parts, ".")
	if rec := attackCall(e, "192.0.2.9:1", "", alt, "/v1/whoami", ""); rec.Code == 200 {
		t.Fatalf("a cookie with END %q, not as signed, is accepted", parts[2])
	}
}
