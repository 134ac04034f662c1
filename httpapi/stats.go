package httpapi

import (
	"errors"
	"net/http"
	"strconv"
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

// TypeHistory is the answer of GET /v1/types/{type}/history: the type's
// counts of ended attempts, minute by minute (fdbq.Queue.History).
type TypeHistory struct {
	Type string `json:"type"`
	// Minutes are every minute of the span, oldest first, those with no
	// counts too.
	Minutes []HistoryMinute `json:"minutes"`
	// Unreadable counts keys of the span that are not counters; they are
	// passed over.
	Unreadable int `json:"unreadable"`
}

// HistoryMinute is one minute of a type's history (fdbq.Minute).
type HistoryMinute struct {
	// At is the minute's start.
	At time.Time `json:"at"`
	// Succeeded, Failed and Canceled count the jobs that finished so.
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
	Canceled  int64 `json:"canceled"`
	// Retried counts failed attempts after which the job runs again;
	// Recycled, attempts the activity monitor took back, the job to run
	// again.
	Retried  int64 `json:"retried"`
	Recycled int64 `json:"recycled"`
}

// defaultHistoryMinutes is the span GET /v1/types/{type}/history reads
// when the request names none: the last hour.
const defaultHistoryMinutes = 60

// typeHistory: GET /v1/types/{type}/history?minutes=&until=. It reads the
// minutes up to until's (default: now, by the server's clock).
func (s *Server) typeHistory(w http.ResponseWriter, r *http.Request) error {
	typ, err := pathType(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	if err := onlyParams(q, "minutes", "until"); err != nil {
		return err
	}
	minutes := defaultHistoryMinutes
	if v := q.Get("minutes"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > fdbq.MaxHistoryMinutes {
			return invalid("minutes: %q must be an integer from 1 to %d", v, fdbq.MaxHistoryMinutes)
		}
		minutes = n
	}
	until, err := parseTime("until", q.Get("until"))
	if err != nil {
		return err
	}
	if until.IsZero() {
		until = s.q.Now()
	}
	from := until.Truncate(time.Minute).Add(-time.Duration(minutes-1) * time.Minute)
	// Each minute is answered as an RFC 3339 time, which has years 0000
	// to 9999 only.
	if from.UTC().Year() < 0 || until.UTC().Year() > 9999 {
		return invalid("until: %d minutes up to %s reach outside the years 0000 to 9999", minutes, until.UTC().Format(time.RFC3339))
	}
	h, err := s.q.History(r.Context(), s.db, typ, from, until)
	if err != nil {
		return err
	}
	out := TypeHistory{Type: typ, Minutes: make([]HistoryMinute, len(h.Minutes)), Unreadable: h.Unreadable}
	for i, m := range h.Minutes {
		out.Minutes[i] = HistoryMinute{At: m.At, Succeeded: m.Succeeded, Failed: m.Failed, Canceled: m.Canceled,
			Retried: m.Retried, Recycled: m.Recycled}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
