package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/handlers"
)

func mustHTTP(t *testing.T, o handlers.HTTPOptions) consumer.Handler[json.RawMessage, json.RawMessage] {
	t.Helper()
	h, err := handlers.HTTP(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHTTPPostsTheJob(t *testing.T) {
	type seen struct {
		method, path, contentType, key, auth string
		body                                 handlers.HTTPRequest
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{method: r.Method, path: r.URL.Path, contentType: r.Header.Get("Content-Type"), key: r.Header.Get("Idempotency-Key"), auth: r.Header.Get("Authorization")}
		if err := json.NewDecoder(r.Body).Decode(&s.body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- s
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"thumbnail": "t.png"}`)
	}))
	defer srv.Close()

	h := mustHTTP(t, handlers.HTTPOptions{URL: srv.URL + "/hooks/resize", Headers: map[string]string{"Authorization": "Bearer s3cret"}})
	res, err := h(context.Background(), job(`{"width": 640}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != `{"thumbnail": "t.png"}` {
		t.Fatalf("result %s", res)
	}
	s := <-got
	if s.method != http.MethodPost || s.path != "/hooks/resize" || s.contentType != "application/json" {
		t.Errorf("request %s %s (%s)", s.method, s.path, s.contentType)
	}
	if s.key != "job-1/2" {
		t.Errorf("Idempotency-Key %q, want job-1/2", s.key)
	}
	if s.auth != "Bearer s3cret" {
		t.Errorf("Authorization %q: the configured header was not sent", s.auth)
	}
	if s.body.ID != "job-1" || s.body.Type != "resize" || s.body.Attempt != 2 || string(s.body.Data) != `{"width":640}` {
		t.Errorf("body %+v (data %s)", s.body, s.body.Data)
	}
}

func TestHTTPResults(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"text body becomes a string", http.StatusOK, "accepted\n", `"accepted"`},
		{"empty body is null", http.StatusNoContent, "", `null`},
		{"any 2xx", http.StatusAccepted, `[1,2]`, `[1,2]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(c.status)
				io.WriteString(w, c.body)
			}))
			defer srv.Close()
			res, err := mustHTTP(t, handlers.HTTPOptions{URL: srv.URL})(context.Background(), job(`null`))
			if err != nil || string(res) != c.want {
				t.Fatalf("result %s, %v; want %s", res, err, c.want)
			}
		})
	}
}

func TestHTTPNon2xxFails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "quota exceeded "+strings.Repeat("x", 4096), http.StatusTooManyRequests)
	}))
	defer srv.Close()
	_, err := mustHTTP(t, handlers.HTTPOptions{URL: srv.URL + "/hook?token=s3cret"})(context.Background(), job(`null`))
	if err == nil {
		t.Fatal("a 429 succeeded")
	}
	msg := err.Error()
	if !strings.Contains(msg, "429 Too Many Requests: quota exceeded") {
		t.Errorf("error %q: want the status and the start of the body", msg)
	}
	if strings.Contains(msg, "s3cret") {
		t.Errorf("error %q shows the URL's query", msg)
	}
	if len(msg) > 1024 {
		t.Errorf("error is %d bytes: the body excerpt is not bounded", len(msg))
	}
}

func TestHTTPTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	defer srv.Close()
	defer close(release)
	_, err := mustHTTP(t, handlers.HTTPOptions{URL: srv.URL, Timeout: 50 * time.Millisecond})(context.Background(), job(`null`))
	if err == nil || !strings.Contains(err.Error(), "no response within 50ms") {
		t.Fatalf("error %v, want the timeout", err)
	}
}

func TestHTTPJobContextEnds(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithCancelCause(context.Background())
	halted := errors.New("halted by the test")
	go func() {
		<-arrived
		cancel(halted)
	}()
	_, err := mustHTTP(t, handlers.HTTPOptions{URL: srv.URL})(ctx, job(`null`))
	if !errors.Is(err, halted) {
		t.Fatalf("error %v, want the job context's cause", err)
	}
}

func TestHTTPResponseLimit(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `"`+strings.Repeat("x", 200)+`"`)
	}))
	defer srv.Close()
	_, err := mustHTTP(t, handlers.HTTPOptions{URL: srv.URL, MaxResponse: 100})(context.Background(), job(`null`))
	if !errors.Is(err, handlers.ErrOutputTooLarge) {
		t.Fatalf("error %v, want ErrOutputTooLarge", err)
	}
	res, err := mustHTTP(t, handlers.HTTPOptions{URL: srv.URL, MaxResponse: 202})(context.Background(), job(`null`))
	if err != nil || len(res) != 202 {
		t.Fatalf("body at the limit: %d bytes, %v", len(res), err)
	}
}

func TestHTTPTransportError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	_, err := mustHTTP(t, handlers.HTTPOptions{URL: url})(context.Background(), job(`null`))
	if err == nil || !strings.Contains(err.Error(), "POST "+url) {
		t.Fatalf("error %v, want one naming the URL", err)
	}
}

func TestHTTPBadOptions(t *testing.T) {
	for _, c := range []struct {
		name string
		o    handlers.HTTPOptions
		want string
	}{
		{"no url", handlers.HTTPOptions{}, "url is empty"},
		{"unparsable url", handlers.HTTPOptions{URL: "http://[::1"}, "url:"},
		{"wrong scheme", handlers.HTTPOptions{URL: "ftp://example.com/x"}, "scheme must be http or https"},
		{"no host", handlers.HTTPOptions{URL: "http:///path"}, "has no host"},
		{"negative timeout", handlers.HTTPOptions{URL: "http://example.com", Timeout: -time.Second}, "timeout -1s is negative"},
		{"negative max response", handlers.HTTPOptions{URL: "http://example.com", MaxResponse: -1}, "max response -1 is negative"},
		{"max response over the result limit", handlers.HTTPOptions{URL: "http://example.com", MaxResponse: 1 << 20}, "above a job result's limit"},
		{"bad header name", handlers.HTTPOptions{URL: "http://example.com", Headers: map[string]string{"X Bad": "v"}}, `bad header name "X Bad"`},
		{"header value with a line break", handlers.HTTPOptions{URL: "http://example.com", Headers: map[string]string{"X-A": "v\r\nX-B: w"}}, "line break"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := handlers.HTTP(c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}
