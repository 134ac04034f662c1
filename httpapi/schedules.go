package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
)

// Schedule is a periodic schedule as the API shows it: its definition
// (fdbq.Schedule) and its state.
type Schedule struct {
	Name     string `json:"name"`
	Type     string `json:"type,omitempty"`
	Cron     string `json:"cron,omitempty"`
	Timezone string `json:"timezone,omitempty"`
	// Every is the interval, as a Go duration ("30s"); empty for cron.
	Every       string          `json:"every,omitempty"`
	Data        json.RawMessage `json:"data,omitempty"`
	Priority    int             `json:"priority,omitempty"`
	Key         string          `json:"key,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	Missed      string          `json:"missed,omitempty"`
	MissedLimit int             `json:"missed_limit,omitempty"`
	Grace       string          `json:"grace,omitempty"`
	Paused      bool            `json:"paused"`
	// Next is the next tick to handle; absent when paused.
	Next *time.Time `json:"next,omitempty"`
	// Last: every tick at or before it is handled.
	Last *time.Time `json:"last,omitempty"`
	// LastJob is the id of the latest tick's job, LastFired its tick.
	LastJob   string     `json:"last_job,omitempty"`
	LastFired *time.Time `json:"last_fired,omitempty"`
	Fired     int64      `json:"fired"`
	Skipped   int64      `json:"skipped"`
	// Error says why the stored schedule cannot be read; then only Name
	// is set.
	Error string `json:"error,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func toSchedule(in *fdbq.ScheduleInfo) Schedule {
	if in.Err != nil {
		return Schedule{Name: in.Name, Error: fdbqDetail(in.Err)}
	}
	s := Schedule{Name: in.Name, Type: in.Job.Type, Cron: in.Cron, Timezone: in.Timezone, Data: in.Job.Data,
		Priority: in.Job.Priority, Key: in.Job.Key, MaxAttempts: in.Job.MaxAttempts, Missed: in.Missed.String(),
		MissedLimit: in.MissedLimit, Grace: in.Grace.String(), Paused: in.Paused, Next: timePtr(in.Next),
		Last: timePtr(in.Last), LastJob: in.LastJob, LastFired: timePtr(in.LastFired), Fired: in.Fired, Skipped: in.Skipped}
	if in.Every != 0 {
		s.Every = in.Every.String()
	}
	return s
}

// schedulesAnswer is the answer of GET /v1/schedules.
type schedulesAnswer struct {
	Schedules []Schedule `json:"schedules"`
}

func pathSchedule(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if err := fdbq.ValidateScheduleName(name); err != nil {
		return "", invalid("%s", fdbqDetail(err))
	}
	return name, nil
}

// schedules: GET /v1/schedules.
func (s *Server) schedules(w http.ResponseWriter, r *http.Request) error {
	list, err := s.q.Schedules(r.Context(), s.db)
	if err != nil {
		return err
	}
	out := schedulesAnswer{Schedules: []Schedule{}}
	for _, in := range list {
		out.Schedules = append(out.Schedules, toSchedule(in))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// schedule: GET /v1/schedules/{name}.
func (s *Server) schedule(w http.ResponseWriter, r *http.Request) error {
	name, err := pathSchedule(r)
	if err != nil {
		return err
	}
	in, err := s.q.GetSchedule(r.Context(), s.db, name)
	if err != nil {
		return err
	}
	if in.Err != nil {
		return in.Err
	}
	writeJSON(w, http.StatusOK, toSchedule(in))
	return nil
}

// pauseSchedule: POST /v1/schedules/{name}/pause; answers the schedule.
func (s *Server) pauseSchedule(w http.ResponseWriter, r *http.Request) error {
	return s.changeSchedule(w, r, s.q.PauseSchedule)
}

// resumeSchedule: POST /v1/schedules/{name}/resume; answers the schedule.
func (s *Server) resumeSchedule(w http.ResponseWriter, r *http.Request) error {
	return s.changeSchedule(w, r, s.q.ResumeSchedule)
}

func (s *Server) changeSchedule(w http.ResponseWriter, r *http.Request, op func(context.Context, kv.Transactor, string) error) error {
	name, err := pathSchedule(r)
	if err != nil {
		return err
	}
	in, err := kv.Transact(r.Context(), s.db, func(tx kv.Tx) (*fdbq.ScheduleInfo, error) {
		if err := op(r.Context(), tx, name); err != nil {
			return nil, err
		}
		return s.q.GetSchedule(r.Context(), tx, name)
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSchedule(in))
	return nil
}

// deleteSchedule: DELETE /v1/schedules/{name}; 204.
func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request) error {
	name, err := pathSchedule(r)
	if err != nil {
		return err
	}
	if err := s.q.DeleteSchedule(r.Context(), s.db, name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// Schedules lists the periodic schedules.
func (c *Client) Schedules(ctx context.Context) ([]Schedule, error) {
	var out schedulesAnswer
	if err := c.do(ctx, http.MethodGet, "/v1/schedules", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Schedules, nil
}

// Schedule returns one periodic schedule.
func (c *Client) Schedule(ctx context.Context, name string) (*Schedule, error) {
	var out Schedule
	if err := c.do(ctx, http.MethodGet, schedulePath(name), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PauseSchedule stops a schedule's ticks until ResumeSchedule.
func (c *Client) PauseSchedule(ctx context.Context, name string) (*Schedule, error) {
	var out Schedule
	if err := c.do(ctx, http.MethodPost, schedulePath(name)+"/pause", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ResumeSchedule lets a paused schedule tick again from now.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (*Schedule, error) {
	var out Schedule
	if err := c.do(ctx, http.MethodPost, schedulePath(name)+"/resume", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSchedule removes a schedule; the jobs its ticks added stay.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, schedulePath(name), nil, nil, nil)
}

func schedulePath(name string) string {
	return "/v1/schedules/" + url.PathEscape(name)
}
