package main

import (
	"context"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// The text of a hostile job: an id and a key with bidi controls, data
// with C1 controls and DEL (raw in JSON strings), an error with escape
// sequences that set the terminal's title and clear it, and progress.
const (
	evilID       = "evil\u202eid"
	evilKey      = "k\u2066"
	evilData     = "{\"s\":\"\u009b2J\x7f\u202e\"}"
	evilError    = "\x1b]0;pwned\x07\x1b[2J\r\nfake: row"
	evilProgress = "{\"p\":\"\u009b31m\u2069\"}"
	evilType     = "t\x1b[2J"
)

// unsafeIn returns the first character of s a terminal would act on, and
// whether there is one: a control character but the newline, a bidi
// control, a byte that is not UTF-8.
func unsafeIn(s string) (rune, bool) {
	for i, r := range s {
		if r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD") || r != '\n' && unsafeRune(r) {
			return r, true
		}
	}
	return 0, false
}

// TestHumanOutputEscapesControls: a job whose id, key, data, error,
// attempt errors and progress hold escape sequences, C1 and bidi
// controls, and a type an earlier version let be named with one, print
// escaped in every command's text for people (get, list, types, events,
// the errors of a refused request) and unchanged in their JSON.
func TestHumanOutputEscapesControls(t *testing.T) {
	ctx := context.Background()
	db := jobtest.OpenDB(t)
	q := fdbq.New(db, fdbq.Options{})
	settings := fdbq.DefaultTypeSettings()
	settings.Retry.Base = time.Millisecond
	if err := q.SetType(ctx, db, "email", settings); err != nil {
		t.Fatal(err)
	}
	// A type named by an earlier version with an escape sequence.
	root := tuple.FromBytes(fdbq.DefaultPrefix)
	if err := db.Transact(ctx, func(tx kv.Tx) error {
		v, err := tx.Get(root.MustPack(tuple.Tuple{8, "email"}))
		if v == nil || err != nil {
			return errors.Join(err, errors.New("no settings of type email"))
		}
		tx.Set(root.MustPack(tuple.Tuple{8, evilType}), v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(q, httpapi.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c := httpapi.NewClient(hs.URL, "", nil)

	// A stream's ready cursor, so that the events command reads the
	// changes below afterwards.
	errStop := errors.New("stop")
	var cursor string
	if err := c.Events(ctx, []string{"email"}, "", func(e httpapi.Event) error {
		cursor = e.Cursor
		return errStop
	}); !errors.Is(err, errStop) {
		t.Fatal(err)
	}

	if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: evilID, Key: evilKey, Data: json.RawMessage(evilData)}); err != nil {
		t.Fatal(err)
	}
	accept := func() *httpapi.Lease {
		t.Helper()
		ls, err := c.Accept(ctx, "email", httpapi.AcceptRequest{Max: 1, Wait: httpapi.Duration(5 * time.Second)})
		if err != nil || len(ls) != 1 {
			t.Fatalf("accept: %v %v", err, ls)
		}
		return ls[0]
	}
	if err := c.Fail(ctx, accept(), evilError); err != nil {
		t.Fatal(err)
	}
	if err := c.Heartbeat(ctx, accept(), json.RawMessage(evilProgress)); err != nil {
		t.Fatal(err)
	}

	server := []string{"--server", hs.URL}
	for _, cmd := range [][]string{
		{"get", "email", evilID},
		{"list", "email", "--state", "running"},
		{"types"},
		{"events", "email", "--cursor", cursor, "--count", "3"},
		{"get", "email", "nope\u202e\x1b[2J"},
		{"cancel", "email", "x\u202e"},
		{"list", evilType},
		{"pause", evilType},
		{"enqueue", "email", "{\"a\":\"\u202e\"", "--id", "e\u202e"},
	} {
		out, errOut, code := runIn(t, append(cmd, server...)...)
		for _, s := range []string{out, errOut} {
			if r, bad := unsafeIn(s); bad {
				t.Errorf("jobstage %q (exit %d) prints %U:\n%q\n%q", cmd, code, r, out, errOut)
			}
		}
		if want := cmd[0] == "get" && cmd[2] == evilID || cmd[0] == "events" || cmd[0] == "types" || cmd[0] == "list" && cmd[1] == "email"; want && code != 0 {
			t.Errorf("jobstage %q: exit %d: %q %q", cmd, code, out, errOut)
		}
		if cmd[0] == "get" && code == 0 {
			for _, want := range []string{`evil\u202eid`, `k\u2066`, `\u009b2J\x7f\u202e`, `\x1b]0;pwned\a\x1b[2J\r\nfake: row`, `\u009b31m\u2069`} {
				if !strings.Contains(out, want) {
					t.Errorf("get prints no %s:\n%q", want, out)
				}
			}
		}
	}

	// JSON stays JSON, holding the text as it is.
	out, _, code := runIn(t, append([]string{"get", "email", evilID, "--json"}, server...)...)
	var j httpapi.Job
	if err := json.Unmarshal([]byte(out), &j); code != 0 || err != nil {
		t.Fatalf("get --json: exit %d: %v\n%q", code, err, out)
	}
	if r, bad := unsafeIn(out); bad {
		t.Errorf("get --json prints %U raw:\n%q", r, out)
	}
	for _, cmd := range [][]string{{"events", "email", "--cursor", cursor, "--count", "3", "--json"}, {"list", "email", "--state", "running", "--json"}, {"cancel", "email", "x\u202e", "--json"}} {
		out, errOut, _ := runIn(t, append(cmd, server...)...)
		for _, s := range []string{out, errOut} {
			if r, bad := unsafeIn(s); bad {
				t.Errorf("jobstage %q prints %U raw:\n%q", cmd, r, s)
			}
			for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
				if line != "" && !json.Valid([]byte(line)) && cmd[0] != "list" {
					t.Errorf("jobstage %q prints a line that is not JSON: %q", cmd, line)
				}
			}
		}
	}
	compact := func(b []byte) string { // the value, as encoding/json writes it
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		return string(must(json.Marshal(v)))
	}
	if j.ID != evilID || j.Key != evilKey || compact(j.Data) != evilData || compact(j.Progress) != evilProgress ||
		len(j.Errors) != 1 || j.Errors[0].Error != evilError {
		t.Fatalf("get --json: %q", out)
	}
}

// TestPrintfEverywhere: every text the commands print for people goes
// through printf, with a constant format: no other fmt print call in the
// command's code, and no printf whose format is not a literal.
func TestPrintfEverywhere(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			switch fn := call.Fun.(type) {
			case *ast.SelectorExpr:
				if x, ok := fn.X.(*ast.Ident); ok && x.Name == "fmt" && strings.Contains(fn.Sel.Name, "rint") && !strings.HasPrefix(fn.Sel.Name, "S") && !strings.HasPrefix(fn.Sel.Name, "Append") {
					if name != "text.go" {
						t.Errorf("%s: fmt.%s: print through printf", fset.Position(call.Pos()), fn.Sel.Name)
					}
				}
			case *ast.Ident:
				if fn.Name == "printf" {
					if lit, ok := call.Args[1].(*ast.BasicLit); !ok || lit.Kind != token.STRING {
						t.Errorf("%s: printf's format is not a string literal", fset.Position(call.Pos()))
					}
				}
			}
			return true
		})
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain id-1.2":             "plain id-1.2",
		`back\slash`:               `back\slash`,
		"\x1b]0;pwned\x07":         `\x1b]0;pwned\a`,
		"\x1b[2J":                  `\x1b[2J`,
		"a\nb\tc\r":                `a\nb\tc\r`,
		"\x00\x7f":                 `\x00\x7f`,
		"\u0085\u009b":             `\u0085\u009b`,
		"\u202a\u202b\u202c\u202d": `\u202a\u202b\u202c\u202d`,
		"abc\u202edef":             `abc\u202edef`,
		"\u2066\u2067\u2068\u2069": `\u2066\u2067\u2068\u2069`,
		"\u200e\u200f\u061c":       `\u200e\u200f\u061c`,
		"\xff\xfe ok":              `\xff\xfe ok`,
		"\uFFFD héllo 日本":          "\uFFFD héllo 日本",
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %s, want %s", in, got, want)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
