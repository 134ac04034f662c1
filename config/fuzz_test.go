package config_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/jobstage/jobstage/config"
)

// FuzzParse: no input panics Parse, and the result is either a config or
// problems, each placed in the file.
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("../examples/quickstart.yaml"); err == nil {
		f.Add(data)
	}
	for _, tc := range lintCases {
		f.Add([]byte(tc.src))
	}
	f.Add([]byte(overridable))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("a: &a {b: *a}\ntypes: *a\n"))
	f.Add([]byte(aliasBomb))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, probs := config.Parse("f.yaml", data, env(map[string]string{"A_TOKEN": "x", "JOBSTAGE_HTTP__LISTEN": "127.0.0.1:1"}))
		if (c == nil) == (len(probs) == 0) {
			t.Fatalf("config %v with %d problems", c, len(probs))
		}
		// YAML breaks lines at LF, CR, NEL, LS and PS.
		lines := 1
		for _, br := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
			lines += bytes.Count(data, []byte(br))
		}
		for _, p := range probs {
			if p.File != "f.yaml" || p.Message == "" || p.Line < 0 || p.Line > lines+1 {
				t.Fatalf("bad problem %+v (file has %d lines)", p, lines)
			}
		}
	})
}

// aliasBomb is a few hundred bytes that name 10^9 nodes through aliases.
const aliasBomb = `a: &a ["x","x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h,*h]
pipelines:
  p:
    handler: {exec: {command: *i}}
types:
  t: &t {retry: &r {base: 1s}}
  u: *t
`
