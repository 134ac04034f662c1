package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/internal/jobtest"
)

// jobstage history prints the minutes with counts and the sums (every
// minute with --every-minute), JSON with --json, and refuses a span the
// server would not read.
func TestHistoryCommand(t *testing.T) {
	ctx := context.Background()
	db := jobtest.OpenDB(t)
	now := time.Date(2030, 1, 2, 15, 4, 5, 0, time.UTC)
	q := fdbq.New(db, fdbq.Options{Now: func() time.Time { return now }})
	s := fdbq.DefaultTypeSettings()
	s.Retry = fdbq.RetryPolicy{MaxAttempts: 2, Backoff: fdbq.Constant}
	if err := q.SetType(ctx, db, "email", s); err != nil {
		t.Fatal(err)
	}
	end := func(id string, how fdbq.AttemptEnd) {
		t.Helper()
		if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: id}); err != nil {
			t.Fatal(err)
		}
		ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 1})
		if err != nil || len(ls) != 1 {
			t.Fatalf("accept %s: %v", id, err)
		}
		if _, err := q.End(ctx, db, ls[0], fdbq.Ending{How: how, Cause: "boom"}); err != nil {
			t.Fatal(err)
		}
	}
	end("a", fdbq.AttemptSucceeded)
	end("b", fdbq.AttemptFailed)
	now = now.Add(2 * time.Minute)
	end("c", fdbq.AttemptCanceled)
	srv, err := httpapi.New(q, httpapi.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()

	// Minutes print in local time.
	local := func(h, m int) []string {
		return strings.Fields(time.Date(2030, 1, 2, h, m, 0, 0, time.UTC).Local().Format("2006-01-02 15:04"))
	}
	clock := func(h, m int) string { return local(h, m)[1] }
	out, errOut, code := runIn(t, "history", "email", "--minutes", "5", "--server", hs.URL)
	if code != 0 || errOut != "" {
		t.Fatalf("history: exit %d\n%s%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header, two minutes and the total:\n%s", out)
	}
	for i, want := range [][]string{
		{"MINUTE", "SUCCEEDED", "FAILED", "CANCELED", "RETRIED", "RECYCLED"},
		append(local(15, 4), "1", "0", "0", "1", "0"),
		append(local(15, 6), "0", "0", "1", "0", "0"),
		{"total", clock(15, 2) + "–" + clock(15, 7), "1", "0", "1", "1", "0"},
	} {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("line %d: %q, want %q\n%s", i, got, want, out)
		}
	}
	out, _, code = runIn(t, "history", "email", "--minutes", "5", "--every-minute", "--server", hs.URL)
	if n := strings.Count(out, "\n"); code != 0 || n != 7 {
		t.Fatalf("--every-minute: exit %d, %d lines:\n%s", code, n, out)
	}
	out, _, code = runIn(t, "history", "email", "--minutes", "3", "--until", "2030-01-02T15:04:59Z", "--json", "--server", hs.URL)
	var h httpapi.TypeHistory
	if code != 0 || json.Unmarshal([]byte(out), &h) != nil || len(h.Minutes) != 3 || h.Minutes[2].Succeeded != 1 || h.Minutes[2].Retried != 1 {
		t.Fatalf("--json: exit %d: %s", code, out)
	}
	if _, errOut, code := runIn(t, "history", "email", "--minutes", "1441", "--server", hs.URL); code != 2 || !strings.Contains(errOut, "--minutes 1441") {
		t.Fatalf("--minutes 1441: exit %d: %s", code, errOut)
	}
	for _, until := range []string{"soon", "0001-01-01T00:00:00Z"} {
		if _, errOut, code := runIn(t, "history", "email", "--until", until, "--server", hs.URL); code != 2 || !strings.Contains(errOut, "--until") {
			t.Fatalf("--until %s: exit %d: %s", until, code, errOut)
		}
	}
	if _, errOut, code := runIn(t, "history", "sms", "--server", hs.URL); code != 1 || !strings.Contains(errOut, "unknown_type (HTTP 404)") {
		t.Fatalf("unknown type: exit %d: %s", code, errOut)
	}
}
