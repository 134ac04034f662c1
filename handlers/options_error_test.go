package handlers_test

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/jobstage/jobstage/handlers"
)

// TestOptionsError: the options Exec and HTTP refuse come back as an
// *OptionsError that names the handler and the reason, and keeps the
// error behind it.
func TestOptionsError(t *testing.T) {
	_, emptyErr := handlers.Exec(handlers.ExecOptions{})
	_, dirErr := handlers.Exec(handlers.ExecOptions{Command: []string{"cat"}, Dir: t.TempDir() + "/missing"})
	_, schemeErr := handlers.HTTP(handlers.HTTPOptions{URL: "ftp://example.com/"})
	for _, c := range []struct {
		name, handler, reason string
		err                   error
	}{
		{"empty command", "exec", "command is empty", emptyErr},
		{"scheme", "http", "url ftp://example.com/: scheme must be http or https", schemeErr},
	} {
		var oe *handlers.OptionsError
		if !errors.As(c.err, &oe) || oe.Handler != c.handler || oe.Reason != c.reason {
			t.Errorf("%s: %#v, want an *OptionsError of %s: %s", c.name, c.err, c.handler, c.reason)
		} else if c.err.Error() != "handlers: "+c.handler+": "+c.reason {
			t.Errorf("%s: message %q", c.name, c.err)
		}
	}
	var oe *handlers.OptionsError
	if !errors.As(dirErr, &oe) || oe.Handler != "exec" || !errors.Is(dirErr, fs.ErrNotExist) {
		t.Errorf("missing dir: %#v, want an exec *OptionsError wrapping fs.ErrNotExist", dirErr)
	}
}
