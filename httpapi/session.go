package httpapi

import (
	"encoding/base64"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
)

// The web UI's session: POST /v1/login checks a token and puts it in a
// cookie, which authorize accepts when a request has no Authorization
// header; POST /v1/logout clears it; GET /v1/whoami says who the caller
// is, so that the UI shows only what the role may do (the routes refuse
// the rest all the same).
//
// The cookie holds the token itself (base64url, since a secret may hold
// bytes a cookie may not): nothing is kept on the server, a restart keeps
// the sessions, and removing a token from the config ends the sessions
// made with it. It is HttpOnly (no script reads it), SameSite=Strict (no
// other site's page makes the browser send it) and Secure when the login
// came over TLS.
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

// sessionSecret returns the secret in the request's session cookie, if
// it has one.
func sessionSecret(r *http.Request) (string, bool, *APIError) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return "", false, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(b) == 0 {
		return "", false, &APIError{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "the session cookie is malformed: log in again"}
	}
	return string(b), true, nil
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
	found := s.lookup(req.Token)
	if found == nil {
		return &APIError{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "unknown token"}
	}
	http.SetCookie(w, &http.Cookie{
		Name:     SessionCookie,
		Value:    base64.RawURLEncoding.EncodeToString([]byte(req.Token)),
		Path:     "/",
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
