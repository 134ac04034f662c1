package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/tracing"
)

// The handlers of the client routes: enqueue, inspect, cancel, requeue,
// remove and wait.

// enqueue: POST /v1/types/{type}/jobs. One object adds one job and answers
// it; an array adds them all in one transaction and answers the array.
func (s *Server) enqueue(w http.ResponseWriter, r *http.Request) error {
	typ, err := pathType(r)
	if err != nil {
		return err
	}
	jobs, batch, err := decodeEnqueue(r.Body, typ)
	if err != nil {
		return err
	}
	ctx, span := s.tracer.Start(requestTrace(r), tracing.SpanEnqueue, trace.WithSpanKind(trace.SpanKindProducer))
	tc := tracing.FromContext(ctx)
	for i := range jobs {
		jobs[i].Trace = tc
	}
	added, err := s.q.AddBatch(ctx, s.db, jobs)
	tracing.EndEnqueue(span, typ, added, err)
	if err != nil {
		return err
	}
	if s.o.OnEnqueue != nil {
		s.o.OnEnqueue(typ, len(added))
	}
	if !batch {
		w.Header().Set("Location", jobPath(typ, added[0].ID))
		writeJSON(w, http.StatusCreated, toJob(added[0]))
		return nil
	}
	out := make([]*Job, len(added))
	for i, j := range added {
		out[i] = toJob(j)
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// requestTrace is the request's context, holding the trace its enqueue
// continues: the request's own span, when a middleware made one, else
// the trace context of its traceparent and tracestate headers. Headers
// that are not valid W3C trace context, or several traceparent headers,
// are ignored (the enqueue starts a trace of its own); a tracestate
// that is not valid is dropped, one too long cut (fdbq.ParseTraceContext).
func requestTrace(r *http.Request) context.Context {
	ctx := r.Context()
	if trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	parents := r.Header.Values("Traceparent")
	if len(parents) != 1 {
		return ctx
	}
	tc, err := fdbq.ParseTraceContext(parents[0], strings.Join(r.Header.Values("Tracestate"), ","))
	if err != nil {
		return ctx
	}
	return tracing.ContextWith(ctx, tc)
}

// get: GET /v1/types/{type}/jobs/{id}.
func (s *Server) get(w http.ResponseWriter, r *http.Request) error {
	typ, id, err := pathJob(r)
	if err != nil {
		return err
	}
	j, err := s.q.Get(r.Context(), s.db, typ, id)
	if err != nil {
		return s.jobNotFound(r, typ, err)
	}
	writeJSON(w, http.StatusOK, toJob(j))
	return nil
}

// jobNotFound turns the not_found of a job of an unregistered type into
// unknown_type, the answer the type's other routes give (enqueue, list,
// accept, pause): the jobs layer finds no job there without telling why.
// The worker routes answer halt for a lock on such a type, as for any
// lock that is gone.
func (s *Server) jobNotFound(r *http.Request, typ string, err error) error {
	if !errors.Is(err, fdbq.ErrNotFound) {
		return err
	}
	if _, terr := s.q.GetType(r.Context(), s.db, typ); errors.Is(terr, fdbq.ErrUnknownType) {
		return terr
	}
	return err
}

// list: GET /v1/types/{type}/jobs?state=&limit=&cursor=&key=&id_prefix=&since=&until=.
// An unregistered type is a 404, not an empty page, so a typo in the type
// is noticed; a type whose settings cannot be read is registered, and its
// jobs listed. The entries whose job cannot be read are in the page's
// unreadable. The filters are fdbq.ListOptions': a filtered page may be
// short, or empty, with next set.
func (s *Server) list(w http.ResponseWriter, r *http.Request) error {
	typ, err := pathType(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	if err := onlyParams(q, "state", "limit", "cursor", "key", "id_prefix", "since", "until"); err != nil {
		return err
	}
	o := fdbq.ListOptions{State: fdbq.Pending, Cursor: q.Get("cursor"), Key: q.Get("key"), IDPrefix: q.Get("id_prefix")}
	if v := q.Get("state"); v != "" {
		st, err := parseState("state", v)
		if err != nil {
			return err
		}
		o.State = st
	}
	n, err := parseLimit(q, 1000)
	if err != nil {
		return err
	}
	o.Limit = n
	if o.Key != "" {
		if err := fdbq.ValidateKey(o.Key); err != nil {
			return nameInvalid("key", err)
		}
	}
	if o.IDPrefix != "" {
		if err := fdbq.ValidateIDPrefix(o.IDPrefix); err != nil {
			return nameInvalid("id_prefix", err)
		}
	}
	if o.Since, err = parseTime("since", q.Get("since")); err != nil {
		return err
	}
	if o.Until, err = parseTime("until", q.Get("until")); err != nil {
		return err
	}
	if !o.Since.IsZero() && !o.Until.IsZero() && o.Since.After(o.Until) {
		return invalid("since %s is after until %s", q.Get("since"), q.Get("until"))
	}
	page, err := kv.ReadTransact(r.Context(), s.db, func(tx kv.ReadTx) (*fdbq.Page, error) {
		if _, err := s.q.GetType(r.Context(), tx, typ); err != nil && !errors.Is(err, fdbq.ErrCorrupt) {
			return nil, err
		}
		return s.q.List(r.Context(), tx, typ, o)
	})
	if err != nil {
		return err
	}
	out := &Page{Jobs: make([]*Job, len(page.Jobs)), Next: page.Next}
	for i, j := range page.Jobs {
		out.Jobs[i] = toJob(j)
	}
	for _, u := range page.Unreadable {
		out.Unreadable = append(out.Unreadable, toUnreadable(u))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// remove: DELETE /v1/types/{type}/jobs/{id}; 204.
func (s *Server) remove(w http.ResponseWriter, r *http.Request) error {
	typ, id, err := pathJob(r)
	if err != nil {
		return err
	}
	if err := s.q.Remove(r.Context(), s.db, typ, id); err != nil {
		return s.jobNotFound(r, typ, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// cancel: POST …/{id}/cancel; answers the job as the cancel left it.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) error {
	return s.change(w, r, s.q.Cancel)
}

// requeue: POST …/{id}/requeue; answers the job as the requeue left it.
func (s *Server) requeue(w http.ResponseWriter, r *http.Request) error {
	return s.change(w, r, s.q.Requeue)
}

// change runs op on the job and reads the job back in the same
// transaction, so the answer is what op made.
func (s *Server) change(w http.ResponseWriter, r *http.Request, op func(context.Context, kv.Transactor, string, string) error) error {
	typ, id, err := pathJob(r)
	if err != nil {
		return err
	}
	j, err := kv.Transact(r.Context(), s.db, func(tx kv.Tx) (*fdbq.Job, error) {
		if err := op(r.Context(), tx, typ, id); err != nil {
			return nil, err
		}
		return s.q.Get(r.Context(), tx, typ, id)
	})
	if err != nil {
		return s.jobNotFound(r, typ, err)
	}
	writeJSON(w, http.StatusOK, toJob(j))
	return nil
}

// wait: GET …/{id}/wait?state=finished&timeout=30s. A long poll on the
// job's type's change key (fdbq.Queue.WaitOne); it answers when the job
// reaches the state (or finishes), or at the timeout with the job as it
// is then: the caller compares the state.
func (s *Server) wait(w http.ResponseWriter, r *http.Request) error {
	typ, id, err := pathJob(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	if err := onlyParams(q, "state", "timeout"); err != nil {
		return err
	}
	state := fdbq.Finished
	if v := q.Get("state"); v != "" {
		if state, err = parseState("state", v); err != nil {
			return err
		}
	}
	timeout := DefaultWait
	if v := q.Get("timeout"); v != "" {
		if timeout, err = parseWait("timeout", v); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	j, err := s.q.WaitOne(ctx, typ, id, state)
	if err != nil && ctx.Err() != nil && r.Context().Err() == nil {
		// The timeout passed (whatever error the store made of it): answer
		// the job as it is now.
		j, err = s.q.Get(r.Context(), s.db, typ, id)
	}
	if err != nil {
		return s.jobNotFound(r, typ, err)
	}
	writeJSON(w, http.StatusOK, toJob(j))
	return nil
}

// pathType returns the {type} of the path, checked with fdbq's rules for
// type names. The path is unescaped, so %ff arrives as a byte that is not
// UTF-8: refused here, before anything stores it or makes a metric label
// of it.
func pathType(r *http.Request) (string, error) {
	typ := r.PathValue("type")
	if err := fdbq.ValidateTypeName(typ); err != nil {
		return "", nameInvalid("", err)
	}
	return typ, nil
}

// pathJob returns the {type} of the path and the job's id, checked: the
// {id} of the path, or on the query form of the routes
// (/v1/types/{type}/job?id=…) the id parameter. The id is checked with
// fdbq's rules for naming a job that may exist (ValidateLookupID), so a
// job stored under an id new jobs may not have ("." or "..") is reached.
func pathJob(r *http.Request) (typ, id string, err error) {
	if typ, err = pathType(r); err != nil {
		return "", "", err
	}
	// A path wildcard never matches an empty segment: empty is the
	// query form.
	if id = r.PathValue("id"); id == "" {
		ids := r.URL.Query()["id"]
		if len(ids) != 1 {
			return "", "", invalid("id: give the job's id once, as the id query parameter (%d given)", len(ids))
		}
		id = ids[0]
	}
	if err := fdbq.ValidateLookupID(id); err != nil {
		return "", "", nameInvalid("", err)
	}
	return typ, id, nil
}

// fdbqDetail is what an fdbq error says is wrong, without the text of
// the sentinel it is (fdbq.Error's Detail), for an answer whose code
// says that already; an error of another kind is its whole message.
func fdbqDetail(err error) string {
	var fe *fdbq.Error
	if errors.As(err, &fe) && fe.Detail != "" {
		return fe.Detail
	}
	return err.Error()
}

// nameInvalid is the 400 for a name fdbq refused; field, when given,
// names where in the body it was.
func nameInvalid(field string, err error) *APIError {
	msg := fdbqDetail(err)
	if field != "" {
		msg = field + ": " + msg
	}
	return invalid("%s", msg)
}

// parseTime reads a query parameter's RFC 3339 time; "" is the zero
// time (no bound).
func parseTime(field, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		hint := ""
		if strings.Contains(v, " ") {
			hint = " (a '+' in a URL's query is a space: write it %2B, or give the time in UTC with Z)"
		}
		return time.Time{}, invalid("%s: %q is not an RFC 3339 time such as 2030-01-02T15:04:05Z%s", field, v, hint)
	}
	return t, nil
}

func parseState(field, v string) (fdbq.State, error) {
	switch st := fdbq.State(v); st {
	case fdbq.Pending, fdbq.Running, fdbq.Finished:
		return st, nil
	}
	return "", invalid("%s: %q is not a state (pending, running or finished)", field, v)
}

// onlyParams refuses query parameters the route does not know, so a
// misspelt one is not silently ignored, and any given more than once.
func onlyParams(q url.Values, known ...string) error { return params(q, nil, known...) }

// params is onlyParams for a route some of whose parameters (repeated)
// may be given more than once.
func params(q url.Values, repeated []string, known ...string) error {
	for k, vs := range q {
		if !slices.Contains(known, k) {
			return invalid("unknown query parameter %q (known: %v)", k, known)
		}
		if len(vs) > 1 && !slices.Contains(repeated, k) {
			// Which one a reader takes is not what the client meant.
			return invalid("%s: given %d times; give it once", k, len(vs))
		}
	}
	return nil
}

func jobPath(typ, id string) string {
	return "/v1/types/" + url.PathEscape(typ) + "/jobs/" + pathSegment(id)
}

// pathSegment escapes s as one segment of a URL path. The dot segments
// "." and "..", which url.PathEscape leaves as they are and a path's
// reader removes, are sent escaped (%2E, %2E%2E): the server's routes take
// that for the id, where a client that normalizes paths as browsers do
// would not, so browsers use the query form (/v1/types/{type}/job?id=…).
func pathSegment(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

// parseLimit reads the limit parameter of a listing: 0 when absent (the
// default), else an integer from 1 to most.
func parseLimit(q url.Values, most int) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, invalid("limit: %q must be an integer from 1 to %d", v, most)
	}
	return n, nil
}
