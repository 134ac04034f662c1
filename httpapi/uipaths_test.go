package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/webui"
)

// TestUIPathVariants: with tokens, the UI's page is served to a token
// only, whatever spelling of a path reaches it: the asset route serves
// real asset files and nothing else (no dot segment however escaped, no
// directory, no listing), and no other path under /ui/ serves the page.
func TestUIPathVariants(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens, UI: webui.Handler()})
	// A client that follows redirects (the mux's, to a cleaned path), as
	// a browser would, and sends no token.
	get := func(p string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", e.url+p, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := e.hs.Client().Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", p, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	page := `<main id="view"`
	login := `<form id="login-form"`
	for _, p := range []string{
		"/ui/assets/%2e%2e/",
		"/ui/assets/%2E%2E/",
		"/ui/assets/..%2f",
		"/ui/assets/..%2F",
		"/ui/assets/%2e%2e%2f",
		"/ui/assets/.%2e/",
		"/ui/assets/%2e./",
		"/ui/assets/%2e%2e",
		"/ui/assets/%2e%2e/index.html",
		"/ui/assets/..%2findex.html",
		"/ui/assets/%2e%2e%2findex.html",
		"/ui/assets/%2e%2e/%2e%2e/ui/",
		"/ui/assets/x/..%2f..%2f",
		"/ui/assets/%2f",
		"/ui/assets/%2f%2f",
		"/ui/assets//",
		"/ui/assets//..%2f",
		"/ui/assets/",
		"/ui/assets",
		"/ui/assets/.",
		"/ui/assets/%2e",
		"/ui/assets/%2e/",
		"/ui/assets/./app.js/..%2f..%2f",
		"/ui/assets/app.js/",
		"/ui/assets/app.js%2f..%2f..%2f",
		"/ui/assets/%5c..%5c",
		"/ui/assets/..%5c",
		"/ui//",
		"/ui/./",
		"/ui/%2e/",
		"/ui/%2e%2e/ui/",
		"/ui/index.html",
		"/ui/login.html/..%2f",
		"/ui/login.html%2f..%2f",
		"/ui/login.html/..",
		"//ui/",
		"/ui/assets/../",
		"/ui/assets/../../ui/",
	} {
		status, body := get(p)
		if strings.Contains(body, page) {
			t.Errorf("GET %s without a token: %d, the page", p, status)
			continue
		}
		// Nothing but an error, or the login page (where a redirect to
		// a cleaned path, to /ui/, sends a browser without a token).
		if status < 300 && !strings.Contains(body, login) {
			t.Errorf("GET %s without a token: %d %.200s", p, status, body)
		}
	}
	// The real files are served.
	for _, p := range []string{"/ui/assets/app.js", "/ui/assets/style.css", "/ui/login.html"} {
		if status, body := get(p); status != 200 || body == "" {
			t.Errorf("GET %s: %d", p, status)
		}
	}
	if a := e.req("GET", "/ui/", "", "Cookie", sessionCookie("admin-secret")); a.status != 200 || !strings.Contains(string(a.body), page) {
		t.Fatalf("GET /ui/ with a token: %d %.200s", a.status, a.body)
	}
}
