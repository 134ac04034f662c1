package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// runIn runs the command in this process and returns its output and exit
// status.
func runIn(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), nil, args, strings.NewReader(""), &out, &errOut)
	return out.String(), errOut.String(), code
}

// list and types show what the server cannot read beside the rest, and
// say how to get rid of it.
func TestUnreadableListAndTypes(t *testing.T) {
	ctx := context.Background()
	db := jobtest.OpenDB(t)
	q := fdbq.New(db, fdbq.Options{})
	for _, typ := range []string{"email", "sms"} {
		if err := q.SetType(ctx, db, typ, fdbq.DefaultTypeSettings()); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"a", "bad"} {
		if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	root := tuple.FromBytes(fdbq.DefaultPrefix)
	if err := db.Transact(ctx, func(tx kv.Tx) error {
		tx.Set(root.MustPack(tuple.Tuple{1, "email", "bad"}), []byte{0x7f})
		tx.Set(root.MustPack(tuple.Tuple{2, "email", nil}), nil)
		tx.Set(root.MustPack(tuple.Tuple{8, "sms"}), []byte("garbage"))
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

	out, errOut, code := runIn(t, "list", "email", "--limit", "1", "--all", "--server", hs.URL)
	if code != 0 || !strings.Contains(out, "\na ") || strings.Contains(out, "bad") ||
		!strings.Contains(errOut, "unreadable: bad: job email/bad: corrupt record: unknown format 0x7f") ||
		!strings.Contains(errOut, `unreadable: malformed pending index entry`) ||
		!strings.Contains(errOut, "jobstage delete email ID") {
		t.Fatalf("list: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code = runIn(t, "list", "email", "--all", "--json", "--server", hs.URL)
	var page httpapi.Page
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Jobs) != 1 || len(page.Unreadable) != 2 {
		t.Fatalf("list --json: exit %d\n%s", code, out)
	}

	out, errOut, code = runIn(t, "types", "--server", hs.URL)
	if code != 0 || !strings.Contains(out, "email") || !strings.Contains(out, "sms") ||
		!strings.Contains(errOut, `unreadable: type "sms": corrupt settings`) {
		t.Fatalf("types: exit %d\n%s%s", code, out, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "sms") && !strings.Contains(line, "?") {
			t.Fatalf("types shows settings it cannot read: %q", line)
		}
	}
	out, _, code = runIn(t, "types", "--json", "--server", hs.URL)
	if code != 0 || !strings.Contains(out, `"error": "type \"sms\": corrupt settings`) {
		t.Fatalf("types --json: exit %d\n%s", code, out)
	}

	_, errOut, code = runIn(t, "cancel", "email", "bad", "--server", hs.URL)
	if code != 1 || !strings.Contains(errOut, "corrupt (HTTP 500)") || !strings.Contains(errOut, "cannot cancel") {
		t.Fatalf("cancel: exit %d\n%s", code, errOut)
	}
	if out, errOut, code := runIn(t, "delete", "email", "bad", "--server", hs.URL); code != 0 {
		t.Fatalf("delete: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := runIn(t, "list", "email", "--server", hs.URL); code != 0 || strings.Contains(errOut, "unreadable: bad") {
		t.Fatalf("list after delete: exit %d\n%s", code, errOut)
	}
}
