package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/internal/jobtest"
)

// TestDotIDs: "." and "..", which URL paths remove, are refused as the
// ids of new jobs; a job an earlier version stored under one is listed,
// and reached through the client (which sends the id as %2E%2E, a
// segment the server does not remove) and through the query form of
// the routes a browser uses (/v1/types/{type}/job?id=…), since a browser
// removes %2E%2E too.
func TestDotIDs(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, httpapi.Options{})
	for _, body := range []string{`{"id":".."}`, `{"id":"."}`, `[{"id":"ok"},{"id":".."}]`} {
		wantError(t, e.do("POST", "/v1/types/email/jobs", "", body), http.StatusBadRequest, httpapi.CodeInvalid, "id", "dot segment")
	}
	c := e.client("")
	if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: ".."}); !isAPIError(err, http.StatusBadRequest, httpapi.CodeInvalid) {
		t.Fatalf("client enqueue of ..: %v", err)
	}
	if n, _ := e.q.Count(ctx, e.db, "email", fdbq.Pending); n != 0 {
		t.Fatalf("%d jobs enqueued by refused requests", n)
	}

	// Jobs stored by an earlier version.
	for _, id := range []string{".", ".."} {
		if _, err := e.q.Add(ctx, e.db, fdbq.NewJob{Type: "email", ID: "stored"}); err != nil {
			t.Fatal(err)
		}
		jobtest.RenameJob(t, e.db, "email", "stored", id)
	}
	page, err := c.List(ctx, "email", httpapi.ListOptions{State: fdbq.Pending})
	if err != nil || len(page.Jobs) != 2 || page.Jobs[0].ID+" "+page.Jobs[1].ID != ". .." && page.Jobs[0].ID+" "+page.Jobs[1].ID != ".. ." {
		t.Fatalf("list: %v %+v", err, page)
	}
	for _, id := range []string{".", ".."} {
		j, err := c.Get(ctx, "email", id)
		if err != nil || j.ID != id || j.State != fdbq.Pending {
			t.Fatalf("get %q: %v %+v", id, err, j)
		}
		if j, err = c.Cancel(ctx, "email", id); err != nil || j.ID != id || j.Outcome != fdbq.Canceled {
			t.Fatalf("cancel %q: %v %+v", id, err, j)
		}
		if j, err = c.Requeue(ctx, "email", id); err != nil || j.ID != id || j.State != fdbq.Pending {
			t.Fatalf("requeue %q: %v %+v", id, err, j)
		}
		if j, err = c.Wait(ctx, "email", id, fdbq.Pending, time.Second); err != nil || j.ID != id {
			t.Fatalf("wait %q: %v %+v", id, err, j)
		}
	}
	// A worker works them: ".." to its end; "." is canceled while it
	// runs, by the query form, and requeued.
	w := e.client("")
	ls, err := w.Accept(ctx, "email", httpapi.AcceptRequest{Max: 2})
	if err != nil || len(ls) != 2 {
		t.Fatalf("accept: %v %v", err, ls)
	}
	for _, l := range ls {
		if err := w.Heartbeat(ctx, l, nil); err != nil {
			t.Fatalf("heartbeat %q: %v", l.ID, err)
		}
		if l.ID == ".." {
			if err := w.Finish(ctx, l, json.RawMessage(`1`)); err != nil {
				t.Fatalf("finish %q: %v", l.ID, err)
			}
		}
	}

	// The query form, as the web UI sends it.
	getQ := func(id string) httpapi.Job {
		t.Helper()
		a := e.do("GET", "/v1/types/email/job?id="+id, "", "")
		var j httpapi.Job
		if a.status != 200 || json.Unmarshal(a.body, &j) != nil {
			t.Fatalf("GET job?id=%s: %d %s", id, a.status, a.body)
		}
		return j
	}
	if j := getQ("%2E%2E"); j.ID != ".." || j.Outcome != fdbq.Succeeded {
		t.Fatalf("GET job?id=..: %+v", j)
	}
	if j := getQ("."); j.ID != "." || j.State != fdbq.Running {
		t.Fatalf("GET job?id=.: %+v", j)
	}
	if a := e.do("POST", "/v1/types/email/job/cancel?id=.", "", ""); a.status != 200 {
		t.Fatalf("cancel by query: %d %s", a.status, a.body)
	}
	if j := getQ("."); j.Outcome != fdbq.Canceled {
		t.Fatalf("GET job?id=. after cancel: %+v", j)
	}
	if a := e.do("POST", "/v1/types/email/job/requeue?id=.", "", ""); a.status != 200 {
		t.Fatalf("requeue by query: %d %s", a.status, a.body)
	}
	if j := getQ("."); j.State != fdbq.Pending {
		t.Fatalf("GET job?id=. after requeue: %+v", j)
	}
	wantError(t, e.do("GET", "/v1/types/email/job", "", ""), http.StatusBadRequest, httpapi.CodeInvalid, "id")
	wantError(t, e.do("GET", "/v1/types/email/job?id=a&id=b", "", ""), http.StatusBadRequest, httpapi.CodeInvalid, "id")
	wantError(t, e.do("GET", "/v1/types/email/job?id=a%01", "", ""), http.StatusBadRequest, httpapi.CodeInvalid, "control character")
	wantError(t, e.do("GET", "/v1/types/email/job?id=nope", "", ""), http.StatusNotFound, httpapi.CodeNotFound)
	if a := e.do("DELETE", "/v1/types/email/job?id=.", "", ""); a.status != 204 {
		t.Fatalf("delete by query: %d %s", a.status, a.body)
	}
	if err := c.Delete(ctx, "email", ".."); err != nil {
		t.Fatalf("delete ..: %v", err)
	}
	for _, id := range []string{".", ".."} {
		if _, err := c.Get(ctx, "email", id); !isAPIError(err, http.StatusNotFound, httpapi.CodeNotFound) {
			t.Fatalf("get %q after delete: %v", id, err)
		}
	}
}

func isAPIError(err error, status int, code string) bool {
	ae, ok := err.(*httpapi.APIError)
	return ok && ae.Status == status && ae.Code == code
}
