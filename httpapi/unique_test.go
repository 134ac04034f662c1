package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

// TestEnqueueUnique: an enqueue with unique answers added, then the
// duplicate, or replaces it, or is refused with 409 duplicate naming the
// job; bad unique options answer 400 naming the field.
func TestEnqueueUnique(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	ctx := context.Background()
	c := e.client("")
	u := &httpapi.Unique{Fields: []string{"to"}, Window: httpapi.Duration(time.Hour)}
	a, err := c.Enqueue(ctx, "email", httpapi.NewJob{Data: json.RawMessage(`{"to":"a@b.c","n":1}`), Unique: u})
	if err != nil || a.Added != fdbq.AddedNew {
		t.Fatalf("first: %+v %v", a, err)
	}
	b, err := c.Enqueue(ctx, "email", httpapi.NewJob{Data: json.RawMessage(`{"n":2,"to":"a@b.c"}`), Unique: u})
	if err != nil || b.Added != fdbq.AddedDuplicate || b.ID != a.ID || string(b.Data) != `{"to":"a@b.c","n":1}` {
		t.Fatalf("duplicate: %+v %v", b, err)
	}
	r := *u
	r.OnDuplicate = "replace"
	got, err := c.Enqueue(ctx, "email", httpapi.NewJob{Data: json.RawMessage(`{"n":3,"to":"a@b.c"}`), Unique: &r})
	if err != nil || got.Added != fdbq.AddedReplaced || got.ID != a.ID || string(got.Data) != `{"n":3,"to":"a@b.c"}` {
		t.Fatalf("replace: %+v %v", got, err)
	}

	ans := e.do("POST", "/v1/types/email/jobs", "", `{"data":{"to":"a@b.c"},"unique":{"fields":["to"],"on_duplicate":"refuse"}}`)
	wantError(t, ans, http.StatusConflict, httpapi.CodeDuplicate, a.ID)
	if ae := ans.apiErr(t); ae.JobID != a.ID {
		t.Fatalf("job_id %q, want %q", ae.JobID, a.ID)
	}
	// A job without unique is not affected.
	ans = e.do("POST", "/v1/types/email/jobs", "", `{"data":{"to":"a@b.c"}}`)
	if ans.status != http.StatusCreated {
		t.Fatalf("plain enqueue: %d %s", ans.status, ans.body)
	}

	for body, field := range map[string]string{
		`{"data":{"a":1},"unique":{"states":["done"]}}`:           "unique.states",
		`{"data":{"a":1},"unique":{"on_duplicate":"skip"}}`:       "unique.on_duplicate",
		`{"data":{"a":1},"unique":{"window":"-1h"}}`:              "unique.window",
		`{"data":{"a":1},"unique":{"window":"soon"}}`:             "unique.window",
		`{"data":{"a":1},"unique":{"fields":[""]}}`:               "unique.fields[0]",
		`{"data":[1],"unique":{"fields":["a"]}}`:                  "JSON object",
		`[{"data":1},{"data":{"a":1},"unique":{"states":["x"]}}]`: "[1].unique.states",
		`{"data":{"a":1},"unique":{"field":["a"]}}`:               "field",
	} {
		ans := e.do("POST", "/v1/types/email/jobs", "", body)
		if ans.status != http.StatusBadRequest || !jsonContains(ans.body, field) {
			t.Fatalf("%s: %d %s, want 400 naming %s", body, ans.status, ans.body, field)
		}
	}
	if n, _ := e.q.Count(ctx, e.db, "email", fdbq.Pending); n != 2 {
		t.Fatalf("%d pending, want 2", n)
	}
}

func jsonContains(body []byte, s string) bool {
	var e httpapi.APIError
	return json.Unmarshal(body, &e) == nil && strings.Contains(e.Message, s)
}

// TestEnqueueUniqueConcurrently: 32 clients enqueue one unique job over
// the real listener at once; one job exists, and one answer says added.
func TestEnqueueUniqueConcurrently(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	ctx := context.Background()
	c := e.client("")
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		added int
		ids   = map[string]bool{}
	)
	for range 32 {
		wg.Go(func() {
			j, err := c.Enqueue(ctx, "email", httpapi.NewJob{Data: json.RawMessage(`{"k":1}`), Unique: &httpapi.Unique{}})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("enqueue: %v", err)
				return
			}
			ids[j.ID] = true
			if j.Added == fdbq.AddedNew {
				added++
			}
		})
	}
	wg.Wait()
	if added != 1 || len(ids) != 1 {
		t.Fatalf("%d answers say added, %d jobs named; want 1 and 1", added, len(ids))
	}
	if n, _ := e.q.Count(ctx, e.db, "email", fdbq.Pending); n != 1 {
		t.Fatalf("%d pending, want 1", n)
	}
}
