package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/internal/jobtest"
)

// listedIDs is the first column of list's table, below its header.
func listedIDs(out string) []string {
	var ids []string
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); i > 0 && len(f) > 0 {
			ids = append(ids, f[0])
		}
	}
	return ids
}

// TestListFlags: list's --key, --id-prefix, --since and --until (RFC 3339
// or how long ago) list the jobs that match, following the pages with
// --all or with the command printed for the next page, which repeats the
// filters; bad values are refused saying which flag and why.
func TestListFlags(t *testing.T) {
	ctx := context.Background()
	db := jobtest.OpenDB(t)
	q := fdbq.New(db, fdbq.Options{})
	if err := q.SetType(ctx, db, "email", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, j := range []struct {
		id, key string
		ago     time.Duration
	}{{"a1", "k1", 3 * time.Hour}, {"a2", "k2", 2 * time.Hour}, {"b1", "k1", time.Hour}, {"a3", "k1", 10 * time.Minute}} {
		if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: j.id, Key: j.key, ScheduledAt: now.Add(-j.ago)}); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := httpapi.New(q, httpapi.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	list := func(args ...string) ([]string, string) {
		t.Helper()
		out, errOut, code := runIn(t, append([]string{"list", "email", "--server", hs.URL}, args...)...)
		if code != 0 {
			t.Fatalf("list %v: exit %d\n%s%s", args, code, out, errOut)
		}
		ids := listedIDs(out)
		slices.Sort(ids)
		return ids, errOut
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--key", "k1"}, []string{"a1", "a3", "b1"}},
		{[]string{"--key", "k1", "--id-prefix", "a"}, []string{"a1", "a3"}},
		{[]string{"--id-prefix", "a", "--since", now.Add(-150 * time.Minute).Format(time.RFC3339Nano), "--until", now.Format(time.RFC3339)}, []string{"a2", "a3"}},
		{[]string{"--since", "90m"}, []string{"a3", "b1"}},
		{[]string{"--until", "90m", "--all", "--limit", "1"}, []string{"a1", "a2"}},
		{[]string{"--key", "k1", "--all", "--limit", "1"}, []string{"a1", "a3", "b1"}},
		{[]string{"--key", "k3"}, nil},
		{[]string{"--key", "k1", "--state", "finished"}, nil},
	} {
		if got, _ := list(tc.args...); !slices.Equal(got, tc.want) {
			t.Fatalf("list %v: %v, want %v", tc.args, got, tc.want)
		}
	}

	// Without --all, the command printed for the next page has the
	// filters, a time as the instant it was.
	var seen []string
	args := []string{"--key", "k1", "--since", "4h", "--limit", "1"}
	for page := 0; ; page++ {
		ids, errOut := list(args...)
		seen = append(seen, ids...)
		more, ok := strings.CutPrefix(strings.TrimSpace(errOut), "more: jobstage list email ")
		if !ok {
			break
		}
		if !strings.Contains(more, "--key k1 --since 20") || page > 5 {
			t.Fatalf("page %d: the next page's command %q", page, more)
		}
		args = strings.Fields(more)
	}
	if slices.Sort(seen); !slices.Equal(seen, []string{"a1", "a3", "b1"}) {
		t.Fatalf("the pages the printed commands list: %v", seen)
	}

	out, _, code := runIn(t, "list", "email", "--key", "k2", "--json", "--server", hs.URL)
	var page httpapi.Page
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != "a2" {
		t.Fatalf("list --key --json: exit %d\n%s", code, out)
	}

	first, errOut, _ := runIn(t, "list", "email", "--key", "k1", "--limit", "1", "--server", hs.URL)
	_, cursor, _ := strings.Cut(strings.TrimSpace(errOut), "--cursor ")
	if cursor == "" {
		t.Fatalf("no cursor printed:\n%s%s", first, errOut)
	}
	for _, tc := range []struct {
		args  []string
		code  int
		words []string
	}{
		{[]string{"--since", "yesterday"}, 2, []string{`--since "yesterday"`, "RFC 3339"}},
		{[]string{"--until", "-1h"}, 2, []string{"--until", "not negative"}},
		{[]string{"--since", "1h", "--until", "2h"}, 1, []string{"invalid (HTTP 400)", "is after until"}},
		{[]string{"--id-prefix", "a\x01"}, 1, []string{"id_prefix", "control character"}},
		{[]string{"--key", strings.Repeat("k", 200)}, 1, []string{"key", "longer than 128"}},
		{[]string{"--key", "k2", "--cursor", cursor}, 1, []string{"other filters"}},
		{[]string{"--cursor", cursor}, 1, []string{"listing with filters"}},
	} {
		out, errOut, code := runIn(t, append([]string{"list", "email", "--server", hs.URL}, tc.args...)...)
		if code != tc.code {
			t.Fatalf("list %q: exit %d, want %d\n%s%s", tc.args, code, tc.code, out, errOut)
		}
		for _, w := range tc.words {
			if !strings.Contains(errOut, w) {
				t.Fatalf("list %q: %q does not say %q", tc.args, errOut, w)
			}
		}
	}
}
