package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// DefaultMaxStreams is Options.MaxStreams when it is zero.
const DefaultMaxStreams = 64

// StreamKeepalive is how long an event stream stays silent at most: past
// it the server sends a comment line, so that proxies and clients see the
// connection alive.
const StreamKeepalive = 15 * time.Second

// streamWriteTimeout bounds one write to an event stream: a client that
// reads nothing for so long is disconnected (its cursor lets it resume).
const streamWriteTimeout = 30 * time.Second

// streamRetryMs is the reconnection delay the stream asks of an
// EventSource.
const streamRetryMs = 2000

// Event is one event of GET /v1/events, as its data line carries it.
type Event struct {
	// Kind is "job", "reset" or "ready" (the SSE event name).
	Kind string `json:"-"`
	// Cursor is the event's position (the SSE id): resume after it with
	// the Last-Event-ID header or the cursor parameter.
	Cursor string `json:"cursor"`
	// A job event: the job, its state after the change ("removed": it
	// was removed), outcome, attempts, and when it changed.
	Type     string     `json:"type,omitempty"`
	ID       string     `json:"id,omitempty"`
	State    string     `json:"state,omitempty"`
	Outcome  string     `json:"outcome,omitempty"`
	Attempts int        `json:"attempts,omitempty"`
	At       *time.Time `json:"at,omitempty"`
	// Reason says why a reset came: the events before Cursor may have
	// been lost, so what the client shows has to be read again.
	Reason string `json:"reason,omitempty"`
}

// events serves GET /v1/events: a server-sent event stream of job
// changes, of the types named by the type parameters (none: every type),
// from the cursor of Last-Event-ID or the cursor parameter (none: from
// now). The first event, "ready", carries the stream's starting cursor.
func (s *Server) events(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	// A misspelt type parameter would follow every type.
	if err := params(q, []string{"type"}, "type", "cursor"); err != nil {
		return err
	}
	types := q["type"]
	if len(types) > fdbq.MaxFollowTypes {
		return invalid("type: %d types named, at most %d may be followed at once", len(types), fdbq.MaxFollowTypes)
	}
	for _, t := range types {
		if err := fdbq.ValidateTypeName(t); err != nil {
			return invalid("type: %v", err)
		}
	}
	from := r.Header.Get("Last-Event-ID")
	field := "Last-Event-ID"
	if from == "" {
		from, field = q.Get("cursor"), "cursor"
	}
	cursor, err := fdbq.ParseCursor(from)
	if err != nil {
		return invalid("%s: %v", field, err)
	}
	if r.Method == http.MethodHead {
		// What a GET would answer, without the stream: a HEAD has no
		// body to hold the stream and would otherwise hold its slot.
		setStreamHeaders(w.Header())
		w.WriteHeader(http.StatusOK)
		return nil
	}
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		return &APIError{Status: http.StatusServiceUnavailable, Code: CodeBusy,
			Message: fmt.Sprintf("the server already serves %d event streams; try again later", cap(s.streams))}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	rc := http.NewResponseController(w)
	bw := bufio.NewWriter(w)
	started := false
	err = s.q.Follow(ctx, fdbq.FollowOptions{Types: types, After: cursor, Idle: StreamKeepalive}, func(e fdbq.Event) error {
		if !started {
			setStreamHeaders(w.Header())
			w.WriteHeader(http.StatusOK)
			fmt.Fprintf(bw, "retry: %d\n\n", streamRetryMs)
			started = true
		}
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		writeEvent(bw, e)
		if err := bw.Flush(); err != nil {
			return err
		}
		return rc.Flush()
	})
	if !started {
		if errors.Is(err, fdbq.ErrInvalidJob) {
			return invalid("type: %v", err)
		}
		if errors.Is(err, fdbq.ErrTooManyTypes) {
			return &APIError{Status: http.StatusUnprocessableEntity, Code: CodeTooManyTypes, Message: err.Error()}
		}
		if err == nil || ctx.Err() != nil && r.Context().Err() == nil {
			return &APIError{Status: http.StatusServiceUnavailable, Code: CodeNotReady, Message: "the server is stopping"}
		}
		return err
	}
	if ctx.Err() == nil && err != nil {
		// The client is still there: say why the stream ends; it
		// resumes from its last cursor.
		s.log.Warn("httpapi: event stream ended", "err", err)
		b, _ := json.Marshal(map[string]string{"error": err.Error()})
		fmt.Fprintf(bw, "event: error\ndata: %s\n\n", b)
		_ = bw.Flush()
		_ = rc.Flush()
	}
	return nil
}

// writeEvent writes e in the event stream format.
func writeEvent(w io.Writer, e fdbq.Event) {
	if e.Kind == fdbq.EventIdle {
		io.WriteString(w, ": keepalive\n\n")
		return
	}
	out := Event{Cursor: e.Cursor.String()}
	switch e.Kind {
	case fdbq.EventJob:
		at := e.At
		out.Type, out.ID, out.State, out.Outcome, out.Attempts, out.At = e.Type, e.ID, string(e.State), string(e.Outcome), e.Attempts, &at
	case fdbq.EventReset:
		out.Reason = e.Reason
	}
	b, _ := json.Marshal(out)
	fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", out.Cursor, e.Kind, b)
}

// Events follows GET /v1/events: the changes of the jobs of types (none:
// every type) after cursor ("": from now), each passed to fn, until ctx
// ends, fn returns an error (returned), or the stream ends (a
// *RequestError; resume with the last event's Cursor). A "reset" event
// says the events before it may have been lost: read again what depends
// on them.
func (c *Client) Events(ctx context.Context, types []string, cursor string, fn func(Event) error) error {
	const path = "/v1/events"
	q := url.Values{}
	for _, t := range types {
		q.Add("type", t)
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return &RequestError{Method: http.MethodGet, Path: path, Stage: StageSend, Err: err}
	}
	req.Header.Set("Accept", "text/event-stream")
	if cursor != "" {
		req.Header.Set("Last-Event-ID", cursor)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return &RequestError{Method: http.MethodGet, Path: path, Stage: StageSend, Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		e := &APIError{Status: resp.StatusCode}
		if json.Unmarshal(b, e) != nil || e.Code == "" {
			e.Code, e.Message = http.StatusText(resp.StatusCode), strings.TrimSpace(string(b))
		}
		return e
	}
	err = readEvents(resp.Body, fn)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var re *RequestError
	if err != nil && !errors.As(err, &re) {
		return err // fn's
	}
	if err == nil {
		err = &RequestError{Method: http.MethodGet, Path: path, Stage: StageDecode, Err: io.ErrUnexpectedEOF}
	}
	return err
}

// maxEventLine bounds a line of an event stream the client reads.
const maxEventLine = 1 << 20

// readEvents parses an event stream, calling fn with each event that has
// data; a stream error event ends it with a *RequestError.
func readEvents(r io.Reader, fn func(Event) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxEventLine)
	var name, data string
	decodeErr := func(err error) error {
		return &RequestError{Method: http.MethodGet, Path: "/v1/events", Stage: StageDecode, Err: err}
	}
	for sc.Scan() {
		line := sc.Text()
		if line != "" {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				name = value
			case "data":
				data = value
			}
			continue
		}
		if data == "" {
			name = ""
			continue
		}
		if name == "error" {
			var m struct{ Error string }
			_ = json.Unmarshal([]byte(data), &m)
			return decodeErr(fmt.Errorf("the server ended the stream: %s", m.Error))
		}
		var e Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			return decodeErr(fmt.Errorf("event %q: %w", name, err))
		}
		e.Kind = name
		if e.Kind == "" {
			e.Kind = "message"
		}
		if err := fn(e); err != nil {
			return err
		}
		name, data = "", ""
	}
	if err := sc.Err(); err != nil {
		return decodeErr(err)
	}
	return nil
}

// setStreamHeaders sets the headers of an event stream's answer.
func setStreamHeaders(h http.Header) {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
}
