package httpapi

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"go.opentelemetry.io/otel/trace"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/tracing"
)

// Role is what a token may do; see the package documentation for the
// table of routes per role.
type Role string

// Roles.
const (
	RoleAdmin    Role = "admin"    // everything
	RoleProducer Role = "producer" // enqueue and inspect jobs
	RoleWorker   Role = "worker"   // accept and work jobs
	RoleMetrics  Role = "metrics"  // read the metrics, nothing else
)

// Roles returns every role a token may have, in the order above (a
// config's list of the values it accepts).
func Roles() []Role { return []Role{RoleAdmin, RoleProducer, RoleWorker, RoleMetrics} }

// Token is a bearer token the server accepts.
type Token struct {
	Name   string // for logs; never the secret
	Role   Role
	Secret string
}

// Options configure a Server.
type Options struct {
	// Tokens the server accepts. None: every route is open, and only
	// loopback clients are served (see CheckListen for the listener),
	// and only requests addressed to a loopback host (see Hosts).
	Tokens []Token
	// Hosts are the names besides the loopback ones (localhost,
	// 127.0.0.0/8, ::1) that a server without tokens answers to, as the
	// request's Host header gives them, with any port: such as the host
	// of the address it listens on. Without tokens a request addressed to
	// any other host is refused (403): a web page whose own name was
	// pointed at 127.0.0.1 (DNS rebinding) reaches the port from the
	// user's browser, a loopback client, but with its name in Host. With
	// tokens the Host header is not checked.
	Hosts []string
	// MaxBodyBytes limits a request body; over it the answer is 413.
	// Default DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// RequestTimeout bounds one request, from its handler's start to its
	// answer: past it the handler's context ends (the answer is 503
	// not_ready), and a second later the connection's write deadline
	// passes, so that a client that reads no answer is disconnected. The
	// long polls (accept, wait) get MaxWait more, so that their own
	// bounded wait is never cut. Reading the request is for the
	// http.Server's ReadHeaderTimeout and ReadTimeout to bound. Default
	// DefaultRequestTimeout (30 s).
	RequestTimeout time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Ready reports readiness for GET /readyz; nil: always ready.
	Ready func() error
	// Metrics, when set, is served at MetricsPath: to every loopback
	// client when there are no tokens, else to admin and metrics tokens.
	Metrics http.Handler
	// MetricsPath; default "/metrics".
	MetricsPath string
	// Observe, when set, is called after every request with its route
	// pattern (such as "POST /v1/types/{type}/jobs"; "unmatched" for a
	// request no route matched or that was refused before routing, as a
	// non-loopback client of a server without tokens), its status and its
	// duration.
	Observe func(route string, status int, d time.Duration)
	// OnEnqueue, when set, is called after an enqueue committed, with the
	// type and the number of jobs.
	OnEnqueue func(typ string, n int)
	// OnAccept, when set, is called with the jobs an external worker
	// accepted, after the accept committed and before they are answered.
	OnAccept func(leases []*fdbq.Lease)
	// UI, when set, is the web UI (package webui): served under /ui/,
	// with GET / redirecting there. Its login page and static assets
	// (/ui/login.html, /ui/assets/…) are public; every other page needs
	// a token, taken from the session cookie that POST /v1/login sets,
	// and a browser without one is sent to the login page. It gets
	// requests with the path below /ui.
	UI http.Handler
	// MaxStreams bounds the event streams (GET /v1/events) served at
	// once; past it the answer is 503 busy. Default DefaultMaxStreams.
	MaxStreams int
	// OnOutcome, when set, is called after an external worker's finish
	// ("succeeded") or fail committed: "retried" when the job will run
	// again, "failed" when it finished failed. A finish or fail sent again
	// with the same lock (a retry after a lost answer), which answers 204
	// and changes nothing, is not an outcome: it is not reported.
	OnOutcome func(typ, outcome string)
	// TracerProvider makes the span of each enqueue (jobstage.enqueue; see
	// package tracing), a child of the request's span, or of the trace
	// context of its traceparent and tracestate headers; the jobs store
	// its context. nil: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// SessionTTL is how long a web UI session lasts after its login;
	// default DefaultSessionTTL.
	SessionTTL time.Duration
	// Now is the clock of sessions and of the limit on failed
	// authentications; default time.Now.
	Now func() time.Time
}

// Server is the HTTP API over a queue. It is an http.Handler; the caller
// owns the listener and the http.Server.
type Server struct {
	q       *fdbq.Queue
	db      *kv.DB
	o       Options
	log     *slog.Logger
	mux     *http.ServeMux
	tokens  []tokenEntry
	guesses guessLimiter
	routes  []string
	maxBody int64
	timeout time.Duration
	tracer  trace.Tracer
	// stopping is set by Stopping: requests cancelled from then on were
	// cut short by the server, not left by their client. stop is closed
	// then too: it ends the event streams.
	stopping atomic.Bool
	stop     chan struct{}
	stopOnce sync.Once
	// streams holds a token for each event stream served.
	streams chan struct{}
}

// Stopping tells the API that its server is shutting down: long polls
// (accept, wait) that the shutdown cancels then answer 503 not_ready, so
// that their clients send them again, instead of being taken for requests
// their clients left, and event streams end at once (their clients
// reconnect with their cursors).
func (s *Server) Stopping() {
	s.stopping.Store(true)
	s.stopOnce.Do(func() { close(s.stop) })
}

type tokenEntry struct {
	name string
	role Role
	hash [sha256.Size]byte
}

// New returns a Server over q. It checks the options: every token needs a
// secret and a known role, and no two tokens may share a secret.
func New(q *fdbq.Queue, o Options) (*Server, error) {
	if q == nil {
		return nil, errors.New("httpapi: nil queue")
	}
	s := &Server{q: q, db: q.DB(), o: o, log: o.Logger, mux: http.NewServeMux(), maxBody: o.MaxBodyBytes, timeout: o.RequestTimeout,
		streams: make(chan struct{}, cmp.Or(max(o.MaxStreams, 0), DefaultMaxStreams)), stop: make(chan struct{}),
		tracer: tracing.Tracer(o.TracerProvider)}
	s.guesses.now = s.now
	if s.log == nil {
		s.log = slog.Default()
	}
	switch {
	case s.maxBody == 0:
		s.maxBody = DefaultMaxBodyBytes
	case s.maxBody < 0:
		return nil, fmt.Errorf("httpapi: MaxBodyBytes %d is negative", o.MaxBodyBytes)
	}
	switch {
	case s.timeout == 0:
		s.timeout = DefaultRequestTimeout
	case s.timeout < 0:
		return nil, fmt.Errorf("httpapi: RequestTimeout %s is negative", o.RequestTimeout)
	}
	if s.o.MetricsPath == "" {
		s.o.MetricsPath = "/metrics"
	}
	if err := CheckMetricsPath(s.o.MetricsPath); err != nil {
		return nil, err
	}
	seen := map[[sha256.Size]byte]string{}
	for i, t := range o.Tokens {
		name := t.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i+1)
		}
		if !slices.Contains(Roles(), t.Role) {
			return nil, fmt.Errorf("httpapi: token %s: unknown role %q (admin, producer, worker or metrics)", name, t.Role)
		}
		if t.Secret == "" {
			return nil, fmt.Errorf("httpapi: token %s: empty secret", name)
		}
		if why := CheckSecret(t.Secret); why != "" {
			return nil, fmt.Errorf("httpapi: token %s: the secret %s", name, why)
		}
		h := sha256.Sum256([]byte(t.Secret))
		if other, dup := seen[h]; dup {
			return nil, fmt.Errorf("httpapi: tokens %s and %s have the same secret", other, name)
		}
		seen[h] = name
		s.tokens = append(s.tokens, tokenEntry{name: name, role: t.Role, hash: h})
	}
	if len(s.tokens) == 0 {
		s.log.Warn("httpapi: no tokens configured: every route is open, so only loopback clients are served")
	}
	for _, r := range s.routeTable() {
		if err := s.handle(r); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// handle registers a route. ServeMux panics on a pattern that is invalid or
// collides with another; the metrics path comes from configuration, so
// that becomes an error naming it.
func (s *Server) handle(r route) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("httpapi: route %q: %v", r.pattern, p)
		}
	}()
	s.mux.Handle(r.pattern, s.wrap(r))
	if !r.ui {
		s.routes = append(s.routes, r.pattern)
	}
	return nil
}

// Routes returns the patterns of the routes the server serves.
func (s *Server) Routes() []string {
	return append([]string(nil), s.routes...)
}

// route is one endpoint: its pattern, who may call it, and its handler.
type route struct {
	pattern string
	// public routes need no token (health, metrics, the API description).
	public bool
	// page routes are the web UI's pages: a browser without a valid
	// token is sent to the login page instead of answered 401.
	page bool
	// ui routes are not part of the API: Routes leaves them out.
	ui bool
	// roles besides admin that may call it.
	roles []Role
	// longPoll routes (accept, wait) block up to MaxWait by design: their
	// time bound is MaxWait more than the others'.
	longPoll bool
	// stream routes (events) run until their client leaves or the server
	// stops: no time bound, and a write deadline for each write.
	stream bool
	// holds routes are reads that hold state in the store while they
	// run (the event stream's holds on the event logs, which it writes;
	// a wait's watches and holds): like a change, a browser may send
	// them only from this server's own pages (checkSameOrigin).
	holds  bool
	handle func(w http.ResponseWriter, r *http.Request) error
}

func (s *Server) routeTable() []route {
	p, w := RoleProducer, RoleWorker
	rs := []route{
		{pattern: "GET /healthz", public: true, handle: s.healthz},
		{pattern: "GET /readyz", public: true, handle: s.readyz},
		{pattern: "GET /v1/openapi.yaml", public: true, handle: serveOpenAPI},

		{pattern: "GET /v1/whoami", roles: []Role{p, w, RoleMetrics}, handle: s.whoami},
		{pattern: "POST /v1/login", public: true, handle: s.login},
		{pattern: "POST /v1/logout", public: true, handle: s.logout},

		{pattern: "POST /v1/types/{type}/jobs", roles: []Role{p}, handle: s.enqueue},
		{pattern: "GET /v1/types/{type}/jobs", roles: []Role{p}, handle: s.list},
		{pattern: "GET /v1/types/{type}/jobs/{id}", roles: []Role{p, w}, handle: s.get},
		{pattern: "DELETE /v1/types/{type}/jobs/{id}", handle: s.remove},
		{pattern: "POST /v1/types/{type}/jobs/{id}/cancel", roles: []Role{p}, handle: s.cancel},
		{pattern: "POST /v1/types/{type}/jobs/{id}/requeue", roles: []Role{p}, handle: s.requeue},
		{pattern: "GET /v1/types/{type}/jobs/{id}/wait", roles: []Role{p}, longPoll: true, holds: true, handle: s.wait},
		// The same, the job named by the id parameter: a browser
		// removes a dot segment from a path, even one sent escaped, so
		// the web UI names a job stored as "." or ".." so.
		{pattern: "GET /v1/types/{type}/job", roles: []Role{p, w}, handle: s.get},
		{pattern: "DELETE /v1/types/{type}/job", handle: s.remove},
		{pattern: "POST /v1/types/{type}/job/cancel", roles: []Role{p}, handle: s.cancel},
		{pattern: "POST /v1/types/{type}/job/requeue", roles: []Role{p}, handle: s.requeue},

		{pattern: "GET /v1/types", roles: []Role{p, w}, handle: s.types},
		{pattern: "GET /v1/types/{type}/stats", roles: []Role{p, w}, handle: s.typeStats},
		{pattern: "GET /v1/types/{type}/history", roles: []Role{p, w}, handle: s.typeHistory},
		{pattern: "GET /v1/types/{type}/keys", roles: []Role{p}, handle: s.keys},
		{pattern: "PUT /v1/types/{type}", handle: s.setType},
		{pattern: "POST /v1/types/{type}/pause", handle: s.pause},
		{pattern: "POST /v1/types/{type}/resume", handle: s.resume},

		{pattern: "GET /v1/events", roles: []Role{p}, stream: true, holds: true, handle: s.events},

		{pattern: "POST /v1/workflows", roles: []Role{p}, handle: s.addWorkflow},
		{pattern: "GET /v1/workflows/{id}", roles: []Role{p}, handle: s.getWorkflow},
		{pattern: "POST /v1/workflows/{id}/cancel", roles: []Role{p}, handle: s.cancelWorkflow},
		{pattern: "GET /v1/workflows/{id}/wait", roles: []Role{p}, longPoll: true, holds: true, handle: s.waitWorkflow},
		{pattern: "GET /v1/types/{type}/jobs/{id}/parents", roles: []Role{p, w}, handle: s.parents},

		{pattern: "GET /v1/schedules", roles: []Role{p}, handle: s.schedules},
		{pattern: "GET /v1/schedules/{name}", roles: []Role{p}, handle: s.schedule},
		{pattern: "DELETE /v1/schedules/{name}", handle: s.deleteSchedule},
		{pattern: "POST /v1/schedules/{name}/pause", handle: s.pauseSchedule},
		{pattern: "POST /v1/schedules/{name}/resume", handle: s.resumeSchedule},

		{pattern: "POST /v1/types/{type}/accept", roles: []Role{w}, longPoll: true, handle: s.accept},
		{pattern: "POST /v1/types/{type}/jobs/{id}/heartbeat", roles: []Role{w}, handle: s.heartbeat},
		{pattern: "POST /v1/types/{type}/jobs/{id}/finish", roles: []Role{w}, handle: s.finish},
		{pattern: "POST /v1/types/{type}/jobs/{id}/fail", roles: []Role{w}, handle: s.fail},
	}
	rs = append(rs, s.uiRoutes()...)
	if s.o.Metrics != nil {
		m := s.o.Metrics
		rs = append(rs, route{pattern: "GET " + s.o.MetricsPath, roles: []Role{RoleMetrics}, handle: func(w http.ResponseWriter, r *http.Request) error {
			m.ServeHTTP(w, r)
			return nil
		}})
	}
	return rs
}

// ServeHTTP serves one request: the loopback and token checks, the body
// limit, the route, and the observation of the outcome.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w}
	if !s.clientAllowed(r) {
		s.refuse(rec, &APIError{Status: http.StatusForbidden, Code: CodeForbidden,
			Message: "this server has no tokens configured and serves loopback clients only"})
		s.observe("unmatched", rec, start)
		return
	}
	if !s.hostAllowed(r.Host) {
		s.refuse(rec, &APIError{Status: http.StatusForbidden, Code: CodeForbidden,
			Message: fmt.Sprintf("this server has no tokens configured and answers only requests addressed to a loopback host "+
				"(localhost, 127.0.0.1, [::1]) or to the host it listens on; the Host header names %s "+
				"(a web page whose name points at this machine, DNS rebinding, would send that)", quoteOrigin(r.Host))})
		s.observe("unmatched", rec, start)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && !cleanPath(r.URL.EscapedPath()) {
		// The mux would redirect to the cleaned path, and a client that
		// follows the redirect would send the request to that path's
		// route, which may be another (…/x/../../pause is a pause): a
		// request that changes something is refused instead.
		s.refuse(rec, &APIError{Status: http.StatusBadRequest, Code: CodeInvalid,
			Message: fmt.Sprintf("the path %s is not clean (a . or .. segment, or an empty one): send the path it stands for", quoteOrigin(r.URL.EscapedPath()))})
		s.observe("unmatched", rec, start)
		return
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		s.unmatched(rec, r)
		s.observe("unmatched", rec, start)
		return
	}
	s.mux.ServeHTTP(rec, r)
	route := rec.route
	if route == "" {
		route = "unmatched" // the mux redirected to a cleaned path
	}
	s.observe(route, rec, start)
}

// cleanPath reports whether p is as the mux's path cleaning leaves it:
// no . or .. segment, no empty one, a trailing slash kept.
func cleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

func (s *Server) observe(route string, rec *recorder, start time.Time) {
	if s.o.Observe != nil {
		s.o.Observe(route, rec.status(), time.Since(start))
	}
}

// wrap makes a route's handler: token and role, body limit, errors.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rec, ok := w.(*recorder); ok {
			rec.route = rt.pattern
		}
		if !rt.public {
			c, err := s.authorize(r, rt)
			if err == nil {
				err = checkSameOrigin(r, c, rt.holds)
			}
			if err != nil {
				if rt.page && err.Status == http.StatusUnauthorized {
					toLogin(w, r)
					return
				}
				if err.Status == http.StatusUnauthorized {
					w.Header().Set("WWW-Authenticate", `Bearer realm="jobstage"`)
				}
				s.refuse(w, err)
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
		}
		r, cancel := s.bound(w, r, rt)
		defer cancel()
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
		}
		if err := rt.handle(w, r); err != nil {
			s.writeError(w, s.classify(r, rt.pattern, err))
		}
	})
}

// refuse answers a request refused before its handler (no token, a bad
// one, a role that may not call the route, a client a server without
// tokens does not serve) and closes the connection without reading the
// request's body: a client that is refused gets nothing more from the
// server, not even the time it takes to discard a body it may never send.
func (s *Server) refuse(w http.ResponseWriter, e *APIError) {
	w.Header().Set("Connection", "close")
	// net/http discards what is left of a body after the handler, to
	// reuse the connection; a read deadline in the past ends that read at
	// once. The answer is written all the same (writes have their own
	// deadline).
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	s.writeError(w, e)
}

// writeSlack is how much longer than a request's bound its connection's
// write deadline is, so that the handler's own answer to its context
// ending (503) is still written.
const writeSlack = time.Second

// bound gives a request its time: a context that ends at its deadline
// (RequestTimeout; MaxWait more for a long poll), and a write deadline
// just past it, so that a client that reads no answer holds the
// connection no longer. The server's read timeouts bound the reading of
// the request (net/http lifts them once the body is read, so they do not
// cut a long poll).
func (s *Server) bound(w http.ResponseWriter, r *http.Request, rt route) (*http.Request, context.CancelFunc) {
	if rt.stream {
		return r, func() {}
	}
	d := s.timeout
	if rt.longPoll {
		d += MaxWait
	}
	deadline := time.Now().Add(d)
	// A ResponseWriter that cannot set deadlines (a test's recorder) is
	// bounded by the context alone.
	_ = http.NewResponseController(w).SetWriteDeadline(deadline.Add(writeSlack))
	ctx, cancel := context.WithDeadline(r.Context(), deadline)
	return r.WithContext(ctx), cancel
}

// authorize finds the request's token and checks its role, and returns
// who is calling. The token comes from the Authorization header, or,
// without one, from the web UI's session cookie. Every configured secret
// is compared, in constant time over equal-length hashes, so the time
// taken says nothing about which secret came close. Without tokens every
// caller is an admin (clientAllowed has kept to loopback clients).
func (s *Server) authorize(r *http.Request, rt route) (*caller, *APIError) {
	if len(s.tokens) == 0 {
		return &caller{role: RoleAdmin, via: AuthNone}, nil
	}
	if apiErr := s.guesses.check(r); apiErr != nil {
		return nil, apiErr
	}
	found, via, apiErr := s.credentials(r)
	if apiErr != nil {
		if apiErr.guess {
			s.guesses.failed(r)
		}
		return nil, apiErr
	}
	c := &caller{name: found.name, role: found.role, via: via}
	if found.role == RoleAdmin {
		return c, nil
	}
	for _, role := range rt.roles {
		if found.role == role {
			return c, nil
		}
	}
	return nil, &APIError{Status: http.StatusForbidden, Code: CodeForbidden,
		Message: fmt.Sprintf("token %s has role %s, which may not call %s", found.name, found.role, rt.pattern)}
}

// credentials returns the token of the request and where it came from:
// the Authorization header when there is one, else the session cookie.
func (s *Server) credentials(r *http.Request) (*tokenEntry, string, *APIError) {
	h := r.Header.Get("Authorization")
	if h == "" {
		found, ok, err := s.session(r)
		if err != nil {
			return nil, "", err
		}
		if ok {
			return found, AuthCookie, nil
		}
		return nil, "", &APIError{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "missing bearer token: send Authorization: Bearer <token>"}
	}
	scheme, secret, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		return nil, "", &APIError{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "the Authorization header must be Bearer <token>"}
	}
	found := s.lookup(strings.TrimSpace(secret))
	if found == nil {
		return nil, "", &APIError{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "unknown token", guess: true}
	}
	return found, AuthBearer, nil
}

// CheckSecret says what keeps a token's secret from ever authenticating,
// as the end of a sentence whose subject is the secret, or "" when
// nothing does: whitespace at its start or end, which the server drops
// from the Authorization header's value (as HTTP drops spaces and tabs
// around a header's value) and from a login's token, or a control
// character, which a header cannot carry. The secret itself is never in
// the answer.
func CheckSecret(secret string) string {
	switch {
	case strings.TrimSpace(secret) != secret:
		return "has whitespace at its start or end, which is dropped from the token a request sends, so the token could never authenticate; remove it"
	case strings.ContainsFunc(secret, unicode.IsControl):
		return "holds a control character, which an Authorization header cannot carry, so the token could never authenticate"
	}
	return ""
}

// lookup returns the token whose secret this is, or nil.
func (s *Server) now() time.Time {
	if s.o.Now != nil {
		return s.o.Now()
	}
	return time.Now()
}

func (s *Server) lookup(secret string) *tokenEntry {
	sum := sha256.Sum256([]byte(secret))
	var found *tokenEntry
	for i := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], s.tokens[i].hash[:]) == 1 {
			found = &s.tokens[i]
		}
	}
	return found
}

// clientAllowed: without tokens only loopback clients are served, even if
// the listener was bound elsewhere by mistake. Unix-socket clients, whose
// RemoteAddr has no host, are local too.
func (s *Server) clientAllowed(r *http.Request) bool {
	if len(s.tokens) > 0 {
		return true
	}
	if r.RemoteAddr == "" || r.RemoteAddr == "@" {
		return true
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// hostAllowed: without tokens only requests addressed to a loopback host
// or to one of Options.Hosts are served, whatever the port. A request
// with no Host at all (HTTP/1.0) comes from no browser, and is served.
func (s *Server) hostAllowed(hostport string) bool {
	if len(s.tokens) > 0 || hostport == "" {
		return true
	}
	host := hostOnly(hostport)
	if isLoopbackHost(strings.ToLower(host)) {
		return true
	}
	for _, h := range s.o.Hosts {
		if h = hostOnly(h); h != "" && strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// hostOnly is the host of a Host header or listen address, without its
// port or an IPv6 address's brackets.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	if strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]") {
		return hostport[1 : len(hostport)-1]
	}
	return hostport
}

// unmatched answers a request no route matched with the mux's status (404,
// 405 with Allow, or a redirect to the cleaned path) in JSON.
func (s *Server) unmatched(w http.ResponseWriter, r *http.Request) {
	h, _ := s.mux.Handler(r)
	c := &capture{header: http.Header{}}
	h.ServeHTTP(c, r)
	switch {
	case c.code == http.StatusMethodNotAllowed:
		w.Header().Set("Allow", c.header.Get("Allow"))
		s.writeError(w, &APIError{Status: c.code, Code: CodeMethodNotAllowed,
			Message: fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, c.header.Get("Allow"))})
	case c.code >= 300 && c.code < 400:
		w.Header().Set("Location", c.header.Get("Location"))
		w.WriteHeader(c.code)
	default:
		s.writeError(w, &APIError{Status: http.StatusNotFound, Code: CodeNotFound,
			Message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	}
}

// classify maps an error to its answer.
func (s *Server) classify(r *http.Request, pattern string, err error) *APIError {
	var (
		apiErr *APIError
		tooBig *http.MaxBytesError
		dup    *fdbq.DuplicateError
	)
	switch {
	case errors.As(err, &apiErr):
		return apiErr
	case errors.As(err, &tooBig):
		return &APIError{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge,
			Message: fmt.Sprintf("the request body is larger than %d bytes", tooBig.Limit)}
	case errors.Is(err, fdbq.ErrHalt):
		return &APIError{Status: http.StatusConflict, Code: CodeHalt, Message: err.Error()}
	case errors.Is(err, fdbq.ErrWrongState):
		return &APIError{Status: http.StatusConflict, Code: CodeWrongState, Message: fdbqDetail(err)}
	case errors.As(err, &dup):
		st := string(dup.State)
		if dup.Outcome != "" {
			st += ", " + string(dup.Outcome)
		}
		return &APIError{Status: http.StatusConflict, Code: CodeDuplicate, JobID: dup.ID,
			Message: fmt.Sprintf("job %s of type %s (%s) is a duplicate of this unique job, which refuses duplicates", dup.ID, dup.Type, st)}
	case errors.Is(err, fdbq.ErrUnknownType):
		return &APIError{Status: http.StatusNotFound, Code: CodeUnknownType,
			Message: "unknown job type " + fdbqDetail(err) + "; register it with PUT /v1/types/{type}"}
	case errors.Is(err, fdbq.ErrUnknownWorkflow):
		return &APIError{Status: http.StatusNotFound, Code: CodeUnknownWorkflow, Message: "unknown workflow " + fdbqDetail(err)}
	case errors.Is(err, fdbq.ErrWorkflowExists):
		return &APIError{Status: http.StatusConflict, Code: CodeWorkflowExists, Message: "workflow exists: " + fdbqDetail(err)}
	case errors.Is(err, fdbq.ErrInvalidWorkflow):
		return invalid("%s", fdbqDetail(err))
	case errors.Is(err, fdbq.ErrUnknownSchedule):
		return &APIError{Status: http.StatusNotFound, Code: CodeUnknownSchedule, Message: "unknown schedule " + fdbqDetail(err)}
	case errors.Is(err, fdbq.ErrInvalidSchedule):
		return invalid("%s", fdbqDetail(err))
	case errors.Is(err, fdbq.ErrNotFound):
		return &APIError{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no job " + fdbqDetail(err)}
	case errors.Is(err, fdbq.ErrDataTooLarge):
		return &APIError{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge, Message: fdbqDetail(err)}
	case errors.Is(err, kv.ErrValueTooLarge):
		return &APIError{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge,
			Message: "a record of the request is larger than the store takes in one value (100 KB)"}
	case errors.Is(err, kv.ErrTransactionTooLarge):
		return &APIError{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge,
			Message: "the jobs do not fit in one store transaction (10 MB); send a smaller batch"}
	case errors.Is(err, fdbq.ErrInvalidJob):
		return invalid("%s", fdbqDetail(err))
	case errors.Is(err, fdbq.ErrCorrupt):
		// The request is fine and the store answered: what it holds is
		// what cannot be read, and the message says which and why.
		s.log.Warn("httpapi: unreadable data in the store", "route", pattern, "path", r.URL.Path, "err", err)
		return &APIError{Status: http.StatusInternalServerError, Code: CodeCorrupt, Message: fdbqDetail(err)}
	case errors.Is(err, context.DeadlineExceeded) && errors.Is(r.Context().Err(), context.DeadlineExceeded):
		return &APIError{Status: http.StatusServiceUnavailable, Code: CodeNotReady,
			Message: "the request took longer than the server allows (http.request_timeout); send it again"}
	case s.stopping.Load() && errors.Is(err, context.Canceled):
		return &APIError{Status: http.StatusServiceUnavailable, Code: CodeNotReady, Message: "the server is stopping; send the request again"}
	case r.Context().Err() != nil && errors.Is(err, context.Canceled):
		// The client went away; nobody reads this answer. 499 (nginx's
		// "client closed request") keeps it apart from server errors in
		// the request metrics.
		return &APIError{Status: 499, Code: "canceled", Message: "the client closed the request"}
	}
	s.log.Error("httpapi: request failed", "route", pattern, "path", r.URL.Path, "err", err)
	return &APIError{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error; the server log has the details"}
}

func (s *Server) writeError(w http.ResponseWriter, e *APIError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((e.RetryAfter+time.Second-1)/time.Second), 10))
	}
	writeJSON(w, e.Status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":"internal","message":"the answer could not be encoded"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// recorder remembers the status written and the route that handled the
// request.
type recorder struct {
	http.ResponseWriter
	code  int
	route string
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes and
// deadlines of long polls).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}

// capture takes what the mux would answer to an unmatched request.
type capture struct {
	header http.Header
	code   int
}

func (c *capture) Header() http.Header { return c.header }

func (c *capture) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
}

func (c *capture) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	return len(b), nil
}
