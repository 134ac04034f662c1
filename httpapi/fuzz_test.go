package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

// checkDecodeError: a decoder either succeeds or answers a 4xx; an
// oversized body is an *http.MaxBytesError, which the server answers 413.
func checkDecodeError(t *testing.T, body []byte, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return
	}
	var ae *httpapi.APIError
	if !errors.As(err, &ae) || ae.Status < 400 || ae.Status > 499 || ae.Code == "" || ae.Message == "" {
		t.Fatalf("body %q: error %v (%T) is not a 4xx APIError", body, err, err)
	}
}

// limited reads b through the limit a server puts on bodies.
func limited(b []byte) io.Reader {
	return http.MaxBytesReader(nil, io.NopCloser(bytes.NewReader(b)), 4096)
}

func FuzzDecodeEnqueue(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"id":"a","data":{"x":[1,2]},"priority":-3,"max_attempts":2,"scheduled_at":"2030-01-02T15:04:05.123Z"}`,
		`[{"data":1},{"id":"b"}]`, `[]`, `[{}`, `{"data":}`, `{"priority":1e99}`, `{"scheduled_at":"2030-13-45T99:00:00Z"}`,
		`null`, `[null]`, `"x"`, ` `, `{"id":"a"} x`, `{"data":"\ud800"}`, `[[{}]]`,
		`{"id":"\ud800"}`, `{"id":"\ud83d\ude42"}`, "{\"id\":\"\xff\"}", `{"id":"\ufffd"}`, `{"id":"a\u0001"}`, `[{"id":"\u0085"}]`,
		`{"key":"tenant-7"}`, `{"key":""}`, `{"key":"a\u0001"}`, `{"key":"\ud800"}`, "{\"key\":\"\xff\"}", `[{"key":"a"},{"key":7}]`,
		`{"data":{"a":1},"unique":{"fields":["a"],"states":["finished"],"window":"1h","on_duplicate":"refuse"}}`,
		`{"unique":{}}`, `{"unique":null}`, `{"unique":{"window":"-1s"}}`, `{"unique":{"states":[1]}}`, `{"unique":{"fields":["\ud800"]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		jobs, _, err := httpapi.DecodeEnqueue(limited(body), "email")
		checkDecodeError(t, body, err)
		if err != nil {
			return
		}
		if len(jobs) == 0 {
			t.Fatalf("body %q decoded to no jobs without an error", body)
		}
		for _, j := range jobs {
			if j.Type != "email" || j.MaxAttempts < 0 {
				t.Fatalf("body %q decoded to %+v", body, j)
			}
			if j.ID != "" && fdbq.ValidateID(j.ID) != nil {
				t.Fatalf("body %q decoded to id %q, which fdbq refuses", body, j.ID)
			}
			if u := j.Unique; u != nil && (u.Window < 0 || u.OnDuplicate > fdbq.DuplicateRefuse || len(u.Fields) > fdbq.MaxUniqueFields) {
				t.Fatalf("body %q decoded to unique options %+v, which fdbq refuses", body, u)
			}
			if j.Key != "" && fdbq.ValidateKey(j.Key) != nil {
				t.Fatalf("body %q decoded to key %q, which fdbq refuses", body, j.Key)
			}
			// A U+FFFD in an id or a key was sent as one, not made by the
			// decoder.
			if strings.ContainsRune(j.ID+j.Key, utf8.RuneError) && !bytes.Contains(body, []byte("\uFFFD")) && !bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`)) {
				t.Fatalf("body %q decoded to id %q, key %q: the decoder replaced something", body, j.ID, j.Key)
			}
		}
	})
}

func FuzzDecodeAccept(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"max":10,"wait":"5s"}`, `{"max":-1}`, `{"wait":"-1s"}`, `{"wait":"9999999999h"}`, `{"max":"1"}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		o, err := httpapi.DecodeAccept(limited(body))
		checkDecodeError(t, body, err)
		if err == nil && (o.Max < 1 || o.Max > httpapi.MaxAccept || o.Timeout < 0 || o.Timeout > httpapi.MaxWait) {
			t.Fatalf("body %q decoded to %+v", body, o)
		}
	})
}

func FuzzDecodeWorkerBodies(f *testing.F) {
	for _, s := range []string{
		`{"lock":"l"}`, `{"lock":"l","progress":{"p":1},"data":[1]}`, `{"lock":"l","result":"ok"}`,
		`{"lock":"l","error":"boom"}`, `{}`, `{"lock":1}`, `{"lock":"l","result":}`, `{"lock":"l"}{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		hb, err := httpapi.DecodeHeartbeat(limited(body))
		checkDecodeError(t, body, err)
		if err == nil && hb.Lock == "" {
			t.Fatalf("heartbeat %q without a lock accepted", body)
		}
		fin, err := httpapi.DecodeFinish(limited(body))
		checkDecodeError(t, body, err)
		if err == nil && fin.Lock == "" {
			t.Fatalf("finish %q without a lock accepted", body)
		}
		fail, err := httpapi.DecodeFail(limited(body))
		checkDecodeError(t, body, err)
		if err == nil && fail.Lock == "" {
			t.Fatalf("fail %q without a lock accepted", body)
		}
	})
}

func FuzzDecodeSettings(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"activity_timeout":"1s","retry":{"max_attempts":3,"backoff":"linear","base":"1s","max":"1m"},"paused":true,"retention":"0s"}`,
		`{"retention":"-1h"}`, `{"retry":{"max_attempts":0}}`, `{"retry":null}`, `{"activity_timeout":5}`,
		`{"zones":4,"max_running":10,"keys":{"a":{"weight":2,"max_starts":5,"per":"1s"}},"key_default":{"max_running":1}}`,
		`{"keys":{"a":{"max_starts":5}}}`, `{"keys":{"":{}}}`, `{"keys":null}`, `{"key_default":{"per":"-1s"}}`, `{"zones":-1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := httpapi.DecodeSettings(limited(body), fdbq.DefaultTypeSettings())
		checkDecodeError(t, body, err)
		if err == nil {
			if verr := s.Validate(); verr != nil {
				t.Fatalf("body %q decoded to invalid settings %+v: %v", body, s, verr)
			}
		}
	})
}

// FuzzServer sends fuzzed bodies to the real server and store: whatever
// the body, the answer is never a 5xx.
func FuzzServer(f *testing.F) {
	e := newEnv(f, httpapi.Options{MaxBodyBytes: 8192})
	if _, err := e.q.Add(context.Background(), e.db, fdbq.NewJob{Type: "email", ID: "j"}); err != nil {
		f.Fatal(err)
	}
	routes := []struct{ method, path string }{
		{"POST", "/v1/types/email/jobs"},
		{"POST", "/v1/types/email/accept"},
		{"POST", "/v1/types/email/jobs/j/heartbeat"},
		{"POST", "/v1/types/email/jobs/j/finish"},
		{"POST", "/v1/types/email/jobs/j/fail"},
		{"PUT", "/v1/types/fuzzed"},
		{"POST", "/v1/workflows"},
	}
	for i, s := range []string{`{"id":"j","data":{"a":1}}`, `{"max":2}`, `{"lock":"x","progress":1}`, `{"lock":"x","result":{}}`, `{"lock":"x","error":"e"}`, `{"retention":"1h"}`,
		`[{"priority":-9223372036854775808}]`, `{"id":""}`, `[{"data":{"a":1},"unique":{"fields":["a"]}},{"data":{"a":1},"unique":{"on_duplicate":"refuse"}}]`, `{"data":"` + string(bytes.Repeat([]byte("a"), 100)) + `"}`,
		`{"jobs":[{"name":"a","type":"email"},{"name":"b","type":"email","depends_on":["a"]}]}`} {
		f.Add(uint8(i), []byte(s))
	}
	// POST /v1/workflows is route 6.
	f.Add(uint8(6), []byte(`{"jobs":[{"name":"a","type":"email"},{"name":"b","type":"email","depends_on":["a"]}]}`))
	f.Add(uint8(6), []byte(`{"id":"w","jobs":[{"name":"a","type":"nope"}]}`))
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		r := routes[int(which)%len(routes)]
		req := httptest.NewRequest(r.method, r.path, bytes.NewReader(body))
		req.RemoteAddr = "127.0.0.1:1"
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", r.method, r.path, body, rec.Code, rec.Body)
		}
	})
}

// FuzzKeysQuery sends fuzzed limit and after parameters to the keys route
// of a type with keyed jobs: never a 5xx; a 400 is invalid; a 200 is a
// page of at most limit keys, in order, after after.
func FuzzKeysQuery(f *testing.F) {
	e := newEnv(f, httpapi.Options{})
	ctx := context.Background()
	var jobs []fdbq.NewJob
	for i := range 20 {
		jobs = append(jobs, fdbq.NewJob{Type: "email", ID: fmt.Sprint("j", i), Key: fmt.Sprintf("k%02d", i%7)})
	}
	jobs = append(jobs, fdbq.NewJob{Type: "email", ID: "none"})
	if _, err := e.q.AddBatch(ctx, e.db, jobs); err != nil {
		f.Fatal(err)
	}
	for _, c := range [][2]string{{"", ""}, {"1", ""}, {"2", "k01"}, {"200", "k06"}, {"201", ""}, {"0", ""}, {"-1", ""},
		{"x", ""}, {"1", "\xff"}, {"1", "a\x01"}, {"", "\u202e"}, {"9999999999999999999999", ""}, {" 1", ""}, {"1", strings.Repeat("k", 129)}} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, limit, after string) {
		q := url.Values{}
		if limit != "" {
			q.Set("limit", limit)
		}
		if after != "" {
			q.Set("after", after)
		}
		req := httptest.NewRequest("GET", "http://127.0.0.1/v1/types/email/keys?"+q.Encode(), nil)
		req.RemoteAddr = "127.0.0.1:1"
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		switch rec.Code {
		case 200:
			var p httpapi.KeyPage
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("limit %q after %q: %v: %s", limit, after, err, rec.Body)
			}
			n, _ := strconv.Atoi(limit)
			if n == 0 {
				n = fdbq.DefaultKeysLimit
			}
			listed := 0
			for i, k := range p.Keys {
				if k.Key == "" {
					if i != 0 || after != "" {
						t.Fatalf("limit %q after %q: the jobs without a key at %d", limit, after, i)
					}
					continue
				}
				listed++
				if k.Key <= after || (i > 0 && k.Key <= p.Keys[i-1].Key) {
					t.Fatalf("limit %q after %q: keys out of order: %s", limit, after, rec.Body)
				}
			}
			if listed > n {
				t.Fatalf("limit %q after %q: %d keys", limit, after, listed)
			}
		case 400:
			var ae httpapi.APIError
			if json.Unmarshal(rec.Body.Bytes(), &ae) != nil || ae.Code != httpapi.CodeInvalid {
				t.Fatalf("limit %q after %q: %s", limit, after, rec.Body)
			}
		default:
			t.Fatalf("limit %q after %q: %d %s", limit, after, rec.Code, rec.Body)
		}
	})
}
