// Package proctest has what tests of commands and their process trees
// share: waiting for processes to end, and reading an environment a
// command printed.
package proctest

import (
	"strings"
	"testing"
)

// Env parses the output of env or printenv: one NAME=value a line.
func Env(out string) map[string]string {
	env := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	return env
}

// CheckEnv fails t for each variable of want that env lacks or holds
// another value of, and for each variable of env that want does not
// name (why says where the wanted ones come from).
func CheckEnv(t testing.TB, env, want map[string]string, why string) {
	t.Helper()
	for k, v := range want {
		if got, ok := env[k]; !ok || got != v {
			t.Errorf("%s = %q (set: %v), want %q", k, got, ok, v)
		}
	}
	for k := range env {
		if _, ok := want[k]; !ok {
			t.Errorf("%s reached the command; %s", k, why)
		}
	}
}
