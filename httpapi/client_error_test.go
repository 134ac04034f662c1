package httpapi_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

// A request that gets no answer to read is an *httpapi.RequestError whose
// fields say which request and at what stage, with the cause unwrapped: a
// caller reports it without cutting its message apart.
func TestClientRequestErrorFields(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = httpapi.NewClient("http://"+addr, "", nil).Get(context.Background(), "email", "j1")
	var re *httpapi.RequestError
	if !errors.As(err, &re) || re.Stage != httpapi.StageSend || re.Method != http.MethodGet || re.Path != "/v1/types/email/jobs/j1" ||
		!errors.Is(err, syscall.ECONNREFUSED) || !strings.HasPrefix(err.Error(), "httpapi: GET /v1/types/email/jobs/j1: dial tcp ") {
		t.Fatalf("nothing listening: %#v (%v)", re, err)
	}

	// A 2xx answer that is not the JSON asked for.
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("{not json")) }))
	defer hs.Close()
	_, err = httpapi.NewClient(hs.URL, "", hs.Client()).Get(context.Background(), "email", "j1")
	if !errors.As(err, &re) || re.Stage != httpapi.StageDecode || re.Describe() != "GET /v1/types/email/jobs/j1: decoding the answer: "+re.Err.Error() {
		t.Fatalf("a body that does not decode: %#v (%v)", re, err)
	}

	// An id JSON cannot carry is refused before any request, with fdbq's
	// error.
	_, err = httpapi.NewClient(hs.URL, "", hs.Client()).Enqueue(context.Background(), "email", httpapi.NewJob{ID: "\xff"})
	if !errors.Is(err, fdbq.ErrInvalidJob) || errors.As(err, &re) {
		t.Fatalf("a non-UTF-8 id: %v", err)
	}
}

// An error answer cut short — ctx ends while its body is read — is a
// *RequestError with the cause, not an *APIError whose message is the
// fragment read: a caller must see errors.Is(err, context.Canceled).
func TestClientErrorAnswerCutShort(t *testing.T) {
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":"unava`))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hs.Close()
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err := httpapi.NewClient(hs.URL, "", hs.Client()).Get(ctx, "email", "j1")
	var re *httpapi.RequestError
	var ae *httpapi.APIError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &re) || errors.As(err, &ae) {
		t.Fatalf("ctx cancelled while an error answer was read: %T %v", err, err)
	}
}
