package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

func TestEnqueueGetDelete(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	ctx := context.Background()
	c := e.client("")

	sched := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	j, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: "order-42", Data: json.RawMessage(`{"to": "a@b.c"}`), Priority: 3, MaxAttempts: 2, ScheduledAt: sched})
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != "order-42" || j.Type != "email" || j.State != fdbq.Pending || j.Priority != 3 || j.MaxAttempts != 2 ||
		string(j.Data) != `{"to":"a@b.c"}` || !j.ScheduledAt.Equal(sched) || j.AddedAt.IsZero() {
		t.Fatalf("enqueued %+v", j)
	}

	// The answer is what the store holds.
	stored, err := e.q.Get(ctx, e.db, "email", "order-42")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Priority != 3 || !stored.ScheduledAt.Equal(sched) || string(stored.Data) != `{"to":"a@b.c"}` {
		t.Fatalf("stored %+v", stored)
	}
	got, err := c.Get(ctx, "email", "order-42")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != j.ID || got.State != fdbq.Pending || !got.AddedAt.Equal(j.AddedAt) {
		t.Fatalf("got %+v, enqueued %+v", got, j)
	}

	// Raw: 201, Location, zero times omitted, data null when none.
	a := e.do("POST", "/v1/types/email/jobs", "", `{}`)
	if a.status != http.StatusCreated {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	var raw map[string]any
	if err := json.Unmarshal(a.body, &raw); err != nil {
		t.Fatal(err)
	}
	id, _ := raw["id"].(string)
	if id == "" || a.header.Get("Location") != "/v1/types/email/jobs/"+id {
		t.Fatalf("id %q, Location %q", id, a.header.Get("Location"))
	}
	if _, ok := raw["data"]; !ok || raw["data"] != nil {
		t.Fatalf("data = %v, want null", raw["data"])
	}
	for _, k := range []string{"started_at", "finished_at", "heartbeat_at", "outcome", "result"} {
		if _, ok := raw[k]; ok {
			t.Fatalf("%s present in a pending job: %s", k, a.body)
		}
	}

	if err := c.Delete(ctx, "email", "order-42"); err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(ctx, "email", "order-42")
	var ae *httpapi.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusNotFound || ae.Code != httpapi.CodeNotFound {
		t.Fatalf("get after delete: %v", err)
	}
	if err := c.Delete(ctx, "email", "order-42"); !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		t.Fatalf("second delete: %v", err)
	}
}

func TestEnqueueBatchAndList(t *testing.T) {
	var enqueued []string
	e := newEnv(t, httpapi.Options{OnEnqueue: func(typ string, n int) { enqueued = append(enqueued, fmt.Sprint(typ, n)) }})
	ctx := context.Background()
	c := e.client("")

	batch := make([]httpapi.NewJob, 7)
	for i := range batch {
		batch[i] = httpapi.NewJob{ID: fmt.Sprintf("j%d", i), Data: json.RawMessage(fmt.Sprint(i))}
	}
	jobs, err := c.EnqueueBatch(ctx, "email", batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 7 || jobs[6].ID != "j6" || string(jobs[6].Data) != "6" {
		t.Fatalf("batch answered %d jobs: %+v", len(jobs), jobs)
	}
	if n, _ := e.q.Count(ctx, e.db, "email", fdbq.Pending); n != 7 {
		t.Fatalf("%d pending, want 7", n)
	}

	// A batch is one transaction: one bad job adds none.
	bad := append(batch[:2:2], httpapi.NewJob{ID: strings.Repeat("x", fdbq.MaxIDSize+1)})
	if _, err := c.EnqueueBatch(ctx, "email", bad); err == nil {
		t.Fatal("batch with an oversized id was accepted")
	}
	if n, _ := e.q.Count(ctx, e.db, "email", fdbq.Pending); n != 7 {
		t.Fatalf("%d pending after a refused batch, want 7", n)
	}
	if len(enqueued) != 1 || enqueued[0] != "email7" {
		t.Fatalf("OnEnqueue calls %v, want [email7]", enqueued)
	}

	// Pages of 3 cover every job once.
	seen := map[string]bool{}
	cursor, pages := "", 0
	for {
		p, err := c.List(ctx, "email", httpapi.ListOptions{Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, j := range p.Jobs {
			if seen[j.ID] || j.State != fdbq.Pending {
				t.Fatalf("job %s (%s) listed twice or in the wrong state", j.ID, j.State)
			}
			seen[j.ID] = true
		}
		if p.Next == "" {
			break
		}
		if len(p.Jobs) != 3 {
			t.Fatalf("a page before the last has %d jobs", len(p.Jobs))
		}
		cursor = p.Next
	}
	if len(seen) != 7 || pages != 3 {
		t.Fatalf("listed %d jobs in %d pages, want 7 in 3", len(seen), pages)
	}
	p, err := c.List(ctx, "email", httpapi.ListOptions{State: fdbq.Finished})
	if err != nil || len(p.Jobs) != 0 || p.Next != "" {
		t.Fatalf("finished page %+v, %v", p, err)
	}
	a := e.do("GET", "/v1/types/email/jobs?state=finished", "", "")
	if a.status != http.StatusOK || !strings.Contains(string(a.body), `"jobs":[]`) {
		t.Fatalf("empty page answered %d %s", a.status, a.body)
	}
}

func TestUnknownType(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	wantError(t, e.do("POST", "/v1/types/emial/jobs", "", `{"data":1}`), 404, httpapi.CodeUnknownType, `"emial"`)
	wantError(t, e.do("POST", "/v1/types/emial/jobs", "", `[{"data":1}]`), 404, httpapi.CodeUnknownType)
	wantError(t, e.do("GET", "/v1/types/emial/jobs", "", ""), 404, httpapi.CodeUnknownType)
	wantError(t, e.do("POST", "/v1/types/emial/accept", "", `{}`), 404, httpapi.CodeUnknownType)
	wantError(t, e.do("POST", "/v1/types/emial/pause", "", ""), 404, httpapi.CodeUnknownType)
	wantError(t, e.do("GET", "/v1/types/email/jobs/nope", "", ""), 404, httpapi.CodeNotFound, "email/nope")
	wantError(t, e.do("POST", "/v1/types/email/jobs/nope/cancel", "", ""), 404, httpapi.CodeNotFound)
	wantError(t, e.do("GET", "/v1/types/email/jobs/nope/wait", "", ""), 404, httpapi.CodeNotFound)
	types, err := e.q.Types(context.Background(), e.db)
	if err != nil || len(types) != 1 {
		t.Fatalf("an enqueue to an unknown type registered it: %v %v", types, err)
	}
}

// TestFairnessFields: a job's key goes to the store and comes back in the
// answers; the fairness settings go through PUT and GET of a type.
func TestFairnessFields(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	ctx := context.Background()
	c := e.client("")

	j, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: "a", Key: "tenant-7"})
	if err != nil || j.Key != "tenant-7" {
		t.Fatalf("enqueued %+v %v", j, err)
	}
	if stored, err := e.q.Get(ctx, e.db, "email", "a"); err != nil || stored.Key != "tenant-7" {
		t.Fatalf("stored %+v %v", stored, err)
	}
	jobs, err := c.EnqueueBatch(ctx, "email", []httpapi.NewJob{{ID: "b", Key: "tenant-8"}, {ID: "c"}})
	if err != nil || len(jobs) != 2 || jobs[0].Key != "tenant-8" || jobs[1].Key != "" {
		t.Fatalf("batch %+v %v", jobs, err)
	}
	if got, err := c.Get(ctx, "email", "b"); err != nil || got.Key != "tenant-8" {
		t.Fatalf("got %+v %v", got, err)
	}
	if a := e.do("GET", "/v1/types/email/jobs/c", "", ""); strings.Contains(string(a.body), `"key"`) {
		t.Fatalf("a job without a key shows one: %s", a.body)
	}
	if a := e.do("GET", "/v1/types/email/jobs/a", "", ""); !strings.Contains(string(a.body), `"key":"tenant-7"`) {
		t.Fatalf("the key is not in the answer: %s", a.body)
	}

	a := e.do("PUT", "/v1/types/email", "", `{"zones": 8, "max_running": 50, "keys": {"acme": {"weight": 5, "max_starts": 100, "per": "1m"}}, "key_default": {"max_running": 3}}`)
	if a.status != http.StatusOK {
		t.Fatalf("PUT: %d %s", a.status, a.body)
	}
	want := fdbq.DefaultTypeSettings()
	want.Zones, want.MaxRunning = 8, 50
	want.Keys = map[string]fdbq.KeyPolicy{"acme": {Weight: 5, MaxStarts: 100, Per: time.Minute}}
	want.KeyDefault = fdbq.KeyPolicy{MaxRunning: 3}
	info, err := e.q.GetType(ctx, e.db, "email")
	if err != nil || !info.Settings.Equal(want) {
		t.Fatalf("settings %+v %v, want %+v", info.Settings, err, want)
	}
	for _, w := range []string{`"zones":8`, `"max_running":50`, `"keys":{"acme":{"weight":5,"max_running":0,"max_starts":100,"per":"1m0s","zones":0}}`, `"key_default":{"weight":0,"max_running":3`} {
		if !strings.Contains(string(a.body), w) {
			t.Errorf("answer %s lacks %s", a.body, w)
		}
	}
	// Fields left out keep theirs: key_default field by field; keys, when
	// given, replace every policy.
	if a := e.do("PUT", "/v1/types/email", "", `{"key_default": {"weight": 2}}`); a.status != http.StatusOK {
		t.Fatalf("PUT: %d %s", a.status, a.body)
	}
	want.KeyDefault.Weight = 2
	if info, _ := e.q.GetType(ctx, e.db, "email"); !info.Settings.Equal(want) {
		t.Fatalf("settings %+v, want %+v", info.Settings, want)
	}
	if a := e.do("PUT", "/v1/types/email", "", `{"keys": {"globex": {}}}`); a.status != http.StatusOK {
		t.Fatalf("PUT: %d %s", a.status, a.body)
	}
	want.Keys = map[string]fdbq.KeyPolicy{"globex": {}}
	if info, _ := e.q.GetType(ctx, e.db, "email"); !info.Settings.Equal(want) {
		t.Fatalf("settings %+v, want %+v", info.Settings, want)
	}
	types, err := c.Types(ctx)
	if err != nil || len(types) != 1 || types[0].Settings.Zones != 8 || types[0].Settings.KeyDefault.Weight != 2 || len(types[0].Settings.Keys) != 1 {
		t.Fatalf("types %+v %v", types, err)
	}

	long := strings.Repeat("k", fdbq.MaxKeySize+1)
	for _, tc := range []struct {
		name, method, path, body string
		code                     string
		words                    []string
	}{
		{"key with a control character", "POST", "/v1/types/email/jobs", `{"key": "a\u0001"}`, httpapi.CodeInvalid, []string{"key:", "fairness key", `"a\x01"`, "control"}},
		{"long key in batch", "POST", "/v1/types/email/jobs", `[{}, {"key": "` + long + `"}]`, httpapi.CodeInvalid, []string{"[1].key:", "fairness key", "longer than 128"}},
		{"key not UTF-8", "POST", "/v1/types/email/jobs", "{\"key\": \"a\xff\"}", httpapi.CodeInvalid, []string{"key:", "fairness key", "UTF-8"}},
		{"key half a surrogate", "POST", "/v1/types/email/jobs", `{"key": "\ud800"}`, httpapi.CodeInvalid, []string{"key:", "surrogate"}},
		{"key a number", "POST", "/v1/types/email/jobs", `{"key": 7}`, httpapi.CodeInvalidJSON, []string{"key"}},
		{"zones out of range", "PUT", "/v1/types/email", `{"zones": 1000}`, httpapi.CodeInvalid, []string{"zones 1000"}},
		{"max_running negative", "PUT", "/v1/types/email", `{"max_running": -1}`, httpapi.CodeInvalid, []string{"max_running -1"}},
		{"key_default weight", "PUT", "/v1/types/email", `{"key_default": {"weight": 5000}}`, httpapi.CodeInvalid, []string{"key_default:", "weight 5000"}},
		{"key_default bad per", "PUT", "/v1/types/email", `{"key_default": {"per": "soon"}}`, httpapi.CodeInvalid, []string{"key_default.per", "soon"}},
		{"key policy without per", "PUT", "/v1/types/email", `{"keys": {"acme": {"max_starts": 5}}}`, httpapi.CodeInvalid, []string{`keys["acme"]:`, "max_starts 5", "per"}},
		{"key policy bad name", "PUT", "/v1/types/email", `{"keys": {"a\u0001": {}}}`, httpapi.CodeInvalid, []string{"keys:", "fairness key", "control"}},
		{"key policy unknown field", "PUT", "/v1/types/email", `{"keys": {"acme": {"wieght": 1}}}`, httpapi.CodeInvalidJSON, []string{`"wieght"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, e.do(tc.method, tc.path, "", tc.body), http.StatusBadRequest, tc.code, tc.words...)
		})
	}
	if info, _ := e.q.GetType(ctx, e.db, "email"); !info.Settings.Equal(want) {
		t.Fatalf("refused settings changed the type: %+v", info.Settings)
	}
	if n, _ := e.q.Count(ctx, e.db, "email", fdbq.Pending); n != 3 {
		t.Fatalf("%d pending jobs, want the 3 accepted", n)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	long := strings.Repeat("x", fdbq.MaxIDSize+1)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
		words                    []string
	}{
		{"not JSON", "POST", "/v1/types/email/jobs", `{"data":`, 400, httpapi.CodeInvalidJSON, nil},
		{"syntax", "POST", "/v1/types/email/jobs", `{"data": tru}`, 400, httpapi.CodeInvalidJSON, []string{"byte"}},
		{"unknown field", "POST", "/v1/types/email/jobs", `{"prio": 1}`, 400, httpapi.CodeInvalidJSON, []string{`"prio"`}},
		{"type in body", "POST", "/v1/types/email/jobs", `{"type": "email"}`, 400, httpapi.CodeInvalidJSON, []string{`"type"`}},
		{"wrong type", "POST", "/v1/types/email/jobs", `{"priority": "high"}`, 400, httpapi.CodeInvalidJSON, []string{"priority", "integer"}},
		{"wrong type in batch", "POST", "/v1/types/email/jobs", `[{"max_attempts": 1.5}]`, 400, httpapi.CodeInvalidJSON, []string{"max_attempts"}},
		{"body not an object", "POST", "/v1/types/email/jobs", `"hello"`, 400, httpapi.CodeInvalidJSON, []string{"object"}},
		{"bad time", "POST", "/v1/types/email/jobs", `{"scheduled_at": "tomorrow"}`, 400, httpapi.CodeInvalid, []string{"scheduled_at", "tomorrow"}},
		{"bad time in batch", "POST", "/v1/types/email/jobs", `[{}, {"scheduled_at": "soon"}]`, 400, httpapi.CodeInvalid, []string{"[1].scheduled_at"}},
		{"negative attempts", "POST", "/v1/types/email/jobs", `{"max_attempts": -1}`, 400, httpapi.CodeInvalid, []string{"max_attempts"}},
		{"trailing data", "POST", "/v1/types/email/jobs", `{} {}`, 400, httpapi.CodeInvalidJSON, []string{"after"}},
		{"empty body", "POST", "/v1/types/email/jobs", ``, 400, httpapi.CodeInvalidJSON, []string{"empty"}},
		{"empty batch", "POST", "/v1/types/email/jobs", `[]`, 400, httpapi.CodeInvalid, []string{"empty batch"}},
		{"long id", "POST", "/v1/types/email/jobs", `{"id": "` + long + `"}`, 400, httpapi.CodeInvalid, []string{"job id"}},
		{"long path id", "GET", "/v1/types/email/jobs/" + long, ``, 400, httpapi.CodeInvalid, []string{"id"}},
		{"long path id, worker", "POST", "/v1/types/email/jobs/" + long + "/finish", `{"lock":"l"}`, 400, httpapi.CodeInvalid, []string{"id"}},
		{"bad state", "GET", "/v1/types/email/jobs?state=done", ``, 400, httpapi.CodeInvalid, []string{"state", "done"}},
		{"bad limit", "GET", "/v1/types/email/jobs?limit=0", ``, 400, httpapi.CodeInvalid, []string{"limit"}},
		{"bad cursor", "GET", "/v1/types/email/jobs?cursor=zzz", ``, 400, httpapi.CodeInvalid, []string{"cursor"}},
		{"unknown parameter", "GET", "/v1/types/email/jobs?stat=pending", ``, 400, httpapi.CodeInvalid, []string{`"stat"`}},
		{"a parameter given twice", "GET", "/v1/types/email/jobs?limit=1&limit=2", ``, 400, httpapi.CodeInvalid, []string{`limit: given 2 times`}},
		{"a parameter given twice, the second bad", "GET", "/v1/types/email/jobs?key=a&key=%ff", ``, 400, httpapi.CodeInvalid, []string{`key: given 2 times`}},
		{"wait too long", "GET", "/v1/types/email/jobs/x/wait?timeout=2m", ``, 400, httpapi.CodeInvalid, []string{"timeout", "60s"}},
		{"wait bad state", "GET", "/v1/types/email/jobs/x/wait?state=gone", ``, 400, httpapi.CodeInvalid, []string{"state"}},
		{"accept negative", "POST", "/v1/types/email/accept", `{"max": -1}`, 400, httpapi.CodeInvalid, []string{"max"}},
		{"accept too many", "POST", "/v1/types/email/accept", `{"max": 5000}`, 400, httpapi.CodeInvalid, []string{"max", "1000"}},
		{"accept bad wait", "POST", "/v1/types/email/accept", `{"wait": "forever"}`, 400, httpapi.CodeInvalid, []string{"wait", "forever"}},
		{"accept wait as number", "POST", "/v1/types/email/accept", `{"wait": 5}`, 400, httpapi.CodeInvalidJSON, []string{"wait", "string"}},
		{"heartbeat without body", "POST", "/v1/types/email/jobs/x/heartbeat", ``, 400, httpapi.CodeInvalidJSON, []string{"empty body"}},
		{"heartbeat without lock", "POST", "/v1/types/email/jobs/x/heartbeat", `{}`, 400, httpapi.CodeInvalid, []string{"lock"}},
		{"finish bad result", "POST", "/v1/types/email/jobs/x/finish", `{"lock": "l", "result": }`, 400, httpapi.CodeInvalidJSON, nil},
		{"fail unknown field", "POST", "/v1/types/email/jobs/x/fail", `{"lock": "l", "reason": "x"}`, 400, httpapi.CodeInvalidJSON, []string{`"reason"`}},
		{"settings bad duration", "PUT", "/v1/types/email", `{"retention": "forever"}`, 400, httpapi.CodeInvalid, []string{"retention", "forever"}},
		{"settings nested duration", "PUT", "/v1/types/email", `{"retry": {"base": "1 second"}}`, 400, httpapi.CodeInvalid, []string{"retry.base"}},
		{"settings bad value", "PUT", "/v1/types/email", `{"activity_timeout": "10ms"}`, 400, httpapi.CodeInvalid, []string{"activity timeout", "100ms"}},
		{"settings bad backoff", "PUT", "/v1/types/email", `{"retry": {"backoff": "random"}}`, 400, httpapi.CodeInvalid, []string{"backoff", "random"}},
		{"settings unknown field", "PUT", "/v1/types/email", `{"pause": true}`, 400, httpapi.CodeInvalidJSON, []string{`"pause"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, e.do(tc.method, tc.path, "", tc.body), tc.status, tc.code, tc.words...)
		})
	}
	// Nothing of the refused requests reached the store.
	if n, _ := e.q.Count(context.Background(), e.db, "email", fdbq.Pending); n != 0 {
		t.Fatalf("%d jobs added by refused requests", n)
	}
	info, err := e.q.GetType(context.Background(), e.db, "email")
	if err != nil || !info.Settings.Equal(fdbq.DefaultTypeSettings()) {
		t.Fatalf("refused settings changed the type: %+v %v", info, err)
	}
}

func TestSizeLimits(t *testing.T) {
	e := newEnv(t, httpapi.Options{MaxBodyBytes: 4096})
	big := `{"data": "` + strings.Repeat("a", 5000) + `"}`
	wantError(t, e.do("POST", "/v1/types/email/jobs", "", big), 413, httpapi.CodeTooLarge, "4096")
	wantError(t, e.do("PUT", "/v1/types/email", "", `{"retention": "`+strings.Repeat("1", 5000)+`h"}`), 413, httpapi.CodeTooLarge)
	wantError(t, e.do("POST", "/v1/types/email/accept", "", `{"max": 1`+strings.Repeat(" ", 5000)+`}`), 413, httpapi.CodeTooLarge)

	// Data over the store's limit, inside the body limit.
	e2 := newEnv(t, httpapi.Options{})
	huge := `{"data": "` + strings.Repeat("a", fdbq.MaxDataSize+10) + `"}`
	wantError(t, e2.do("POST", "/v1/types/email/jobs", "", huge), 413, httpapi.CodeTooLarge, "larger than")
	for _, env := range []*env{e, e2} {
		if n, _ := env.q.Count(context.Background(), env.db, "email", fdbq.Pending); n != 0 {
			t.Fatalf("%d jobs added by oversized requests", n)
		}
	}
}

func TestCancelRequeue(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	ctx := context.Background()
	c := e.client("")
	if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	j, err := c.Cancel(ctx, "email", "a")
	if err != nil {
		t.Fatal(err)
	}
	if j.State != fdbq.Finished || j.Outcome != fdbq.Canceled || j.FinishedAt.IsZero() {
		t.Fatalf("canceled job %+v", j)
	}
	wantError(t, e.do("POST", "/v1/types/email/jobs/a/cancel", "", ""), 409, httpapi.CodeWrongState, "finished")

	j, err = c.Requeue(ctx, "email", "a")
	if err != nil {
		t.Fatal(err)
	}
	if j.State != fdbq.Pending || j.Outcome != "" || j.Attempts != 0 {
		t.Fatalf("requeued job %+v", j)
	}
	wantError(t, e.do("POST", "/v1/types/email/jobs/a/requeue", "", ""), 409, httpapi.CodeWrongState, "pending")
}

func TestWait(t *testing.T) {
	// started is signalled when a wait request reaches the server, so the
	// finish below most likely lands while the wait is blocked on the
	// store's watch (and if it lands before, the wait answers at once).
	started := make(chan struct{}, 1)
	e := newEnv(t, httpapi.Options{}, func(inner http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/wait") {
				select {
				case started <- struct{}{}:
				default:
				}
			}
			inner.ServeHTTP(w, r)
		})
	})
	ctx := context.Background()
	c := e.client("")
	if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: "w", Data: json.RawMessage(`"x"`)}); err != nil {
		t.Fatal(err)
	}

	// At the timeout the answer is the job as it is.
	j, err := c.Wait(ctx, "email", "w", fdbq.Finished, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != fdbq.Pending {
		t.Fatalf("timed-out wait answered %s, want pending", j.State)
	}
	<-started

	type result struct {
		job *httpapi.Job
		err error
	}
	done := make(chan result, 1)
	go func() {
		j, err := c.Wait(ctx, "email", "w", fdbq.Finished, httpapi.MaxWait)
		done <- result{j, err}
	}()
	<-started
	leases, err := c.Accept(ctx, "email", httpapi.AcceptRequest{Max: 1})
	if err != nil || len(leases) != 1 {
		t.Fatalf("accept: %v %v", leases, err)
	}
	if err := c.Finish(ctx, leases[0], json.RawMessage(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.job.State != fdbq.Finished || r.job.Outcome != fdbq.Succeeded || string(r.job.Result) != `{"ok":true}` {
		t.Fatalf("wait answered %+v", r.job)
	}

	// A wait for running answers a finished job at once.
	j, err = c.Wait(ctx, "email", "w", fdbq.Running, httpapi.MaxWait)
	if err != nil || j.State != fdbq.Finished {
		t.Fatalf("wait for running on a finished job: %+v %v", j, err)
	}
}

func TestTypes(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	ctx := context.Background()
	c := e.client("")
	if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{}); err != nil {
		t.Fatal(err)
	}
	types, err := c.Types(ctx)
	if err != nil {
		t.Fatal(err)
	}
	def := fdbq.DefaultTypeSettings()
	if len(types) != 1 || types[0].Name != "email" || types[0].Pending != 1 ||
		time.Duration(types[0].Settings.ActivityTimeout) != def.ActivityTimeout || types[0].Settings.Retry.Backoff != def.Retry.Backoff {
		t.Fatalf("types %+v", types)
	}
	a := e.do("GET", "/v1/types", "", "")
	if !strings.Contains(string(a.body), `"activity_timeout":"30s"`) {
		t.Fatalf("durations are not strings: %s", a.body)
	}

	// A new type: 201 and the defaults under the given fields.
	a = e.do("PUT", "/v1/types/sms", "", `{"retention": "1h", "retry": {"max_attempts": 2}}`)
	if a.status != http.StatusCreated {
		t.Fatalf("PUT new type: %d %s", a.status, a.body)
	}
	info, err := e.q.GetType(ctx, e.db, "sms")
	if err != nil {
		t.Fatal(err)
	}
	want := def
	want.Retention, want.Retry.MaxAttempts = time.Hour, 2
	if !info.Settings.Equal(want) {
		t.Fatalf("settings %+v, want %+v", info.Settings, want)
	}
	// An existing type: 200, fields left out keep their values.
	a = e.do("PUT", "/v1/types/sms", "", `{"activity_timeout": "5s"}`)
	if a.status != http.StatusOK {
		t.Fatalf("PUT existing type: %d %s", a.status, a.body)
	}
	want.ActivityTimeout = 5 * time.Second
	if info, _ := e.q.GetType(ctx, e.db, "sms"); !info.Settings.Equal(want) {
		t.Fatalf("settings %+v, want %+v", info.Settings, want)
	}
	// The client sends every field.
	s := httpapi.TypeSettings{ActivityTimeout: httpapi.Duration(time.Minute), Retry: httpapi.RetryPolicy{MaxAttempts: 1, Backoff: fdbq.Constant, Base: httpapi.Duration(time.Second)},
		Zones: 4, MaxRunning: 20, Keys: map[string]httpapi.KeyPolicy{"acme": {Weight: 3, MaxRunning: 2, MaxStarts: 10, Per: httpapi.Duration(time.Minute), Zones: 1}},
		KeyDefault: httpapi.KeyPolicy{Weight: 2}}
	ti, err := c.SetType(ctx, "sms", s)
	if err != nil || !reflect.DeepEqual(ti.Settings, s) {
		t.Fatalf("SetType answered %+v %v", ti, err)
	}
	// Zero fairness settings are sent too, and replace the stored ones.
	s = httpapi.TypeSettings{ActivityTimeout: httpapi.Duration(time.Minute), Retry: httpapi.RetryPolicy{MaxAttempts: 1, Backoff: fdbq.Constant}}
	ti, err = c.SetType(ctx, "sms", s)
	if err != nil || ti.Settings.Zones != 0 || ti.Settings.MaxRunning != 0 || len(ti.Settings.Keys) != 0 || ti.Settings.KeyDefault != (httpapi.KeyPolicy{}) {
		t.Fatalf("SetType of zero fairness settings answered %+v %v", ti, err)
	}

	ti, err = c.Pause(ctx, "email")
	if err != nil || !ti.Settings.Paused {
		t.Fatalf("pause: %+v %v", ti, err)
	}
	if leases, err := c.Accept(ctx, "email", httpapi.AcceptRequest{}); err != nil || len(leases) != 0 {
		t.Fatalf("a paused type gave %d jobs, %v", len(leases), err)
	}
	ti, err = c.Resume(ctx, "email")
	if err != nil || ti.Settings.Paused {
		t.Fatalf("resume: %+v %v", ti, err)
	}
	if leases, err := c.Accept(ctx, "email", httpapi.AcceptRequest{}); err != nil || len(leases) != 1 {
		t.Fatalf("a resumed type gave %d jobs, %v", len(leases), err)
	}
}

func TestHealthAndRouting(t *testing.T) {
	ready := errors.New("store opening")
	e := newEnv(t, httpapi.Options{
		Ready:   func() error { return ready },
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "jobstage_up 1") }),
	})
	if a := e.do("GET", "/healthz", "", ""); a.status != 200 {
		t.Fatalf("healthz %d", a.status)
	}
	wantError(t, e.do("GET", "/readyz", "", ""), 503, httpapi.CodeNotReady, "store opening")
	ready = nil
	if a := e.do("GET", "/readyz", "", ""); a.status != 200 {
		t.Fatalf("readyz %d %s", a.status, a.body)
	}
	if a := e.do("GET", "/metrics", "", ""); a.status != 200 || string(a.body) != "jobstage_up 1\n" {
		t.Fatalf("metrics %d %s", a.status, a.body)
	}
	if a := e.do("GET", "/v1/openapi.yaml", "", ""); a.status != 200 || string(a.body) != string(httpapi.OpenAPI) {
		t.Fatalf("openapi.yaml %d", a.status)
	}
	a := e.do("PATCH", "/v1/types/email", "", "{}")
	wantError(t, a, 405, httpapi.CodeMethodNotAllowed, "PATCH")
	if !strings.Contains(a.header.Get("Allow"), "PUT") {
		t.Fatalf("Allow %q", a.header.Get("Allow"))
	}
	wantError(t, e.do("GET", "/v2/nothing", "", ""), 404, httpapi.CodeNotFound, "/v2/nothing")

	// Without Metrics there is no metrics route.
	e2 := newEnv(t, httpapi.Options{})
	wantError(t, e2.do("GET", "/metrics", "", ""), 404, httpapi.CodeNotFound)
}

func TestObserve(t *testing.T) {
	type obs struct {
		route  string
		status int
	}
	ch := make(chan obs, 16)
	e := newEnv(t, httpapi.Options{Observe: func(route string, status int, _ time.Duration) { ch <- obs{route, status} }})
	e.do("POST", "/v1/types/email/jobs", "", `{"id":"o"}`)
	e.do("GET", "/v1/types/email/jobs/o", "", "")
	e.do("GET", "/v1/types/email/jobs/missing", "", "")
	e.do("GET", "/elsewhere", "", "")
	want := []obs{
		{"POST /v1/types/{type}/jobs", 201},
		{"GET /v1/types/{type}/jobs/{id}", 200},
		{"GET /v1/types/{type}/jobs/{id}", 404},
		{"unmatched", 404},
	}
	// Observations come after the answers, so their order may differ.
	got := map[obs]int{}
	for range want {
		got[<-ch]++
	}
	for _, w := range want {
		if got[w] == 0 {
			t.Fatalf("observed %v, want %v", got, want)
		}
		got[w]--
	}
}
