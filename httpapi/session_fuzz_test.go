package httpapi_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/httpapi"
)

// fuzzServer is a server with the test tokens and a UI, whose requests
// the fuzzers send straight to its handler.
func fuzzServer(f *testing.F) *httpapi.Server {
	e := newEnv(f, httpapi.Options{Tokens: testTokens, UI: fakeUI})
	return e.srv
}

// FuzzLogin: whatever the body and the headers, POST /v1/login answers
// 200 with a session cookie only for a known token sent with the UI's
// header from this server's origin; anything else is a 4xx without a
// cookie, never a 5xx.
func FuzzLogin(f *testing.F) {
	srv := fuzzServer(f)
	for _, s := range []struct{ body, ui, origin, site string }{
		{`{"token":"admin-secret"}`, "1", "", ""},
		{`{"token":"producer-secret"}`, "1", "http://jobstage.test", "same-origin"},
		{`{"token":" worker-secret "}`, "1", "", "none"},
		{`{"token":"admin-secret"}`, "", "", ""},
		{`{"token":"admin-secret"}`, "1", "http://evil.test", "cross-site"},
		{`{"token":"admin-secret"}`, "1", "null", ""},
		{`{"token":"admin-secret"}`, "1", "://", ""},
		{`{"token":"nope"}`, "1", "", ""},
		{`{"token":""}`, "1", "", ""},
		{`{"token":1}`, "1", "", ""},
		{`{"token":"\ud800"}`, "1", "", ""},
		{"{\"token\":\"\xff\"}", "1", "", ""},
		{`{"token":"a"} {}`, "1", "", ""},
		{`[]`, "1", "", ""},
		{``, "1", "", ""},
		{`token=admin-secret`, "1", "", ""},
		{`{"token":"` + strings.Repeat("x", 5000) + `"}`, "1", "", ""},
	} {
		f.Add([]byte(s.body), s.ui, s.origin, s.site)
	}
	f.Fuzz(func(t *testing.T, body []byte, ui, origin, site string) {
		r := httptest.NewRequest("POST", "http://jobstage.test/v1/login", bytes.NewReader(body))
		r.RemoteAddr = "127.0.0.1:5000"
		setHeader(r, "X-Jobstage-UI", ui)
		setHeader(r, "Origin", origin)
		setHeader(r, "Sec-Fetch-Site", site)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, r)
		cookie := rec.Header().Get("Set-Cookie")
		switch {
		case rec.Code >= 500:
			t.Fatalf("login %q ui %q origin %q site %q: %d %s", body, ui, origin, site, rec.Code, rec.Body)
		case rec.Code == 200:
			if ui != "1" || cookie == "" || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") {
				t.Fatalf("login %q ui %q origin %q: 200 with cookie %q", body, ui, origin, cookie)
			}
			if origin != "" && origin != "http://jobstage.test" {
				t.Fatalf("login from origin %q accepted", origin)
			}
		case rec.Code < 400:
			t.Fatalf("login %q: status %d", body, rec.Code)
		case cookie != "":
			t.Fatalf("refused login %q (%d) set cookie %q", body, rec.Code, cookie)
		}
	})
}

// FuzzSessionCookie: whatever the cookie and the Authorization header,
// GET /v1/whoami and GET /ui/ either serve a caller with a known token or
// refuse (401, or the UI's redirect to its login page); never a 5xx, and
// never a role the credentials do not hold.
func FuzzSessionCookie(f *testing.F) {
	srv := fuzzServer(f)
	for _, s := range []struct{ cookie, auth string }{
		{sessionCookie("admin-secret"), ""},
		{sessionCookie("metrics-secret"), ""},
		{sessionCookie("worker-secret"), "Bearer producer-secret"},
		{httpapi.SessionCookie + "=", ""},
		{httpapi.SessionCookie + "=!!", ""},
		{httpapi.SessionCookie + "=YWRtaW4tc2VjcmV0", ""},
		{httpapi.SessionCookie + "=YWRtaW4tc2VjcmV0==", ""},
		{httpapi.SessionCookie + "=\"YWRtaW4tc2VjcmV0\"", ""},
		{httpapi.SessionCookie + "=a; " + httpapi.SessionCookie + "=" + "YWRtaW4tc2VjcmV0", ""},
		{"x=1", "Basic YQ=="},
		{"", "Bearer "},
		{strings.Repeat("a=b; ", 500), ""},
	} {
		f.Add(s.cookie, s.auth)
	}
	roles := map[string]httpapi.Role{}
	for _, tk := range testTokens {
		roles[tk.Secret] = tk.Role
	}
	f.Fuzz(func(t *testing.T, cookie, auth string) {
		for _, path := range []string{"/v1/whoami", "/ui/"} {
			r := httptest.NewRequest("GET", "http://jobstage.test"+path, nil)
			r.RemoteAddr = "127.0.0.1:5000"
			setHeader(r, "Cookie", cookie)
			setHeader(r, "Authorization", auth)
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, r)
			switch {
			case rec.Code >= 500:
				t.Fatalf("%s cookie %q auth %q: %d %s", path, cookie, auth, rec.Code, rec.Body)
			case rec.Code == 200 && path == "/v1/whoami":
				// The role answered is one the credentials hold.
				secret, _ := strings.CutPrefix(strings.TrimSpace(auth), "Bearer ")
				if r.Header.Get("Authorization") == "" {
					if c, err := r.Cookie(httpapi.SessionCookie); err == nil {
						secret = decodeCookie(c.Value)
					}
				}
				if !strings.Contains(rec.Body.String(), `"role":"`+string(roles[strings.TrimSpace(secret)])+`"`) || roles[strings.TrimSpace(secret)] == "" {
					t.Fatalf("cookie %q auth %q: whoami %s", cookie, auth, rec.Body)
				}
			case rec.Code == 200, rec.Code == 401, rec.Code == 429, rec.Code == 303 && path == "/ui/":
			default:
				t.Fatalf("%s cookie %q auth %q: %d %s", path, cookie, auth, rec.Code, rec.Body)
			}
		}
	})
}

func setHeader(r *http.Request, k, v string) {
	if v != "" {
		r.Header.Set(k, v)
	}
}
