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

func guessCall(e *env, addr, auth, cookie, path, body string) *httptest.ResponseRecorder {
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

// A request that carries no credentials guesses nothing and is not
// counted: a browser that asks for pages or the API before logging in
// does not lock its address out of the login.
func TestNoCredentialsAreNoGuess(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens, UI: fakeUI})
	const addr = "192.0.2.7:1000"
	for i := range httpapi.MaxAuthFailures {
		path := "/v1/whoami"
		if i%2 == 0 {
			path = "/ui/" // a browser opening the UI before logging in
		}
		rec := guessCall(e, addr, "", "", path, "")
		if rec.Code == 429 {
			t.Fatalf("request %d without credentials already 429", i)
		}
	}
	if rec := guessCall(e, addr, "", "", "/v1/login", `{"token":"admin-secret"}`); rec.Code != 200 {
		t.Fatalf("a correct login after %d requests without any credentials (no guess made): %d %s",
			httpapi.MaxAuthFailures, rec.Code, rec.Body)
	}
}

// An expired session cookie, signed by its token, is not a guess: the
// UI's open tab that keeps asking after its session ended does not lock
// its user out of logging in again.
func TestExpiredCookieIsNoGuess(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, httpapi.Options{Tokens: testTokens, Now: clock, SessionTTL: time.Hour})
	const addr = "192.0.2.8:1000"
	cookie := httpapi.SessionCookie + "=" + httpapi.SessionValue("ops", "admin-secret", now.Add(time.Hour))
	if rec := guessCall(e, addr, "", cookie, "/v1/whoami", ""); rec.Code != 200 {
		t.Fatalf("fresh cookie: %d %s", rec.Code, rec.Body)
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	for range httpapi.MaxAuthFailures {
		guessCall(e, addr, "", cookie, "/v1/types", "")
	}
	if rec := guessCall(e, addr, "", "", "/v1/login", `{"token":"admin-secret"}`); rec.Code != 200 {
		t.Fatalf("login after the session expired under a polling tab: %d %s", rec.Code, rec.Body)
	}
}

// The limiter counts an IPv6 address by its /64, which one host is
// routinely given whole: changing the low bits of its address does not
// give it more guesses.
func TestIPv6GuessesCountedBySubnet(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens})
	refused := 0
	const n = 5 * httpapi.MaxAuthFailures
	for i := range n {
		addr := fmt.Sprintf("[2001:db8:1:2::%x]:4000", i+1)
		if rec := guessCall(e, addr, fmt.Sprint("guess-", i), "", "/v1/whoami", ""); rec.Code == 429 {
			refused++
		}
	}
	if refused == 0 {
		t.Fatalf("%d guesses from one /64 within a minute, none refused (limit %d)", n, httpapi.MaxAuthFailures)
	}
}

// A session has one cookie value: "+END", "000END" or another encoding
// of the name, though they parse to the same session, are refused.
func TestSessionValueNotMalleable(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens})
	v := httpapi.SessionValue("ops", "admin-secret", time.Now().Add(time.Hour))
	parts := strings.Split(v, ".")
	parts[2] = "+00" + parts[2]
	alt := httpapi.SessionCookie + "=" + strings.Join(parts, ".")
	if rec := guessCall(e, "192.0.2.9:1", "", alt, "/v1/whoami", ""); rec.Code == 200 {
		t.Fatalf("a cookie with END %q, not as signed, is accepted", parts[2])
	}
}
