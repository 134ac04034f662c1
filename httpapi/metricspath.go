package httpapi

import (
	"fmt"
	"net/http"
	"path"
	"strings"
	"unicode"
)

// CheckMetricsPath reports why New would refuse p as Options.MetricsPath,
// or nil. The path is a route pattern and the address scrapers are given:
// it must start with '/', be clean (no empty, "." or ".." segments, which
// requests never reach), not end with '/' (a subtree), and hold no spaces, control characters, braces
// (pattern wildcards), '?', '#' or '%' (a query, a fragment or an escape
// in a URL).
func CheckMetricsPath(p string) error {
	bad := func(format string, args ...any) error {
		return &MetricsPathError{Path: p, Reason: fmt.Sprintf(format, args...)}
	}
	if !strings.HasPrefix(p, "/") {
		return bad("must start with /")
	}
	if i := strings.IndexFunc(p, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return bad("has a space or a control character at byte %d", i)
	}
	if i := strings.IndexAny(p, "{}?#%"); i >= 0 {
		return bad("has %q at byte %d, which is no plain path character (braces are route wildcards; ?, # and %% begin a query, a fragment and an escape)", p[i], i)
	}
	if len(p) > 1 && strings.HasSuffix(p, "/") {
		// A pattern ending in / matches every path under it.
		return bad("ends with /, which would serve the metrics at every path under it too (use %s)", strings.TrimRight(p, "/"))
	}
	if clean := path.Clean(p); clean != p {
		return bad("is not a clean path (%s is): a request could never reach it", clean)
	}
	return tryPattern("GET " + p)
}

// MetricsPathError is why CheckMetricsPath refuses a path.
type MetricsPathError struct {
	Path   string
	Reason string // what is wrong with it: "must start with /"
}

func (e *MetricsPathError) Error() string {
	return fmt.Sprintf("httpapi: metrics path %q %s", e.Path, e.Reason)
}

// tryPattern reports the pattern ServeMux would refuse, which it does by
// panicking.
func tryPattern(pattern string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("httpapi: route %q: %v", pattern, r)
		}
	}()
	http.NewServeMux().Handle(pattern, http.NotFoundHandler())
	return nil
}
