package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/httpapi"
)

// New refuses a metrics path that could not be served as written, with a
// message that says why; CheckMetricsPath says the same beforehand.
func TestCheckMetricsPath(t *testing.T) {
	for _, p := range []string{"/metrics", "/internal/metrics", "/métrics", "/a.b-c_d"} {
		if err := httpapi.CheckMetricsPath(p); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	e := newEnv(t, httpapi.Options{})
	for p, want := range map[string]string{
		"metrics":      "must start with /",
		"/me trics":    "space or a control character at byte 3",
		"/m\x00":       "control character at byte 2",
		"/m/{x}":       `has '{' at byte 3`,
		"/m?x=1":       `has '?' at byte 2`,
		"/m#x":         `has '#' at byte 2`,
		"/m%41":        `has '%' at byte 2`,
		"/a//b":        "not a clean path (/a/b is)",
		"/a/./metrics": "not a clean path (/a/metrics is)",
		"/a/../b/":     "ends with /",
		"/m/":          "ends with /, which would serve the metrics at every path under it too (use /m)",
	} {
		err := httpapi.CheckMetricsPath(p)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "metrics path") {
			t.Errorf("CheckMetricsPath(%q) = %v, want %q", p, err, want)
		}
		if _, err := httpapi.New(e.q, httpapi.Options{Metrics: http.NotFoundHandler(), MetricsPath: p}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New with metrics path %q: %v, want %q", p, err, want)
		}
	}
}
