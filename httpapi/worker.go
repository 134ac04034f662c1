package httpapi

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// The handlers of the external-worker routes. A worker accepts jobs and
// gets each with a lock; it sends the lock back with every heartbeat,
// finish and fail. The server rebuilds the fdbq.Lease from the path's type
// and id and the body's lock: fdbq checks nothing else, so the worker
// needs no other state. A lock that is gone (the job was canceled,
// removed, recycled by the activity monitor, or finished) answers 409
// {"error":"halt"}, and nothing was written.

// releaseTimeout bounds the hand-back of jobs accepted for a client that
// went away.
const releaseTimeout = 5 * time.Second

// acceptAnswer is the answer of an accept.
type acceptAnswer struct {
	Jobs []*Lease `json:"jobs"`
}

// accept: POST /v1/types/{type}/accept {"max": n, "wait": "5s"}.
func (s *Server) accept(w http.ResponseWriter, r *http.Request) error {
	typ, err := pathType(r)
	if err != nil {
		return err
	}
	o, err := decodeAccept(r.Body)
	if err != nil {
		return err
	}
	if o.Holder == "" {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		if o.Holder = "http " + host; fdbq.ValidateHolder(o.Holder) != nil {
			o.Holder = "http"
		}
	}
	leases, err := s.q.Accept(r.Context(), typ, o)
	if err != nil {
		return err
	}
	if r.Context().Err() != nil && len(leases) > 0 {
		// The client left while its jobs were being taken: hand them back
		// now rather than leave them to the activity timeout.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), releaseTimeout)
		defer cancel()
		if err := s.q.Release(ctx, s.db, leases); err != nil {
			s.log.Warn("httpapi: releasing jobs accepted for a client that left", "type", typ, "jobs", len(leases), "err", err)
		}
		return r.Context().Err()
	}
	if s.o.OnAccept != nil && len(leases) > 0 {
		s.o.OnAccept(leases)
	}
	out := acceptAnswer{Jobs: make([]*Lease, len(leases))}
	for i, l := range leases {
		out.Jobs[i] = &Lease{Job: *toJob(&l.Job), Lock: l.Lock}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// heartbeat: POST …/{id}/heartbeat {"lock", "progress"?, "data"?}; 204.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) error {
	typ, id, err := pathJob(r)
	if err != nil {
		return err
	}
	b, err := decodeHeartbeat(r.Body)
	if err != nil {
		return err
	}
	if err := s.q.Heartbeat(r.Context(), s.db, lease(typ, id, b.Lock), fdbq.HeartbeatOptions{Data: b.Data, Progress: b.Progress}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// finish: POST …/{id}/finish {"lock", "result"?}; 204.
func (s *Server) finish(w http.ResponseWriter, r *http.Request) error {
	typ, id, err := pathJob(r)
	if err != nil {
		return err
	}
	b, err := decodeFinish(r.Body)
	if err != nil {
		return err
	}
	return s.end(w, r, typ, id, b.Lock, fdbq.Ending{How: fdbq.AttemptSucceeded, Result: b.Result})
}

// fail: POST …/{id}/fail {"lock", "error"}; 204. The type's retry policy
// decides whether the job runs again.
func (s *Server) fail(w http.ResponseWriter, r *http.Request) error {
	typ, id, err := pathJob(r)
	if err != nil {
		return err
	}
	b, err := decodeFail(r.Body)
	if err != nil {
		return err
	}
	return s.end(w, r, typ, id, b.Lock, fdbq.Ending{How: fdbq.AttemptFailed, Cause: b.Error})
}

// end commits an external worker's outcome and reports it once: what
// fdbq's End says it did (a failed attempt that runs again is "retried"),
// and nothing for a finish or fail sent again (End answers it as a
// replay and writes nothing).
func (s *Server) end(w http.ResponseWriter, r *http.Request, typ, id, lock string, e fdbq.Ending) error {
	d, err := s.q.End(r.Context(), s.db, lease(typ, id, lock), e)
	if err != nil {
		return err
	}
	if s.o.OnOutcome != nil && !d.Replayed {
		outcome := "succeeded"
		switch {
		case d.Retried:
			outcome = "retried"
		case e.How == fdbq.AttemptFailed:
			outcome = "failed"
		}
		s.o.OnOutcome(typ, outcome)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// lease rebuilds a worker's lease: Heartbeat, Finish and Fail use only the
// type, the id and the lock.
func lease(typ, id, lock string) *fdbq.Lease {
	return &fdbq.Lease{Job: fdbq.Job{Type: typ, ID: id}, Lock: lock}
}
