package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

// listIDs follows a listing's pages through the client and returns the
// ids listed.
func listIDs(t *testing.T, c *httpapi.Client, o httpapi.ListOptions) []string {
	t.Helper()
	var ids []string
	for pages := 0; ; pages++ {
		p, err := c.List(context.Background(), "email", o)
		if err != nil {
			t.Fatalf("list %+v: %v", o, err)
		}
		if len(p.Jobs) > o.Limit && o.Limit > 0 {
			t.Fatalf("list %+v: a page of %d", o, len(p.Jobs))
		}
		for _, j := range p.Jobs {
			ids = append(ids, j.ID)
		}
		if p.Next == "" {
			return ids
		}
		if pages > 1000 {
			t.Fatalf("list %+v: the listing does not end", o)
		}
		o.Cursor = p.Next
	}
}

// TestListFilters: over a real listener, the list route's key,
// id_prefix, since and until (through the Go client, and raw) list the
// jobs that match, in the order of the unfiltered listing, a page at a
// time; bad values are 400 invalid naming the parameter and what is
// wrong, and so is a cursor of another listing.
func TestListFilters(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	ctx := context.Background()
	c := e.client("")
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var batch []httpapi.NewJob
	for i := range 40 {
		batch = append(batch, httpapi.NewJob{
			ID:          fmt.Sprintf("%s-%02d", []string{"a", "b", "ab"}[i%3], i),
			Key:         []string{"", "k1", "k2", "k1"}[i%4],
			ScheduledAt: base.Add(time.Duration(i) * time.Minute),
		})
	}
	batch = append(batch, httpapi.NewJob{ID: "a-later", Key: "k1", ScheduledAt: time.Now().Add(time.Hour)})
	if _, err := c.EnqueueBatch(ctx, "email", batch); err != nil {
		t.Fatal(err)
	}
	// Some run, and of them some finish.
	ls, err := c.Accept(ctx, "email", httpapi.AcceptRequest{Max: 12})
	if err != nil || len(ls) != 12 {
		t.Fatalf("accept: %d, %v", len(ls), err)
	}
	for _, l := range ls[:6] {
		if err := c.Finish(ctx, l, nil); err != nil {
			t.Fatal(err)
		}
	}
	jobs := map[string]*httpapi.Job{}
	for _, j := range batch {
		got, err := c.Get(ctx, "email", j.ID)
		if err != nil {
			t.Fatal(err)
		}
		jobs[j.ID] = got
	}
	timeOf := func(j *httpapi.Job) time.Time {
		switch j.State {
		case fdbq.Pending:
			return j.ScheduledAt
		case fdbq.Running:
			return j.StartedAt
		}
		return j.FinishedAt
	}
	east := time.FixedZone("east", 2*3600) // sent with its offset, a '+' in the query
	for _, state := range []fdbq.State{fdbq.Pending, fdbq.Running, fdbq.Finished} {
		all := listIDs(t, c, httpapi.ListOptions{State: state, Limit: 1000})
		var times []time.Time
		for _, id := range all {
			times = append(times, timeOf(jobs[id]))
		}
		slices.SortFunc(times, time.Time.Compare)
		mid := times[len(times)/2]
		for _, o := range []httpapi.ListOptions{
			{Key: "k1"},
			{Key: "k2", IDPrefix: "a"},
			{IDPrefix: "ab-"},
			{IDPrefix: "nothing"},
			{Since: mid},
			{Until: mid.In(east)},
			{Since: times[0].Add(time.Microsecond), Until: times[len(times)-1].Add(time.Millisecond)},
			{Key: "k1", IDPrefix: "a", Since: times[0], Until: mid.Add(time.Nanosecond).In(east)},
		} {
			o.State, o.Limit = state, 2
			var want []string
			for _, id := range all {
				j, t := jobs[id], timeOf(jobs[id])
				if (o.Key == "" || j.Key == o.Key) && strings.HasPrefix(id, o.IDPrefix) &&
					(o.Since.IsZero() || !t.Before(o.Since)) && (o.Until.IsZero() || t.Before(o.Until)) {
					want = append(want, id)
				}
			}
			if got := listIDs(t, c, o); !slices.Equal(got, want) {
				t.Fatalf("%s %+v:\n got %v\nwant %v", state, o, got, want)
			}
		}
	}

	// The parameters as a caller without the client writes them.
	q := url.Values{"key": {"k1"}, "id_prefix": {"a"}, "since": {base.Format(time.RFC3339)}, "until": {"2100-01-01T00:00:00+02:00"}, "limit": {"1"}}
	a := e.do("GET", "/v1/types/email/jobs?"+q.Encode(), "", "")
	if a.status != http.StatusOK || !strings.Contains(string(a.body), `"next":"`) {
		t.Fatalf("raw filtered list: %d %s", a.status, a.body)
	}
	first, err := c.List(ctx, "email", httpapi.ListOptions{Key: "k1", Limit: 1})
	if err != nil || first.Next == "" {
		t.Fatalf("first page by key: %v, %+v", err, first)
	}
	for _, tc := range []struct {
		query string
		words []string
	}{
		{"since=yesterday", []string{"since", `"yesterday" is not an RFC 3339 time`}},
		{"until=2030-01-02T15:04:05", []string{"until", "RFC 3339"}},
		{"until=2030-01-02T15:04:05+02:00", []string{"until", "%2B"}},
		{"since=2030-01-02T00:00:00Z&until=2020-01-01T00:00:00Z", []string{"since 2030-01-02T00:00:00Z is after until 2020-01-01T00:00:00Z"}},
		{"id_prefix=a%00", []string{"id_prefix", "control character"}},
		{"id_prefix=%ff", []string{"id_prefix", "not valid UTF-8"}},
		{"id_prefix=" + strings.Repeat("a", fdbq.MaxIDSize+1), []string{"id_prefix", "longer than 256"}},
		{"key=k%0a", []string{"key", "control character"}},
		{"key=" + strings.Repeat("k", fdbq.MaxKeySize+1), []string{"key", "longer than 128"}},
		{"key=k2&cursor=" + url.QueryEscape(first.Next), []string{"other filters"}},
		{"cursor=" + url.QueryEscape(first.Next), []string{"listing with filters"}},
		{"key=k1&state=running&cursor=" + url.QueryEscape(first.Next), []string{"other filters"}},
		{"idprefix=a", []string{"unknown query parameter", "id_prefix"}},
	} {
		a := e.do("GET", "/v1/types/email/jobs?"+tc.query, "", "")
		if a.status != http.StatusBadRequest {
			t.Fatalf("%s: %d %s", tc.query, a.status, a.body)
		}
		wantError(t, a, http.StatusBadRequest, httpapi.CodeInvalid, tc.words...)
	}
	// An empty value is no filter.
	if a := e.do("GET", "/v1/types/email/jobs?key=&id_prefix=&since=&until=", "", ""); a.status != http.StatusOK {
		t.Fatalf("empty filters: %d %s", a.status, a.body)
	}
}
