package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// TestSchedules: the schedules routes list, show, pause, resume and
// delete the stored schedules, with the roles the API gives them; a name
// that is not one answers 400, an unknown one 404 unknown_schedule, and a
// record that does not decode is listed with its error and answers 500
// corrupt alone.
func TestSchedules(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens})
	ctx := context.Background()
	for _, name := range []string{"nightly", "beat"} {
		s := fdbq.Schedule{Name: name, Cron: "0 30 2 * * *", Timezone: "Europe/Paris", Missed: fdbq.MissedEach,
			Job: fdbq.NewJob{Type: "email", Data: json.RawMessage(`{"to":"ops"}`)}}
		if name == "beat" {
			s.Cron, s.Timezone, s.Every = "", "", 30*time.Second
		}
		if err := e.q.DeclareSchedule(ctx, e.db, s); err != nil {
			t.Fatal(err)
		}
	}
	admin, producer := e.client("admin-secret"), e.client("producer-secret")
	list, err := producer.Schedules(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	b, n := list[0], list[1]
	if b.Name != "beat" || b.Every != "30s" || b.Missed != "each" || b.Next == nil || b.Paused ||
		n.Name != "nightly" || n.Cron != "0 30 2 * * *" || n.Timezone != "Europe/Paris" || n.Missed != "each" || string(n.Data) != `{"to":"ops"}` {
		t.Fatalf("listed %+v %+v", b, n)
	}
	if _, err := producer.PauseSchedule(ctx, "beat"); !isCode(err, httpapi.CodeForbidden) {
		t.Fatalf("a producer paused a schedule: %v", err)
	}
	if _, err := e.client("worker-secret").Schedules(ctx); !isCode(err, httpapi.CodeForbidden) {
		t.Fatalf("a worker listed schedules: %v", err)
	}
	p, err := admin.PauseSchedule(ctx, "beat")
	if err != nil || !p.Paused || p.Next != nil {
		t.Fatalf("pause: %+v %v", p, err)
	}
	r, err := admin.ResumeSchedule(ctx, "beat")
	if err != nil || r.Paused || r.Next == nil {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if err := admin.DeleteSchedule(ctx, "beat"); err != nil {
		t.Fatal(err)
	}
	wantError(t, e.do("GET", "/v1/schedules/beat", "admin-secret", ""), http.StatusNotFound, httpapi.CodeUnknownSchedule, "beat")
	wantError(t, e.do("POST", "/v1/schedules/beat/pause", "admin-secret", ""), http.StatusNotFound, httpapi.CodeUnknownSchedule)
	wantError(t, e.do("DELETE", "/v1/schedules/beat", "admin-secret", ""), http.StatusNotFound, httpapi.CodeUnknownSchedule)
	wantError(t, e.do("GET", "/v1/schedules/-x", "admin-secret", ""), http.StatusBadRequest, httpapi.CodeInvalid, "schedule name")
	wantError(t, e.do("GET", "/v1/schedules/"+strings.Repeat("a", 101), "admin-secret", ""), http.StatusBadRequest, httpapi.CodeInvalid, "longer than 100")
	wantError(t, e.do("GET", "/v1/schedules/a%FFb", "admin-secret", ""), http.StatusBadRequest, httpapi.CodeInvalid)

	key := append(append([]byte{}, fdbq.DefaultPrefix...), tuple.Tuple{21, "nightly"}.MustPack()...)
	if err := e.db.Transact(ctx, func(tx kv.Tx) error { tx.Set(key, []byte(`{"def":`)); return nil }); err != nil {
		t.Fatal(err)
	}
	list, err = producer.Schedules(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "nightly" || !strings.Contains(list[0].Error, "schedule nightly") || list[0].Type != "" {
		t.Fatalf("list with a corrupt record: %+v %v", list, err)
	}
	wantError(t, e.do("GET", "/v1/schedules/nightly", "admin-secret", ""), http.StatusInternalServerError, httpapi.CodeCorrupt, "nightly")
	// Delete still removes it.
	if err := admin.DeleteSchedule(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	if list, err := producer.Schedules(ctx); err != nil || len(list) != 0 {
		t.Fatalf("after delete: %+v %v", list, err)
	}
}

func isCode(err error, code string) bool {
	var ae *httpapi.APIError
	return errors.As(err, &ae) && ae.Code == code
}

// FuzzSchedulePaths: any name in a schedules path answers without a
// server error (the stored schedules are all readable here).
func FuzzSchedulePaths(f *testing.F) {
	e := newEnv(f, httpapi.Options{})
	if err := e.q.DeclareSchedule(context.Background(), e.db, fdbq.Schedule{Name: "beat", Every: time.Minute, Job: fdbq.NewJob{Type: "email"}}); err != nil {
		f.Fatal(err)
	}
	for i, s := range []string{"beat", "-x", "a%2Fb", "%FF", "..", strings.Repeat("z", 200), "beat%00", "b%C3%A9"} {
		f.Add(uint8(i), s)
	}
	ops := []struct{ method, suffix string }{{"GET", ""}, {"POST", "/pause"}, {"POST", "/resume"}, {"DELETE", ""}, {"GET", "/../x"}}
	f.Fuzz(func(t *testing.T, which uint8, name string) {
		op := ops[int(which)%len(ops)]
		req, err := http.NewRequest(op.method, "http://127.0.0.1/v1/schedules/"+name+op.suffix, nil)
		if err != nil {
			return // not a URL a client could send
		}
		req.RemoteAddr = "127.0.0.1:1"
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s: %d %s", op.method, req.URL, rec.Code, rec.Body)
		}
	})
}
