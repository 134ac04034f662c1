package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
)

// Defaults of HTTPOptions.
const (
	DefaultHTTPTimeout = 30 * time.Second
	DefaultMaxResponse = 64 << 10
)

// errorExcerpt bounds the part of a response body an error carries.
const errorExcerpt = 512

// HTTPOptions configure HTTP.
type HTTPOptions struct {
	// URL receives a POST per job attempt; http or https.
	URL string
	// Headers are added to every request (an Authorization header, say).
	Headers map[string]string
	// Timeout bounds one request, its body included; default
	// DefaultHTTPTimeout. The job's own timeout still applies.
	Timeout time.Duration
	// Client sends the requests; default a client of its own.
	Client *http.Client
	// MaxResponse bounds the response body kept as the job's result
	// (default DefaultMaxResponse, at most fdbq.MaxDataSize). A longer
	// success response fails the attempt with ErrOutputTooLarge.
	MaxResponse int
}

// HTTPRequest is the JSON body HTTP posts for each attempt.
type HTTPRequest struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Attempt int             `json:"attempt"`
	Data    json.RawMessage `json:"data"`
}

// HTTP returns a handler that POSTs each job, as an HTTPRequest in JSON, to
// a URL, with the header Idempotency-Key set to "<job id>/<attempt>" so that
// the server can recognize an attempt it already saw. A 2xx response
// succeeds with its body as the result (see the package documentation);
// any other status fails the attempt with the status and the start of the
// body; so does a transport error or the timeout.
func HTTP(o HTTPOptions) (consumer.Handler[json.RawMessage, json.RawMessage], error) {
	u, err := url.Parse(o.URL)
	switch {
	case o.URL == "":
		return nil, badOptions("http", "url is empty")
	case err != nil:
		return nil, badOptions("http", "url: %w", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, badOptions("http", "url %s: scheme must be http or https", redact(u))
	case u.Host == "":
		return nil, badOptions("http", "url %s has no host", redact(u))
	}
	switch {
	case o.Timeout < 0:
		return nil, badOptions("http", "timeout %v is negative", o.Timeout)
	case o.Timeout == 0:
		o.Timeout = DefaultHTTPTimeout
	}
	switch {
	case o.MaxResponse < 0:
		return nil, badOptions("http", "max response %d is negative", o.MaxResponse)
	case o.MaxResponse > fdbq.MaxDataSize:
		return nil, badOptions("http", "max response %d is above a job result's limit of %d bytes", o.MaxResponse, fdbq.MaxDataSize)
	case o.MaxResponse == 0:
		o.MaxResponse = DefaultMaxResponse
	}
	header := make(http.Header, len(o.Headers)+2)
	for k, v := range o.Headers {
		if !validHeaderName(k) {
			return nil, badOptions("http", "bad header name %q", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return nil, badOptions("http", "value of header %s contains a line break or NUL", k)
		}
		header.Set(k, v)
	}
	header.Set("Content-Type", "application/json")
	if header.Get("User-Agent") == "" {
		header.Set("User-Agent", "jobstage")
	}
	client := o.Client
	if client == nil {
		client = &http.Client{}
	}
	p := &poster{url: u.String(), shown: redact(u), header: header, timeout: o.Timeout, client: client, maxResponse: o.MaxResponse}
	return p.run, nil
}

type poster struct {
	url, shown  string
	header      http.Header
	timeout     time.Duration
	client      *http.Client
	maxResponse int
}

func (p *poster) run(ctx context.Context, job *consumer.Job[json.RawMessage]) (json.RawMessage, error) {
	data := job.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	body, err := json.Marshal(HTTPRequest{ID: job.ID, Type: job.Type, Attempt: job.Attempt, Data: data})
	if err != nil {
		return nil, fmt.Errorf("handlers: http: encode job: %w", err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, p.timeout, fmt.Errorf("handlers: http: POST %s: no response within %v", p.shown, p.timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("handlers: http: %w", err)
	}
	req.Header = maps.Clone(p.header)
	req.Header.Set("Idempotency-Key", job.ID+"/"+strconv.Itoa(job.Attempt))
	resp, err := p.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("handlers: http: POST %s: %w", p.shown, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(io.LimitReader(resp.Body, int64(p.maxResponse)+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("handlers: http: POST %s: reading the response: %w", p.shown, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		err := fmt.Errorf("handlers: http: POST %s: %s", p.shown, resp.Status)
		if b := bytes.TrimSpace(got); len(b) > 0 {
			err = fmt.Errorf("%w: %s", err, excerpt(b, errorExcerpt))
		}
		return nil, err
	}
	if len(got) > p.maxResponse {
		return nil, fmt.Errorf("%w: POST %s answered more than the %d bytes allowed", ErrOutputTooLarge, p.shown, p.maxResponse)
	}
	return asResult(got), nil
}

// redact shows a URL without its credentials and query, which may hold
// secrets, for errors that end up in job records and logs.
func redact(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.ForceQuery, c.Fragment = nil, "", false, ""
	return c.String()
}

// validHeaderName reports whether s is an HTTP token (RFC 9110 §5.6.2).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
