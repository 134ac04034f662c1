package httpapi_test

import (
	"context"
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

// GET /v1/types/{type}/history answers every minute of the span asked,
// with what the worker routes ended in it: a finish sent again (the
// worker did not hear the answer) counts once.
func TestTypeHistory(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	ctx := context.Background()
	c := e.client("")
	for _, id := range []string{"a", "b"} {
		if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := c.Accept(ctx, "email", httpapi.AcceptRequest{Max: 2})
	if err != nil || len(ls) != 2 {
		t.Fatalf("accept: %v %v", ls, err)
	}
	for range 2 {
		if err := c.Finish(ctx, ls[0], nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Fail(ctx, ls[1], "boom"); err != nil {
		t.Fatal(err)
	}
	get := func(query string) httpapi.TypeHistory {
		t.Helper()
		a := e.do("GET", "/v1/types/email/history"+query, "", "")
		var h httpapi.TypeHistory
		if a.status != 200 || json.Unmarshal(a.body, &h) != nil {
			t.Fatalf("history%s: %d %s", query, a.status, a.body)
		}
		return h
	}
	h := get("")
	if len(h.Minutes) != 60 || h.Type != "email" || h.Unreadable != 0 {
		t.Fatalf("default span: %d minutes: %+v", len(h.Minutes), h)
	}
	var sum httpapi.HistoryMinute
	for i, m := range h.Minutes {
		if i > 0 && !m.At.Equal(h.Minutes[i-1].At.Add(time.Minute)) {
			t.Fatalf("minute %d at %v after %v", i, m.At, h.Minutes[i-1].At)
		}
		sum.Succeeded += m.Succeeded
		sum.Failed += m.Failed
		sum.Canceled += m.Canceled
		sum.Retried += m.Retried
		sum.Recycled += m.Recycled
	}
	if sum != (httpapi.HistoryMinute{Succeeded: 1, Retried: 1}) {
		t.Fatalf("last hour's sums %+v, want one success and one retried failure", sum)
	}
	if last := h.Minutes[59].At; time.Since(last) < 0 || time.Since(last) > 2*time.Minute {
		t.Fatalf("the last minute is %v, now is %v", last, time.Now())
	}
	// A span in the past ends with until's minute.
	until := time.Date(2030, 1, 2, 15, 4, 5, 0, time.UTC)
	h = get("?minutes=3&until=" + url.QueryEscape(until.Format(time.RFC3339)))
	if len(h.Minutes) != 3 || !h.Minutes[2].At.Equal(until.Truncate(time.Minute)) || h.Minutes[0].Succeeded != 0 {
		t.Fatalf("3 minutes until %v: %+v", until, h)
	}
	if h = get("?minutes=1440"); len(h.Minutes) != fdbq.MaxHistoryMinutes {
		t.Fatalf("a day: %d minutes", len(h.Minutes))
	}

	wantError(t, e.do("GET", "/v1/types/email/history?minutes=1441", "", ""), 400, httpapi.CodeInvalid, "minutes", "1440")
	wantError(t, e.do("GET", "/v1/types/email/history?minutes=0", "", ""), 400, httpapi.CodeInvalid, "minutes")
	wantError(t, e.do("GET", "/v1/types/email/history?minutes=x", "", ""), 400, httpapi.CodeInvalid, "minutes")
	wantError(t, e.do("GET", "/v1/types/email/history?until=yesterday", "", ""), 400, httpapi.CodeInvalid, "until")
	wantError(t, e.do("GET", "/v1/types/email/history?since=2030-01-01T00:00:00Z", "", ""), 400, httpapi.CodeInvalid, "since")
	wantError(t, e.do("GET", "/v1/types/nosuch/history", "", ""), 404, httpapi.CodeUnknownType)
	wantError(t, e.do("GET", "/v1/types/%ff/history", "", ""), 400, httpapi.CodeInvalid)
}

// The history route is for the roles that read a type's stats: a
// metrics token gets 403.
func TestTypeHistoryRoles(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: []httpapi.Token{
		{Name: "p", Secret: "producer-secret-1", Role: httpapi.RoleProducer},
		{Name: "w", Secret: "worker-secret-12", Role: httpapi.RoleWorker},
		{Name: "m", Secret: "metrics-secret-1", Role: httpapi.RoleMetrics},
	}})
	for _, tok := range []string{"producer-secret-1", "worker-secret-12"} {
		if a := e.do("GET", "/v1/types/email/history?minutes=2", tok, ""); a.status != 200 {
			t.Fatalf("%s: %d %s", tok, a.status, a.body)
		}
	}
	wantError(t, e.do("GET", "/v1/types/email/history", "metrics-secret-1", ""), 403, httpapi.CodeForbidden)
	wantError(t, e.do("GET", "/v1/types/email/history", "", ""), 401, httpapi.CodeUnauthorized)
}

// A span at the ends of the times RFC 3339 writes is answered: one
// within them in full, one that reaches past them (its first minute
// before the year 0, its last after 9999, by an offset too) refused as
// invalid, not failed as an answer that could not be encoded.
func TestTypeHistoryEndsOfTime(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	for _, query := range []string{
		"minutes=1&until=0000-01-01T00:00:59Z",
		"minutes=1440&until=0000-01-01T23:59:59Z",
		"minutes=1440&until=9999-12-31T23:59:59Z",
		"minutes=1&until=9999-12-31T23:59:59.999999999Z",
	} {
		a := e.do("GET", "/v1/types/email/history?"+query, "", "")
		var h httpapi.TypeHistory
		if a.status != 200 || json.Unmarshal(a.body, &h) != nil || len(h.Minutes) == 0 {
			t.Fatalf("%s: %d %s", query, a.status, a.body)
		}
	}
	for _, query := range []string{
		"minutes=2&until=0000-01-01T00:00:00Z",
		"minutes=1440&until=0000-01-01T00:00:00Z",
		"minutes=1&until=9999-12-31T23:59:59-10:00",
		"minutes=1&until=0000-01-01T00:00:00%2B01:00",
	} {
		wantError(t, e.do("GET", "/v1/types/email/history?"+query, "", ""), 400, httpapi.CodeInvalid, "until")
	}
}
