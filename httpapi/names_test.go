package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

// A type name that fdbq refuses is refused in every path, as a 400 that
// says what is wrong, and never registered: PUT /v1/types/%ff used to
// answer 201 and leave a type whose name is no metric label.
func TestNamesInPaths(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	long := strings.Repeat("t", fdbq.MaxTypeNameSize+1)
	for _, tc := range []struct {
		name, method, path, body string
		words                    []string
	}{
		{"type not UTF-8", "PUT", "/v1/types/%ff", "", []string{`type name "\xff" is not valid UTF-8 at byte 0`}},
		{"type cut short", "PUT", "/v1/types/e%E6%97", "", []string{"not valid UTF-8 at byte 1"}},
		{"type with a space", "PUT", "/v1/types/send%20email", "", []string{`type name "send email" has ' ' at byte 4`}},
		{"type with a slash", "PUT", "/v1/types/a%2Fb", "", []string{`has '/' at byte 1`}},
		{"type with a colon", "PUT", "/v1/types/a:b", "", []string{`has ':' at byte 1`}},
		{"type with a control character", "PUT", "/v1/types/a%00", "", []string{`has '\x00' at byte 1`}},
		{"type not ASCII", "PUT", "/v1/types/caf%C3%A9", "", []string{`has 'é' at byte 3`}},
		{"type starting with a dash", "PUT", "/v1/types/-x", "", []string{`starts with '-'`}},
		{"long type", "PUT", "/v1/types/" + long, "", []string{"129 bytes", "128"}},
		{"enqueue", "POST", "/v1/types/%ff/jobs", `{"data":1}`, []string{"type name", "byte 0"}},
		{"list", "GET", "/v1/types/%ff/jobs", "", []string{"type name"}},
		{"pause", "POST", "/v1/types/%ff/pause", "", []string{"type name"}},
		{"resume", "POST", "/v1/types/a%20b/resume", "", []string{"type name"}},
		{"accept", "POST", "/v1/types/%ff/accept", `{}`, []string{"type name"}},
		{"get, bad type", "GET", "/v1/types/%ff/jobs/a", "", []string{"type name"}},
		{"get, id not UTF-8", "GET", "/v1/types/email/jobs/a%ff", "", []string{`job id "a\xff" is not valid UTF-8 at byte 1`}},
		{"cancel, control id", "POST", "/v1/types/email/jobs/a%01/cancel", "", []string{`job id "a\x01" has a control character at byte 1`}},
		{"requeue, DEL id", "POST", "/v1/types/email/jobs/a%7F/requeue", "", []string{"control character at byte 1"}},
		{"delete, C1 id", "DELETE", "/v1/types/email/jobs/%C2%85", "", []string{`job id "\u0085" has a control character at byte 0`}},
		{"wait, surrogate id", "GET", "/v1/types/email/jobs/%ED%A0%80/wait", "", []string{"not valid UTF-8 at byte 0"}},
		{"finish, bad id", "POST", "/v1/types/email/jobs/%ff/finish", `{"lock":"l"}`, []string{"job id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, e.do(tc.method, tc.path, "", tc.body), http.StatusBadRequest, httpapi.CodeInvalid, tc.words...)
		})
	}
	types, err := e.q.Types(context.Background(), e.db)
	if err != nil || len(types) != 1 || types[0].Name != "email" {
		t.Fatalf("a refused name was registered: %v %v", types, err)
	}
	if n, _ := e.q.Count(context.Background(), e.db, "email", fdbq.Pending); n != 0 {
		t.Fatalf("%d jobs enqueued by refused requests", n)
	}

	// The characters the rules allow work in paths.
	for _, name := range []string{"send-email", "img.resize", "T_1", "0day"} {
		if a := e.do("PUT", "/v1/types/"+name, "", ""); a.status != http.StatusCreated {
			t.Fatalf("PUT /v1/types/%s: %d %s", name, a.status, a.body)
		}
		if a := e.do("POST", "/v1/types/"+name+"/jobs", "", `{"id":"a b/ü"}`); a.status != http.StatusCreated {
			t.Fatalf("enqueue to %s: %d %s", name, a.status, a.body)
		}
		if a := e.do("GET", "/v1/types/"+name+"/jobs/a%20b%2F%C3%BC", "", ""); a.status != http.StatusOK {
			t.Fatalf("get from %s: %d %s", name, a.status, a.body)
		}
	}
}

// An id in an enqueue body that JSON can carry but not as Unicode (raw
// bytes that are not UTF-8, a \u escape of half a surrogate pair) would be
// decoded as U+FFFD and stored under another id: it is refused, and so is
// one with a control character.
func TestNamesInBodies(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	for _, tc := range []struct {
		name, body string
		words      []string
	}{
		{"lone high surrogate", `{"id":"a\ud800"}`, []string{"id: job id has \\ud800 at byte 1", "surrogate"}},
		{"lone low surrogate", `{"id":"\ud83d\ude42\udc00"}`, []string{"\\udc00 at byte 4"}},
		{"high surrogate then no low one", `{"id":"\ud800\u0041"}`, []string{"\\ud800 at byte 0"}},
		{"raw byte not UTF-8", "{\"id\":\"a\xff\"}", []string{"id: job id is not valid UTF-8 at byte 1"}},
		{"raw surrogate", "{\"id\":\"\xed\xa0\x80\"}", []string{"not valid UTF-8 at byte 0"}},
		{"after escapes", "{\"id\":\"\\n\\u00e9\xff\"}", []string{"not valid UTF-8 at byte 3"}},
		{"in a batch", `[{"id":"ok"},{"id":"x\udfff"}]`, []string{"[1].id:", "\\udfff at byte 1"}},
		{"control character", `{"id":"a\u0001"}`, []string{`id: job id "a\x01" has a control character at byte 1`}},
		{"C1 control character", `[{},{"id":"\u0085"}]`, []string{`[1].id: job id "\u0085" has a control character at byte 0`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, e.do("POST", "/v1/types/email/jobs", "", tc.body), http.StatusBadRequest, httpapi.CodeInvalid, tc.words...)
		})
	}
	if n, _ := e.q.Count(context.Background(), e.db, "email", fdbq.Pending); n != 0 {
		t.Fatalf("%d jobs enqueued by refused requests", n)
	}

	// Escapes of real characters, a surrogate pair and U+FFFD itself among
	// them, are ids like any other.
	for body, id := range map[string]string{
		`{"id":"\ud83d\ude42"}`: "🙂",
		`{"id":"\ufffd"}`:       "\uFFFD",
		`{"id":"a\/\u00e9"}`:    "a/é",
	} {
		a := e.do("POST", "/v1/types/email/jobs", "", body)
		if a.status != http.StatusCreated {
			t.Fatalf("%s: %d %s", body, a.status, a.body)
		}
		if _, err := e.q.Get(context.Background(), e.db, "email", id); err != nil {
			t.Fatalf("%s: stored under another id: %v", body, err)
		}
	}

	// The Go client cannot send an id that is not UTF-8 (encoding/json
	// would turn it into U+FFFD), so it refuses one before sending.
	c := e.client("")
	_, err := c.Enqueue(context.Background(), "email", httpapi.NewJob{ID: "a\xff"})
	if !errors.Is(err, fdbq.ErrInvalidJob) || !strings.Contains(err.Error(), "byte 1") {
		t.Fatalf("client enqueue of a bad id: %v", err)
	}
	_, err = c.EnqueueBatch(context.Background(), "email", []httpapi.NewJob{{ID: "ok"}, {ID: "\xc0"}})
	if !errors.Is(err, fdbq.ErrInvalidJob) {
		t.Fatalf("client batch with a bad id: %v", err)
	}
	if n, _ := e.q.Count(context.Background(), e.db, "email", fdbq.Pending); n != 3 {
		t.Fatalf("%d jobs pending, want the 3 good ones", n)
	}
}

// The Type parameter's schema in openapi.yaml says what fdbq accepts.
func TestNamesOpenAPI(t *testing.T) {
	var doc struct {
		Components struct {
			Parameters map[string]struct {
				Schema struct {
					Pattern   string `yaml:"pattern"`
					MinLength int    `yaml:"minLength"`
					MaxLength int    `yaml:"maxLength"`
				} `yaml:"schema"`
			} `yaml:"parameters"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(httpapi.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	s := doc.Components.Parameters["Type"].Schema
	if s.MinLength != 1 || s.MaxLength != fdbq.MaxTypeNameSize {
		t.Fatalf("type name length %d to %d, want 1 to %d", s.MinLength, s.MaxLength, fdbq.MaxTypeNameSize)
	}
	re, err := regexp.Compile(s.Pattern)
	if err != nil {
		t.Fatalf("type name pattern %q: %v", s.Pattern, err)
	}
	for _, name := range []string{
		"email", "send-email", "img.resize", "T_1", "0", "a..b", "x-", strings.Repeat("t", fdbq.MaxTypeNameSize),
		"", ".", "..", "-x", "_x", ".x", "a b", "a/b", "a:b", "café", "\xff", "a\x00", "a\n", strings.Repeat("t", fdbq.MaxTypeNameSize+1),
	} {
		byDoc := re.MatchString(name) && len(name) >= s.MinLength && len(name) <= s.MaxLength
		if byFdbq := fdbq.ValidateTypeName(name) == nil; byDoc != byFdbq {
			t.Errorf("type name %q: openapi.yaml says %v, fdbq says %v", name, byDoc, byFdbq)
		}
	}
	if id := doc.Components.Parameters["ID"].Schema; id.MinLength != 1 || id.MaxLength != fdbq.MaxIDSize {
		t.Errorf("job id length %d to %d, want 1 to %d", id.MinLength, id.MaxLength, fdbq.MaxIDSize)
	}
}
