package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
)

// TypeStats is the answer of GET /v1/types/{type}/stats: what the store
// can tell about a type cheaply, beyond the counts of GET /v1/types.
type TypeStats struct {
	Type string `json:"type"`
	// OldestDueAt is when the pending job that has been due the longest
	// became due (fdbq.Queue.OldestDue); absent when no pending job is
	// due.
	OldestDueAt *time.Time `json:"oldest_due_at,omitempty"`
	// OldestDueAge is how long ago that was, in seconds; 0 when absent.
	OldestDueAge float64 `json:"oldest_due_age"`
}

// typeStats: GET /v1/types/{type}/stats. OldestDue reads one key per
// priority band, never the queue.
func (s *Server) typeStats(w http.ResponseWriter, r *http.Request) error {
	typ, err := pathType(r)
	if err != nil {
		return err
	}
	at, err := kv.ReadTransact(r.Context(), s.db, func(tx kv.ReadTx) (time.Time, error) {
		if _, err := s.q.GetType(r.Context(), tx, typ); err != nil && !errors.Is(err, fdbq.ErrCorrupt) {
			return time.Time{}, err
		}
		return s.q.OldestDue(r.Context(), tx, typ)
	})
	if err != nil {
		return err
	}
	out := TypeStats{Type: typ}
	if !at.IsZero() {
		out.OldestDueAt = &at
		out.OldestDueAge = max(time.Since(at).Seconds(), 0)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
