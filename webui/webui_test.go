package webui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/webui"
)

// TestHandlerServesFilesOnly: the page at /, the login page and the
// assets by their clean paths; a directory, a dot segment (escaped or
// not) and any other name answer 404.
func TestHandlerServesFilesOnly(t *testing.T) {
	hs := httptest.NewServer(webui.Handler())
	t.Cleanup(hs.Close)
	get := func(p string) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest("GET", hs.URL+p, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultTransport.RoundTrip(req) // no redirect followed
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	for p, want := range map[string]string{
		"/":                 `<main id="view"`,
		"/login.html":       `<form id="login-form"`,
		"/assets/app.js":    "import",
		"/assets/style.css": "{",
	} {
		status, body, h := get(p)
		if status != 200 || !strings.Contains(body, want) || h.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s: %d %v %.100s", p, status, h, body)
		}
		if strings.HasSuffix(p, ".js") && !strings.HasPrefix(h.Get("Content-Type"), "text/javascript") {
			t.Errorf("GET %s: Content-Type %q", p, h.Get("Content-Type"))
		}
	}
	for _, p := range []string{
		"/index.html", "/assets/", "/assets", "/assets/.", "/assets/%2e", "/assets/%2e%2e/", "/assets/..%2f",
		"/assets/%2e%2e/index.html", "/assets/%2f", "/assets//app.js", "/assets/app.js/", "/assets/./app.js",
		"/assets/x/..%2fapp.js", "/assets/..%5cindex.html", "/static/index.html", "/login.html/", "/nope",
	} {
		if status, body, _ := get(p); status != 404 {
			t.Errorf("GET %s: %d %.100s", p, status, body)
		}
	}
}
