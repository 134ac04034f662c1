package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// jobstage keys prints a type's keys as a table, a page at a time with
// the next page's command, every page with --all, JSON with --json; a key
// with a bidi control prints it escaped; what cannot be read is on stderr.
func TestKeysCommand(t *testing.T) {
	ctx := context.Background()
	db := jobtest.OpenDB(t)
	q := fdbq.New(db, fdbq.Options{})
	s := fdbq.DefaultTypeSettings()
	s.Zones = 1
	s.KeyDefault = fdbq.KeyPolicy{MaxRunning: 3}
	s.Keys = map[string]fdbq.KeyPolicy{"idle": {Weight: 5}, "rated": {MaxStarts: 10, Per: time.Minute}}
	if err := q.SetType(ctx, db, "email", s); err != nil {
		t.Fatal(err)
	}
	for _, j := range []fdbq.NewJob{{ID: "a1", Key: "acme"}, {ID: "a2", Key: "acme"}, {ID: "r1", Key: "rated"}, {ID: "n1"}, {ID: "e1", Key: "evil\u202etxt"}} {
		j.Type = "email"
		if _, err := q.Add(ctx, db, j); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"acme", "rated"} {
		if _, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Keys: []string{key}, Max: 1}); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := httpapi.New(q, httpapi.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()

	out, errOut, code := runIn(t, "keys", "email", "--server", hs.URL)
	if code != 0 || errOut != "" {
		t.Fatalf("keys: exit %d\n%s%s", code, out, errOut)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		f := regexp.MustCompile(`\s{2,}`).Split(line, -1)
		rows[f[0]] = strings.Join(f[1:], "|")
	}
	for key, want := range map[string]string{
		"(no key)":      "no key|1|-|-|1|1|-|-",
		"acme":          "default|1|3|-|1|1|1|-",
		`evil\u202etxt`: "default|1|3|-|1|1|0|-",
		"idle":          "named|5|-|-|1|0|0|-",
		"rated":         "named|1|-|10 per 1m0s|1|0|1|1 of 10 until ",
	} {
		if got, ok := rows[key]; !ok || !strings.HasPrefix(got, want) {
			t.Fatalf("row %s: %q, want %q\n%s", key, got, want, out)
		}
	}
	if len(rows) != 5 || !strings.HasPrefix(out, "KEY ") || strings.Contains(out, "\u202e") {
		t.Fatalf("keys:\n%s", out)
	}

	// A page at a time: the next page's command, then that page.
	out, errOut, code = runIn(t, "keys", "email", "--limit", "2", "--server", hs.URL)
	if code != 0 || !strings.Contains(out, "(no key)") || !strings.Contains(out, "acme") || strings.Contains(out, "idle") ||
		!strings.Contains(errOut, `more: jobstage keys email --limit 2 --after 'evil\u202etxt'`) {
		t.Fatalf("keys --limit 2: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = runIn(t, "keys", "email", "--limit", "2", "--after", "evil\u202etxt", "--server", hs.URL)
	if code != 0 || strings.Contains(out, "acme") || !strings.Contains(out, "idle") || !strings.Contains(out, "rated") || errOut != "" {
		t.Fatalf("keys --after: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = runIn(t, "keys", "email", "--limit", "1", "--all", "--json", "--server", hs.URL)
	var page httpapi.KeyPage
	if err := json.Unmarshal([]byte(out), &page); code != 0 || err != nil || len(page.Keys) != 5 || page.Next != "" ||
		page.Keys[0].Key != "" || page.Keys[0].Running != nil || *page.Keys[1].Running != 1 || page.Keys[4].Window == nil {
		t.Fatalf("keys --all --json: exit %d (%v)\n%s", code, err, out)
	}

	// Refused: a bad limit before any request, a bad after by the
	// server, an unknown type.
	if _, errOut, code := runIn(t, "keys", "email", "--limit", "0", "--server", hs.URL); code != 2 || !strings.Contains(errOut, "--limit 0") {
		t.Fatalf("--limit 0: exit %d %s", code, errOut)
	}
	if _, errOut, code := runIn(t, "keys", "email", "--after", "a\x01", "--server", hs.URL); code != 1 || !strings.Contains(errOut, "invalid (HTTP 400): after: fairness key") {
		t.Fatalf("a bad --after: exit %d %s", code, errOut)
	}
	if _, errOut, code := runIn(t, "keys", "sms", "--server", hs.URL); code != 1 || !strings.Contains(errOut, "unknown_type (HTTP 404)") {
		t.Fatalf("an unknown type: exit %d %s", code, errOut)
	}

	// A running count that cannot be read: reported, the rest listed.
	if err := db.Transact(ctx, func(tx kv.Tx) error {
		tx.Set(tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{16, "email", "acme", int64(5)}), []byte{1})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runIn(t, "keys", "email", "--server", hs.URL)
	if code != 0 || !strings.Contains(out, "acme") || !strings.Contains(errOut, `unreadable: running count of fairness key "acme": a value of 1 bytes, not 8`) {
		t.Fatalf("keys with an unreadable count: exit %d\n%s%s", code, out, errOut)
	}
}
