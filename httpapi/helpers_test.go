package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
)

// observed collects every (route, status) the test servers answered, so
// that TestMain can check each one is documented in openapi.yaml.
var observed sync.Map // "METHOD path status" → struct{}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if code == 0 {
			if missing := undocumentedStatuses(); len(missing) > 0 {
				fmt.Fprintf(os.Stderr, "FAIL: statuses answered but not documented in openapi.yaml:\n  %s\n", strings.Join(missing, "\n  "))
				code = 1
			}
		}
		os.Exit(code)
	}))
}

// undocumentedStatuses returns the observed route statuses missing from
// the OpenAPI description.
func undocumentedStatuses() []string {
	doc, err := loadOpenAPI()
	if err != nil {
		return []string{err.Error()}
	}
	var missing []string
	observed.Range(func(k, _ any) bool {
		var method, path string
		var status int
		fmt.Sscanf(k.(string), "%s %s %d", &method, &path, &status)
		op, ok := doc.Paths[path][strings.ToLower(method)]
		if !ok {
			missing = append(missing, fmt.Sprintf("%s %s: no such operation", method, path))
			return true
		}
		if _, ok := op.Responses[fmt.Sprint(status)]; !ok {
			missing = append(missing, fmt.Sprintf("%s %s → %d", method, path, status))
		}
		return true
	})
	sort.Strings(missing)
	return missing
}

// openAPIDoc is the part of an OpenAPI document the tests read.
type openAPIDoc struct {
	// Paths maps a path and a method to its operation.
	Paths      map[string]map[string]openAPIOp `yaml:"-"`
	RawPaths   map[string]map[string]yaml.Node `yaml:"paths"`
	Components struct {
		Schemas map[string]openAPISchema `yaml:"schemas"`
	} `yaml:"components"`
}

type openAPIOp struct {
	Responses  map[string]yaml.Node `yaml:"responses"`
	Parameters []struct {
		Name    string `yaml:"name"`
		In      string `yaml:"in"`
		Example string `yaml:"example"`
	} `yaml:"parameters"`
	RequestBody *struct {
		Content map[string]struct {
			Example  yaml.Node `yaml:"example"`
			Examples map[string]struct {
				Value yaml.Node `yaml:"value"`
			} `yaml:"examples"`
		} `yaml:"content"`
	} `yaml:"requestBody"`
}

type openAPISchema struct {
	Properties map[string]yaml.Node `yaml:"properties"`
	Required   []string             `yaml:"required"`
}

func loadOpenAPI() (*openAPIDoc, error) {
	var doc openAPIDoc
	if err := yaml.Unmarshal(httpapi.OpenAPI, &doc); err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	doc.Paths = map[string]map[string]openAPIOp{}
	for path, item := range doc.RawPaths {
		doc.Paths[path] = map[string]openAPIOp{}
		for key, node := range item {
			switch key {
			case "get", "put", "post", "delete", "patch", "head", "options":
			default:
				continue // parameters, summary: not operations
			}
			var op openAPIOp
			if err := node.Decode(&op); err != nil {
				return nil, fmt.Errorf("openapi.yaml: %s %s: %w", key, path, err)
			}
			doc.Paths[path][key] = op
		}
	}
	return &doc, nil
}

// env is a server over a real on-disk embedded store, behind a real
// listener, with type "email" registered. wrap, when given, wraps the
// server's handler (to watch requests arrive).
type env struct {
	t   testing.TB
	db  *kv.DB
	q   *fdbq.Queue
	srv *httpapi.Server
	hs  *httptest.Server
	url string
}

func newEnv(t testing.TB, o httpapi.Options, wrap ...func(http.Handler) http.Handler) *env {
	t.Helper()
	db := jobtest.OpenDB(t)
	q := fdbq.New(db, fdbq.Options{})
	if err := q.SetType(context.Background(), db, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	observe := o.Observe
	o.Observe = func(route string, status int, d time.Duration) {
		method, path, _ := strings.Cut(route, " ")
		// The web UI's routes are not the API's: openapi.yaml leaves them out.
		ui := path == "/{$}" || strings.HasPrefix(path, "/ui/")
		if route != "unmatched" && status != 499 && !ui {
			observed.Store(fmt.Sprintf("%s %s %d", method, path, status), struct{}{})
		}
		if observe != nil {
			observe(route, status, d)
		}
	}
	if o.Logger == nil {
		o.Logger = discardLogger()
	}
	srv, err := httpapi.New(q, o)
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = srv
	for _, w := range wrap {
		h = w(h)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return &env{t: t, db: db, q: q, srv: srv, hs: hs, url: hs.URL}
}

// client returns an API client with token.
func (e *env) client(token string) *httpapi.Client {
	return httpapi.NewClient(e.url, token, e.hs.Client())
}

// answer is a raw HTTP answer.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// apiErr decodes an error answer.
func (a answer) apiErr(t *testing.T) httpapi.APIError {
	t.Helper()
	var e httpapi.APIError
	if err := json.Unmarshal(a.body, &e); err != nil {
		t.Fatalf("error answer %d is not JSON: %v: %s", a.status, err, a.body)
	}
	return e
}

// do sends a raw request; body "" sends none.
func (e *env) do(method, path, token, body string) answer {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.hs.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// wantError checks an error answer's status and code, and that its
// message mentions each of words.
func wantError(t *testing.T, a answer, status int, code string, words ...string) {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d: %s", a.status, status, a.body)
	}
	e := a.apiErr(t)
	if e.Code != code {
		t.Fatalf("error %q, want %q: %s", e.Code, code, a.body)
	}
	for _, w := range words {
		if !strings.Contains(e.Message, w) {
			t.Fatalf("message %q does not mention %q", e.Message, w)
		}
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
