package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jobstage/jobstage/fdbq"
)

// Client calls the API of a jobstage server. Its methods mirror the
// routes; a non-2xx answer is an *APIError. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

// NewClient returns a client of the server at baseURL (such as
// "http://127.0.0.1:8080") that sends token as a bearer token when it is
// not empty. hc nil means a client without a timeout: give a long-polling
// call (Accept, Wait) its bound with its ctx, or an hc whose Timeout is
// longer than MaxWait.
func NewClient(baseURL, token string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, hc: hc}
}

// Enqueue adds one job of type typ (or resubmits the job with its id).
// An id that is not UTF-8 is refused before anything is sent (see
// checkIDs).
func (c *Client) Enqueue(ctx context.Context, typ string, j NewJob) (*Job, error) {
	if err := checkIDs([]NewJob{j}); err != nil {
		return nil, err
	}
	var out Job
	if err := c.do(ctx, http.MethodPost, typePath(typ)+"/jobs", nil, j, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// EnqueueBatch adds jobs of type typ in one transaction: all or none.
func (c *Client) EnqueueBatch(ctx context.Context, typ string, jobs []NewJob) ([]*Job, error) {
	if jobs == nil {
		jobs = []NewJob{}
	}
	if err := checkIDs(jobs); err != nil {
		return nil, err
	}
	var out []*Job
	if err := c.do(ctx, http.MethodPost, typePath(typ)+"/jobs", nil, jobs, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// checkIDs refuses ids that are not UTF-8, with fdbq's error (an
// *fdbq.Error of ErrInvalidJob), before any request: JSON cannot
// carry them (encoding/json would send U+FFFD instead), so the server
// would store the job under an id other than the caller's.
func checkIDs(jobs []NewJob) error {
	for _, j := range jobs {
		if !utf8.ValidString(j.ID) {
			return fdbq.ValidateID(j.ID)
		}
	}
	return nil
}

// Get returns a job.
func (c *Client) Get(ctx context.Context, typ, id string) (*Job, error) {
	var out Job
	if err := c.do(ctx, http.MethodGet, jobPath(typ, id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// List returns a page of the type's jobs in a state, filtered by o's
// filters: a filtered page may be short, or empty, with Next set.
func (c *Client) List(ctx context.Context, typ string, o ListOptions) (*Page, error) {
	q := url.Values{}
	if o.State != "" {
		q.Set("state", string(o.State))
	}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if o.Key != "" {
		q.Set("key", o.Key)
	}
	if o.IDPrefix != "" {
		q.Set("id_prefix", o.IDPrefix)
	}
	if !o.Since.IsZero() {
		q.Set("since", o.Since.Format(time.RFC3339Nano))
	}
	if !o.Until.IsZero() {
		q.Set("until", o.Until.Format(time.RFC3339Nano))
	}
	var out Page
	if err := c.do(ctx, http.MethodGet, typePath(typ)+"/jobs", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Keys returns a page of the type's fairness keys.
func (c *Client) Keys(ctx context.Context, typ string, o KeysOptions) (*KeyPage, error) {
	q := url.Values{}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	var out KeyPage
	if err := c.do(ctx, http.MethodGet, typePath(typ)+"/keys", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// History reads a type's ended attempts per minute: the minutes minutes
// (0: the server's default, 60) up to until's (zero: now, by the
// server's clock).
func (c *Client) History(ctx context.Context, typ string, minutes int, until time.Time) (*TypeHistory, error) {
	q := url.Values{}
	if minutes != 0 {
		q.Set("minutes", strconv.Itoa(minutes))
	}
	if !until.IsZero() {
		q.Set("until", until.UTC().Format(time.RFC3339Nano))
	}
	var out TypeHistory
	if err := c.do(ctx, http.MethodGet, typePath(typ)+"/history", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Cancel finishes a pending or running job as canceled and returns it.
func (c *Client) Cancel(ctx context.Context, typ, id string) (*Job, error) {
	var out Job
	if err := c.do(ctx, http.MethodPost, jobPath(typ, id)+"/cancel", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Requeue makes a failed or canceled job pending again and returns it.
func (c *Client) Requeue(ctx context.Context, typ, id string) (*Job, error) {
	var out Job
	if err := c.do(ctx, http.MethodPost, jobPath(typ, id)+"/requeue", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Delete removes a job in any state.
func (c *Client) Delete(ctx context.Context, typ, id string) error {
	return c.do(ctx, http.MethodDelete, jobPath(typ, id), nil, nil, nil)
}

// Wait blocks until the job reaches state (or finishes), or timeout (0:
// the server's DefaultWait; at most MaxWait) passes, and returns the job
// as it then is: compare its State to know which.
func (c *Client) Wait(ctx context.Context, typ, id string, state fdbq.State, timeout time.Duration) (*Job, error) {
	q := url.Values{}
	if state != "" {
		q.Set("state", string(state))
	}
	if timeout != 0 {
		q.Set("timeout", timeout.String())
	}
	var out Job
	if err := c.do(ctx, http.MethodGet, jobPath(typ, id)+"/wait", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Types lists the registered types with their settings and counts.
func (c *Client) Types(ctx context.Context) ([]*TypeInfo, error) {
	var out typesAnswer
	if err := c.do(ctx, http.MethodGet, "/v1/types", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Types, nil
}

// SetType registers a type or replaces its settings.
func (c *Client) SetType(ctx context.Context, name string, s TypeSettings) (*TypeInfo, error) {
	var out TypeInfo
	if err := c.do(ctx, http.MethodPut, typePath(name), nil, s, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Pause stops acceptance of a type's jobs.
func (c *Client) Pause(ctx context.Context, name string) (*TypeInfo, error) {
	var out TypeInfo
	if err := c.do(ctx, http.MethodPost, typePath(name)+"/pause", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Resume undoes Pause.
func (c *Client) Resume(ctx context.Context, name string) (*TypeInfo, error) {
	var out TypeInfo
	if err := c.do(ctx, http.MethodPost, typePath(name)+"/resume", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Accept takes up to o.Max due jobs of a type, waiting up to o.Wait for
// one; it may return none.
func (c *Client) Accept(ctx context.Context, typ string, o AcceptRequest) ([]*Lease, error) {
	var out acceptAnswer
	if err := c.do(ctx, http.MethodPost, typePath(typ)+"/accept", nil, o, &out); err != nil {
		return nil, err
	}
	return out.Jobs, nil
}

// Heartbeat renews the lease; progress, when set, replaces the job's
// progress. An *APIError with Code CodeHalt means the lock is gone.
func (c *Client) Heartbeat(ctx context.Context, l *Lease, progress json.RawMessage) error {
	return c.do(ctx, http.MethodPost, jobPath(l.Type, l.ID)+"/heartbeat", nil, HeartbeatRequest{Lock: l.Lock, Progress: progress}, nil)
}

// Finish ends the job successfully with result (JSON; may be empty).
func (c *Client) Finish(ctx context.Context, l *Lease, result json.RawMessage) error {
	return c.do(ctx, http.MethodPost, jobPath(l.Type, l.ID)+"/finish", nil, FinishRequest{Lock: l.Lock, Result: result}, nil)
}

// Fail records a failed attempt with its error message.
func (c *Client) Fail(ctx context.Context, l *Lease, message string) error {
	return c.do(ctx, http.MethodPost, jobPath(l.Type, l.ID)+"/fail", nil, FailRequest{Lock: l.Lock, Error: message}, nil)
}

// do sends one request with body (nil: none) as JSON and decodes a 2xx
// answer into out (nil: ignored).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return &RequestError{Method: method, Path: path, Stage: StageEncode, Err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return &RequestError{Method: method, Path: path, Stage: StageSend, Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return &RequestError{Method: method, Path: path, Stage: StageSend, Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if err != nil {
			// The answer was cut short (ctx ended, the connection
			// dropped): its message is not there to report, and the
			// cause must stay visible (errors.Is(err, context.Canceled)).
			return &RequestError{Method: method, Path: path, Stage: StageDecode, Err: fmt.Errorf("reading the HTTP %d answer: %w", resp.StatusCode, err)}
		}
		e := &APIError{Status: resp.StatusCode}
		if json.Unmarshal(b, e) != nil || e.Code == "" {
			e.Code = http.StatusText(resp.StatusCode)
			e.Message = strings.TrimSpace(string(b))
		}
		return e
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return &RequestError{Method: method, Path: path, Stage: StageDecode, Err: err}
	}
	return nil
}

func typePath(typ string) string {
	return "/v1/types/" + url.PathEscape(typ)
}
