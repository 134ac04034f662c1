// Package httpapi is jobstage's HTTP API: JSON over HTTP for clients that
// enqueue and inspect jobs and for external workers, in any language, that
// accept and work them; and a Go Client for it. Server is an http.Handler
// over an *fdbq.Queue; openapi.yaml (served at GET /v1/openapi.yaml)
// describes every route, body and error.
//
// # Routes
//
//	POST   /v1/types/{type}/jobs                  enqueue one job (object) or a batch (array, one transaction) → 201
//	GET    /v1/types/{type}/jobs?state=&limit=&cursor=   a page of jobs (state default pending), filtered by
//	       &key=&id_prefix=&since=&until=         key, id prefix, the state's time (fdbq.ListOptions)
//	GET    /v1/types/{type}/jobs/{id}             a job
//	DELETE /v1/types/{type}/jobs/{id}             remove a job → 204
//	POST   /v1/types/{type}/jobs/{id}/cancel      cancel → the job
//	POST   /v1/types/{type}/jobs/{id}/requeue     requeue a failed or canceled job → the job
//	GET    /v1/types/{type}/jobs/{id}/wait?state=finished&timeout=30s   long poll
//	GET    /v1/types                              types, settings, counts
//	GET    /v1/types/{type}/stats                 the oldest due pending job (fdbq.Queue.OldestDue)
//	GET    /v1/types/{type}/history               ended attempts per minute, by how they ended (fdbq.Queue.History)
//	GET    /v1/types/{type}/keys?limit=&after=    a page of the type's fairness keys (fdbq.Queue.Keys)
//	PUT    /v1/types/{type}                       register or change a type → 201 (new) or 200
//	POST   /v1/types/{type}/pause, …/resume       → the type
//	POST   /v1/workflows                          {"id"?, "policy"?, "jobs": [{name, type, data, depends_on}]} → 201 the workflow
//	GET    /v1/workflows/{id}                     a workflow and its jobs' states
//	POST   /v1/workflows/{id}/cancel              cancel its jobs not finished → the workflow
//	GET    /v1/workflows/{id}/wait?timeout=30s    long poll until every job is finished or skipped
//	GET    /v1/types/{type}/jobs/{id}/parents     a workflow job's dependencies, with their results
//	GET    /v1/schedules                          periodic schedules with their state
//	GET    /v1/schedules/{name}                   a schedule
//	DELETE /v1/schedules/{name}                   remove a schedule → 204
//	POST   /v1/schedules/{name}/pause, …/resume   → the schedule
//	POST   /v1/types/{type}/accept                {"max": n, "wait": "5s"} → {"jobs": [job + "lock"]}
//	POST   /v1/types/{type}/jobs/{id}/heartbeat   {"lock", "progress"?, "data"?} → 204
//	POST   /v1/types/{type}/jobs/{id}/finish      {"lock", "result"?} → 204
//	POST   /v1/types/{type}/jobs/{id}/fail        {"lock", "error"} → 204
//	GET    /v1/whoami                             the caller's role, token name and auth (bearer, cookie, none)
//	POST   /v1/login, /v1/logout                  the web UI's session cookie (see session.go)
//	GET    /, /ui/…                               the web UI, when Options.UI is set (not in openapi.yaml)
//	GET    /healthz, /readyz, /metrics, /v1/openapi.yaml   no token needed
//
// Wait never polls: it blocks on the job type's change key
// (fdbq.Queue.WaitOne). At its timeout it answers 200 with the job as it
// is then, so a client compares the state rather than handling a second
// kind of answer; 408 would say the request was too slow, which it was
// not. Accept and wait block at most MaxWait (60 s); a longer wait is
// refused with 400 rather than silently shortened.
//
// Enqueuing to a type that is not registered is a 404 unknown_type, not an
// implicit registration: a misspelt type would otherwise collect jobs no
// pipeline works. Every other route that names such a type answers
// unknown_type too (a job's get, wait, delete, cancel and requeue
// included), except the worker calls that carry a lock, which answer 409
// halt as for any lock that is gone.
//
// # Limits
//
// A request is bounded by Options.RequestTimeout (30 s by default): its
// context ends then, the answer is 503 not_ready, and its connection's
// write deadline passes just after, so a client that reads no answer is
// disconnected. Accept and wait get MaxWait more. Reading the request is
// the http.Server's read timeouts' to bound (package server sets them
// from the config). LimitListener bounds the connections open at once.
// A request refused before its handler (401, 403) is answered with
// Connection: close and its connection closed without reading its body.
//
// Type names and job ids, in paths and in enqueue bodies, follow fdbq's
// rules (fdbq.ValidateTypeName, fdbq.ValidateID; a path's job id
// fdbq.ValidateLookupID, so that a job stored as "." or ".." by an earlier
// version is reached: Client sends such an id as %2E%2E, and a browser,
// which removes that from a path too, uses the query form of the routes,
// /v1/types/{type}/job?id=…); any other is a 400
// invalid that says what is wrong and at which byte, before the store is
// touched. Paths arrive unescaped, so /v1/types/%ff names the byte 0xff,
// which is refused rather than registered. An enqueue body's id is checked
// as sent: encoding/json decodes bytes that are not UTF-8, and a \u escape
// of half a surrogate pair, as U+FFFD, which would store the job under an
// id the client never sent.
//
// # Errors
//
// Every error answer is {"error": code, "message": text}; see APIError and
// the Code constants: 400 invalid_json (not JSON, wrong JSON type, unknown
// field, trailing data: the message names the field) or invalid (a bad
// value or query parameter), 401 unauthorized, 403 forbidden, 404
// not_found or unknown_type, 405 method_not_allowed, 409 halt (the
// worker's lock is gone: stop working the job; nothing was written) or
// wrong_state, 413 too_large (a body over Options.MaxBodyBytes, job data
// over fdbq.MaxDataSize, or a batch over one store transaction), 500
// internal (logged) or corrupt (the store holds a record or settings that
// cannot be read: the message names the job or type and why), 503
// not_ready (readyz, a request over its time bound, a long poll cut short
// by a stop).
//
// Data that cannot be read keeps no other job or type from an answer: a
// listing answers the other jobs and the bad entries in Page.Unreadable,
// GET /v1/types a type with its error and counts; DELETE removes a job
// whose record cannot be read, and PUT /v1/types/{type} replaces settings
// that cannot be.
//
// # Authentication
//
// Bearer tokens, each with a role; secrets are compared in constant time.
// Admin may call every route; the others:
//
//	route                                   producer  worker  metrics
//	enqueue, list, cancel, requeue, wait    yes       no      no
//	list a type's keys                      yes       no      no
//	list and get schedules                  yes       no      no
//	add, get, wait, cancel a workflow       yes       no      no
//	a job's parents                         yes       yes     no
//	get a job, list types                   yes       yes     no
//	accept, heartbeat, finish, fail         no        yes     no
//	delete a job, PUT type, pause, resume   no        no      no (admin only)
//	delete, pause, resume a schedule        no        no      no (admin only)
//	metrics (Options.Metrics)               no        no      yes
//	healthz, readyz, openapi                no token needed
//
// The metrics name every job type and pipeline, the routes' traffic and
// the store's load: with tokens configured they need an admin or a
// metrics token (a scraper's, which can do nothing else); without tokens
// every route, the metrics too, is open to loopback clients only.
//
// Removing jobs and changing types are admin's: they lose information
// (a removed job's history, a type's settings) that producers have no
// need to touch.
//
// Without tokens every route is open, so the server serves loopback
// clients only (a request from elsewhere gets 403) and CheckListen refuses
// to bind anything but a loopback address: two locks on one door. A
// reverse proxy on the same machine makes every client look local, so a
// server behind one needs tokens. A loopback client's browser also runs
// other sites' pages: one whose name its owner points at 127.0.0.1 (DNS
// rebinding) reaches the port as a loopback client, with its own name in
// the Host header. So without tokens a request is served only when its
// Host names a loopback host (localhost, 127.0.0.0/8, ::1, any port) or
// one of Options.Hosts; any other gets 403.
//
// # Metrics hooks
//
// Options.Observe sees every request's route pattern, status and duration,
// and Options.OnEnqueue every committed enqueue, so the metrics package
// counts them without this package importing it. A request whose client
// went away is observed with status 499 (no one reads it).
package httpapi
