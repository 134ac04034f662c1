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
		!errors.Is(err, syscall.ECONNREFUSED) || !strings.HasPrefix(err.Error(), "httpapi: GET /v1/types/email/jobs/j1: ") {
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
