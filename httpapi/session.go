package httpapi

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The web UI's session: POST /v1/login checks a token and puts it in a
// cookie, which authorize accepts when a request has no Authorization
// header; POST /v1/logout clears it; GET /v1/whoami says who the caller
// is, so that the UI shows only what the role may do (the routes refuse
// the rest all the same).
//
// The cookie names the token and when the session ends, signed with the
// token's secret (HMAC-SHA-256 keyed by the secret's hash): it does not
// hold the secret, so a cookie that leaks (a proxy's log, a backup of a
// browser profile) gives a session until it ends, not the token. Nothing
// is kept on the server, so a restart keeps the sessions and every server
// over the same config accepts them; removing a token from the config, or
// changing its secret, ends the sessions made with it. It is HttpOnly (no
// script reads it), SameSite=Strict (no other site's page makes the
// browser send it) and Secure when the login came over TLS, and it lasts
// Options.SessionTTL.
//
// Failed authentications are counted by client address (guessLimiter):
// past MaxAuthFailures in a minute, the address is answered 429 until
// the minute is over, whatever it sends.
//
// A cookie is sent by the browser on its own, so a request that changes
// something and is authenticated by it must show it comes from the UI:
// it must carry the header X-Jobstage-UI: 1, which a cross-site form
// cannot send and a cross-site script can send only after a CORS
// preflight that this server never grants; and a browser's Origin and
// Sec-Fetch-Site headers, when present, must name this server. A server
// without tokens is open to its loopback clients, whose browsers also
// visit other sites: requests that change something are refused there
// too when their Origin or Sec-Fetch-Site says another site sent them.
// So are the reads that hold state in the store while they run: the
// event stream (which writes its holds on the types' event logs) and the
// waits, which another site's page could otherwise open by the hundred
// (an EventSource, an img) with or without tokens.
// Requests with a bearer token are not checked: a browser never adds
// that header on its own.

// SessionCookie is the name of the web UI's session cookie.
const SessionCookie = "jobstage_session"

// UIHeader is the header a request authenticated by the session cookie
// must carry, with the value "1", to change anything.
const UIHeader = "X-Jobstage-UI"

// MaxLoginBytes bounds the body of POST /v1/login.
const MaxLoginBytes = 4 << 10

// How a request was authenticated (Whoami.Auth).
const (
	AuthBearer = "bearer" // the Authorization header
	AuthCookie = "cookie" // the web UI's session cookie
	AuthNone   = "none"   // a server without tokens: a loopback client
)

// Whoami is the answer of GET /v1/whoami and POST /v1/login.
type Whoami struct {
	// Role is the caller's token's role; admin on a server without
	// tokens.
	Role Role `json:"role"`
	// Token is the token's name; empty on a server without tokens.
	Token string `json:"token,omitempty"`
	// Auth is how the request was authenticated: bearer, cookie or none.
	Auth string `json:"auth"`
}

// LoginRequest is the body of POST /v1/login.
type LoginRequest struct {
	Token string `json:"token"`
}

// caller is who sent a request, as authorize found it.
type caller struct {
	name string
	role Role
	via  string
}

type callerKey struct{}

// DefaultSessionTTL is Options.SessionTTL when it is zero.
const DefaultSessionTTL = 12 * time.Hour

// sessionVersion begins every session cookie's value.
const sessionVersion = "s1"

// sessionMAC signs a session of token t ending at end (Unix seconds).
func sessionMAC(t *tokenEntry, end int64) []byte {
	m := hmac.New(sha256.New, t.hash[:])
	fmt.Fprintf(m, "jobstage session\x00%s\x00%d", t.name, end)
	return m.Sum(nil)
}

// sessionValue is the session cookie's value for token t ending at end:
// s1.NAME.END.MAC, NAME and MAC in base64url.
func sessionValue(t *tokenEntry, end int64) string {
	return sessionVersion + "." + base64.RawURLEncoding.EncodeToString([]byte(t.name)) + "." +
		strconv.FormatInt(end, 10) + "." + base64.RawURLEncoding.EncodeToString(sessionMAC(t, end))
}

// session returns the token of the request's session cookie, if it has
// one; a cookie that is malformed, ended, or not signed by a known
// token's secret is an error that says to log in again.
func (s *Server) session(r *http.Request) (*tokenEntry, bool, *APIError) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return nil, false, nil
	}
	again := func(why string) (*tokenEntry, bool, *APIError) {
		return nil, false, &APIError{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "the session cookie " + why + ": log in again", guess: true}
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 4 || parts[0] != sessionVersion {
		return again("is malformed")
	}
	name, err1 := base64.RawURLEncoding.DecodeString(parts[1])
	end, err2 := strconv.ParseInt(parts[2], 10, 64)
	mac, err3 := base64.RawURLEncoding.DecodeString(parts[3])
	if err1 != nil || err2 != nil || err3 != nil || strconv.FormatInt(end, 10) != parts[2] ||
		base64.RawURLEncoding.EncodeToString(name) != parts[1] {
		// One session has one value: the end as written, the name in
		// its one encoding.
		return again("is malformed")
	}
	var found *tokenEntry
	for i := range s.tokens {
		if s.tokens[i].name == string(name) {
			found = &s.tokens[i]
		}
	}
	if found == nil || !hmac.Equal(mac, sessionMAC(found, end)) {
		return again("is not signed by a known token")
	}
	if s.now().Unix() >= end {
		// Signed by the token: not a guess (an open page of a session
		// that ended must not lock its user out of the next login).
		_, _, e := again("has expired")
		e.guess = false
		return nil, false, e
	}
	return found, true, nil
}

// MaxAuthFailures is how many failed authentications one client address
// may make in a minute before it is answered 429.
const MaxAuthFailures = 20

// maxGuessClients bounds the addresses the limiter remembers: past it,
// the oldest windows are dropped.
const maxGuessClients = 10_000

// guessLimiter counts failed authentications by client address, in
// windows of a minute.
type guessLimiter struct {
	now     func() time.Time
	mu      sync.Mutex
	clients map[string]*guessWindow
}

type guessWindow struct {
	start    time.Time
	failures int
}

// clientHost is the address part of r's client (the whole RemoteAddr if
// it has no port; "" for a Unix socket).
//
// An IPv6 address counts by its /64, which one host usually has whole.
func clientHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap().Is6() {
		if p, err := ip.Unmap().Prefix(64); err == nil {
			return p.String()
		}
	}
	return host
}

// check refuses a client that failed too often in its current window.
func (g *guessLimiter) check(r *http.Request) *APIError {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.clients[clientHost(r)]
	if w == nil || w.failures < MaxAuthFailures {
		return nil
	}
	left := w.start.Add(time.Minute).Sub(g.now())
	if left <= 0 {
		return nil
	}
	return &APIError{Status: http.StatusTooManyRequests, Code: CodeTooManyRequests, RetryAfter: left,
		Message: fmt.Sprintf("%d failed authentications from this address within a minute: try again in %v", w.failures, left.Round(time.Second))}
}

// failed counts a failed authentication of r's client.
func (g *guessLimiter) failed(r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if g.clients == nil {
		g.clients = map[string]*guessWindow{}
	}
	host := clientHost(r)
	w := g.clients[host]
	if w == nil || now.Sub(w.start) >= time.Minute || now.Before(w.start) {
		if w == nil && len(g.clients) >= maxGuessClients {
			// Full: drop the windows that are over, then those of
			// addresses not refused now, down to half, so that the next
			// maxGuessClients/2 new addresses cost no sweep. An address
			// refused now is kept to the end of its window; with every
			// one refused, a new address is not counted.
			for _, pass := range []func(*guessWindow) bool{
				func(o *guessWindow) bool { return now.Sub(o.start) >= time.Minute || now.Before(o.start) },
				func(o *guessWindow) bool { return o.failures < MaxAuthFailures },
			} {
				for h, o := range g.clients {
					if len(g.clients) < maxGuessClients/2 {
						break
					}
					if pass(o) {
						delete(g.clients, h)
					}
				}
			}
			if len(g.clients) >= maxGuessClients {
				return
			}
		}
		w = &guessWindow{start: now}
		g.clients[host] = w
	}
	w.failures++
}

// checkSameOrigin refuses a request that changes something, or a read
// that holds state in the store (holds: the event stream, the waits), is
// authenticated by what a browser sends on its own (the session cookie,
// or nothing on a server without tokens), and does not show it comes
// from this server's own pages. A change authenticated by the cookie
// must also carry UIHeader; a read that holds cannot be asked to, since
// a browser's EventSource sends no header of its own.
func checkSameOrigin(r *http.Request, c *caller, holds bool) *APIError {
	changes := true
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		changes = false
	}
	if !changes && !holds || c.via == AuthBearer {
		return nil
	}
	forbid := func(msg string) *APIError {
		return &APIError{Status: http.StatusForbidden, Code: CodeForbidden, Message: msg}
	}
	if changes && c.via == AuthCookie && r.Header.Get(UIHeader) != "1" {
		return forbid("a request authenticated by the session cookie must carry " + UIHeader + ": 1 to change anything")
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return forbid("the browser says another site (" + site + ") sent this request, which only this server's own pages may send")
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return forbid("the request's Origin " + quoteOrigin(o) + " is not this server")
		}
	}
	return nil
}

func quoteOrigin(o string) string {
	if len(o) > 100 {
		o = o[:100] + "…"
	}
	return strings.ToValidUTF8(`"`+o+`"`, "?")
}

// whoami: GET /v1/whoami.
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) error {
	c, _ := r.Context().Value(callerKey{}).(*caller)
	if c == nil {
		c = &caller{role: RoleAdmin, via: AuthNone}
	}
	writeJSON(w, http.StatusOK, Whoami{Role: c.role, Token: c.name, Auth: c.via})
	return nil
}

// login: POST /v1/login {"token": "…"}. A known token is answered with
// its Whoami and a session cookie; an unknown one with 401. On a server
// without tokens there is nothing to log in to: the answer says so
// (auth none) and sets no cookie.
func (s *Server) login(w http.ResponseWriter, r *http.Request) error {
	if err := checkSameOrigin(r, &caller{via: AuthCookie}, false); err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxLoginBytes)
	req, err := decodeLogin(r.Body)
	if err != nil {
		return err
	}
	if len(s.tokens) == 0 {
		writeJSON(w, http.StatusOK, Whoami{Role: RoleAdmin, Auth: AuthNone})
		return nil
	}
	if err := s.guesses.check(r); err != nil {
		return err
	}
	found := s.lookup(req.Token)
	if found == nil {
		s.guesses.failed(r)
		return &APIError{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "unknown token"}
	}
	ttl := cmp.Or(s.o.SessionTTL, DefaultSessionTTL)
	end := s.now().Add(ttl)
	http.SetCookie(w, &http.Cookie{
		Name:     SessionCookie,
		Value:    sessionValue(found, end.Unix()),
		Path:     "/",
		Expires:  end,
		MaxAge:   int(ttl / time.Second),
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
		Secure:   r.TLS != nil,
	})
	writeJSON(w, http.StatusOK, Whoami{Role: found.role, Token: found.name, Auth: AuthCookie})
	return nil
}

// logout: POST /v1/logout clears the session cookie; 204.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) error {
	if err := checkSameOrigin(r, &caller{via: AuthCookie}, false); err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func decodeLogin(r io.Reader) (LoginRequest, error) {
	var req LoginRequest
	if err := decodeStrict(r, &req); err != nil {
		return req, err
	}
	req.Token = strings.TrimSpace(req.Token)
	if req.Token == "" {
		return req, invalid("token: empty")
	}
	return req, nil
}

// uiRoutes serve the web UI when Options.UI is set: GET / redirects to
// it, its login page and assets are public, and its page needs a token.
func (s *Server) uiRoutes() []route {
	if s.o.UI == nil {
		return nil
	}
	all := Roles()
	return []route{
		{pattern: "GET /{$}", public: true, ui: true, handle: func(w http.ResponseWriter, r *http.Request) error {
			http.Redirect(w, r, "/ui/", http.StatusFound)
			return nil
		}},
		{pattern: "GET /ui/login.html", public: true, ui: true, handle: s.serveUI},
		{pattern: "GET /ui/assets/", public: true, ui: true, handle: s.serveAsset},
		{pattern: "GET /ui/{$}", page: true, ui: true, roles: all, handle: s.serveUI},
	}
}

// serveUI hands a request to Options.UI with the path below /ui, with
// headers that keep the pages from being framed or running scripts from
// anywhere else.
func (s *Server) serveUI(w http.ResponseWriter, r *http.Request) error {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	http.StripPrefix("/ui", s.o.UI).ServeHTTP(w, r)
	return nil
}

// serveAsset serves GET /ui/assets/…, which needs no token: a file of
// the UI's assets and nothing else. The route matches the path as sent,
// escaped, and the mux cleans only that: a dot segment or a slash sent
// escaped (/ui/assets/%2e%2e/, /ui/assets/..%2f) arrives in the decoded
// path, where the UI's handler would resolve it to the page above, which
// needs a token. So the decoded path must name a file below assets/ by a
// clean path: no empty, "." or ".." segment, no trailing slash, no
// backslash.
func (s *Server) serveAsset(w http.ResponseWriter, r *http.Request) error {
	name, ok := strings.CutPrefix(r.URL.Path, "/ui/assets/")
	if !ok || !fs.ValidPath(name) || name == "." || strings.Contains(name, `\`) {
		return &APIError{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such asset"}
	}
	return s.serveUI(w, r)
}

// toLogin sends a browser without a valid token to the login page.
func toLogin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, "/ui/login.html", http.StatusSeeOther)
}
