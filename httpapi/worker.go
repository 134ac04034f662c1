package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
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
	replayed := false
	err = s.db.Transact(r.Context(), func(tx kv.Tx) error {
		before, getErr := s.q.Get(r.Context(), tx.Snapshot(), typ, id)
		if err := s.q.Finish(r.Context(), tx, lease(typ, id, b.Lock), b.Result); err != nil {
			return err
		}
		if getErr != nil {
			return getErr
		}
		replayed = isReplay(before)
		return nil
	})
	if err != nil {
		return err
	}
	if s.o.OnOutcome != nil && !replayed {
		s.o.OnOutcome(typ, "succeeded")
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
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
	// The job's state after the fail, read in the fail's transaction, says
	// whether it will run again.
	retried, replayed := false, false
	err = s.db.Transact(r.Context(), func(tx kv.Tx) error {
		before, getErr := s.q.Get(r.Context(), tx.Snapshot(), typ, id)
		if err := s.q.Fail(r.Context(), tx, lease(typ, id, b.Lock), b.Error); err != nil {
			return err
		}
		if getErr != nil {
			return getErr
		}
		j, err := s.q.Get(r.Context(), tx.Snapshot(), typ, id)
		if err != nil {
			return err
		}
		retried = j.State == fdbq.Pending
		replayed = isReplay(before)
		return nil
	})
	if err != nil {
		return err
	}
	if s.o.OnOutcome != nil && !replayed {
		outcome := "failed"
		if retried {
			outcome = "retried"
		}
		s.o.OnOutcome(typ, outcome)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// isReplay reports whether a finish or fail that fdbq accepted was a
// replay, from the job as it was, read in the same transaction before it:
// fdbq accepts one only from the lock that holds the running job, or from
// the lock that last ended its attempt when it is sent again (fdbq answers
// it as done and writes nothing). The job is not running then: an accept,
// the only way back to running, clears the record of the last lock, after
// which the same request is refused as a halt.
func isReplay(before *fdbq.Job) bool { return before != nil && before.State != fdbq.Running }

// lease rebuilds a worker's lease: Heartbeat, Finish and Fail use only the
// type, the id and the lock.
func lease(typ, id, lock string) *fdbq.Lease {
	return &fdbq.Lease{Job: fdbq.Job{Type: typ, ID: id}, Lock: lock}
}
