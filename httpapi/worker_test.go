package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

// rawWorker is an external worker written against the HTTP API alone:
// net/http and encoding/json, no jobstage types, as a worker in another
// language would be.
type rawWorker struct {
	base, token string
	hc          *http.Client
}

func (w *rawWorker) call(method, path string, body any, out any) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequest(method, w.base+path, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+w.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, data)
	}
	if out != nil && len(data) > 0 {
		return resp.StatusCode, json.Unmarshal(data, out)
	}
	return resp.StatusCode, nil
}

// run accepts, heartbeats and finishes (or fails, when the data asks)
// jobs until done reports that every job is accounted for.
func (w *rawWorker) run(typ string, done func(n int64) bool) error {
	for {
		var got struct {
			Jobs []struct {
				ID   string `json:"id"`
				Lock string `json:"lock"`
				Data struct {
					N    int  `json:"n"`
					Fail bool `json:"fail"`
				} `json:"data"`
				Attempts int `json:"attempts"`
			} `json:"jobs"`
		}
		if _, err := w.call("POST", "/v1/types/"+typ+"/accept", map[string]any{"max": 3, "wait": "2s"}, &got); err != nil {
			return err
		}
		for _, j := range got.Jobs {
			path := "/v1/types/" + typ + "/jobs/" + j.ID
			if _, err := w.call("POST", path+"/heartbeat", map[string]any{"lock": j.Lock, "progress": map[string]int{"step": 1}}, nil); err != nil {
				return err
			}
			if j.Data.Fail {
				if _, err := w.call("POST", path+"/fail", map[string]any{"lock": j.Lock, "error": fmt.Sprintf("job %d refuses", j.Data.N)}, nil); err != nil {
					return err
				}
			} else {
				if _, err := w.call("POST", path+"/finish", map[string]any{"lock": j.Lock, "result": map[string]int{"square": j.Data.N * j.Data.N}}, nil); err != nil {
					return err
				}
			}
			if done(1) {
				return nil
			}
		}
		if done(0) {
			return nil
		}
	}
}

func TestExternalWorker(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens})
	ctx := context.Background()
	producer := e.client("producer-secret")

	const n = 24
	batch := make([]httpapi.NewJob, n)
	for i := range batch {
		data := fmt.Sprintf(`{"n": %d}`, i)
		if i%4 == 0 {
			data = fmt.Sprintf(`{"n": %d, "fail": true}`, i)
		}
		batch[i] = httpapi.NewJob{ID: fmt.Sprintf("job-%02d", i), Data: json.RawMessage(data), MaxAttempts: 1}
	}
	if _, err := producer.EnqueueBatch(ctx, "email", batch); err != nil {
		t.Fatal(err)
	}

	var (
		handled atomic.Int64
		failed  atomic.Bool // a worker stopped on an error: the others stop too
	)
	done := func(d int64) bool { return handled.Add(d) >= n || failed.Load() }
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &rawWorker{base: e.url, token: "worker-secret", hc: e.hs.Client()}
			err := w.run("email", done)
			if err != nil {
				failed.Store(true)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := handled.Load(); got != n {
		t.Fatalf("workers handled %d jobs, want %d", got, n)
	}

	// Every job is finished, as the worker said, each handled once.
	for i := range n {
		j, err := producer.Wait(ctx, "email", fmt.Sprintf("job-%02d", i), fdbq.Finished, 0)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != fdbq.Finished || j.Attempts != 1 || string(j.Progress) != `{"step":1}` {
			t.Fatalf("job %d: %+v", i, j)
		}
		if i%4 == 0 {
			if j.Outcome != fdbq.Failed || j.Error != fmt.Sprintf("job %d refuses", i) {
				t.Fatalf("job %d: outcome %s error %q", i, j.Outcome, j.Error)
			}
		} else if j.Outcome != fdbq.Succeeded || string(j.Result) != fmt.Sprintf(`{"square":%d}`, i*i) {
			t.Fatalf("job %d: outcome %s result %s", i, j.Outcome, j.Result)
		}
	}
	info, err := e.q.GetType(ctx, e.db, "email")
	if err != nil || info.Finished != n || info.Pending != 0 || info.Running != 0 {
		t.Fatalf("type counts %+v %v", info, err)
	}
}

func TestStaleLock(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	ctx := context.Background()
	c := e.client("")
	if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: "s", Data: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	leases, err := c.Accept(ctx, "email", httpapi.AcceptRequest{Max: 5})
	if err != nil || len(leases) != 1 {
		t.Fatalf("accept: %v %v", leases, err)
	}
	l := leases[0]
	if l.Lock == "" || l.State != fdbq.Running || l.Attempts != 1 || string(l.Data) != "1" {
		t.Fatalf("lease %+v", l)
	}
	if err := c.Heartbeat(ctx, l, json.RawMessage(`{"half":true}`)); err != nil {
		t.Fatal(err)
	}

	// A wrong lock while the job runs: halt, and the job is untouched.
	wrong := *l
	wrong.Lock = "not-the-lock"
	wantHalt := func(err error) {
		t.Helper()
		var ae *httpapi.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != httpapi.CodeHalt {
			t.Fatalf("got %v, want 409 halt", err)
		}
	}
	wantHalt(c.Finish(ctx, &wrong, nil))
	if j, _ := c.Get(ctx, "email", "s"); j.State != fdbq.Running {
		t.Fatalf("a wrong lock changed the job: %+v", j)
	}

	// Canceled while held: the holder's lock is gone.
	if _, err := c.Cancel(ctx, "email", "s"); err != nil {
		t.Fatal(err)
	}
	wantHalt(c.Heartbeat(ctx, l, nil))
	wantHalt(c.Finish(ctx, l, json.RawMessage(`"late"`)))
	wantHalt(c.Fail(ctx, l, "late"))
	j, err := c.Get(ctx, "email", "s")
	if err != nil || j.Outcome != fdbq.Canceled || len(j.Result) != 0 {
		t.Fatalf("after stale calls: %+v %v", j, err)
	}
	wantError(t, e.do("POST", "/v1/types/email/jobs/s/finish", "", `{"lock":"`+l.Lock+`"}`), 409, httpapi.CodeHalt, "lock")

	// A removed job halts its worker too.
	if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: "r"}); err != nil {
		t.Fatal(err)
	}
	leases, err = c.Accept(ctx, "email", httpapi.AcceptRequest{})
	if err != nil || len(leases) != 1 {
		t.Fatalf("accept: %v %v", leases, err)
	}
	if err := c.Delete(ctx, "email", "r"); err != nil {
		t.Fatal(err)
	}
	wantHalt(c.Finish(ctx, leases[0], nil))
}

func TestWorkerFailRetries(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	ctx := context.Background()
	c := e.client("")
	if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: "f", MaxAttempts: 2}); err != nil {
		t.Fatal(err)
	}
	leases, err := c.Accept(ctx, "email", httpapi.AcceptRequest{})
	if err != nil || len(leases) != 1 {
		t.Fatalf("accept: %v %v", leases, err)
	}
	if err := c.Fail(ctx, leases[0], "try again"); err != nil {
		t.Fatal(err)
	}
	j, err := c.Get(ctx, "email", "f")
	if err != nil || j.State != fdbq.Pending || j.Error != "try again" || j.Attempts != 1 || !j.ScheduledAt.After(j.StartedAt) {
		t.Fatalf("after a failed attempt with one left: %+v %v", j, err)
	}
}

func TestWorkerHooksSeeCommittedOutcomes(t *testing.T) {
	var mu sync.Mutex
	var events []string
	record := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	e := newEnv(t, httpapi.Options{
		OnAccept: func(ls []*fdbq.Lease) {
			for _, l := range ls {
				record("accept " + l.Type + " " + l.ID)
			}
		},
		OnOutcome: func(typ, outcome string) { record(outcome + " " + typ) },
	})
	ctx := context.Background()
	c := e.client("")
	for _, id := range []string{"a", "b", "c"} {
		nj := httpapi.NewJob{ID: id}
		if id == "c" {
			nj.MaxAttempts = 1
		}
		if _, err := c.Enqueue(ctx, "email", nj); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := c.Accept(ctx, "email", httpapi.AcceptRequest{Max: 3})
	if err != nil || len(ls) != 3 {
		t.Fatalf("accept: %v, %d jobs", err, len(ls))
	}
	byID := map[string]*httpapi.Lease{}
	for _, l := range ls {
		byID[l.ID] = l
	}
	if err := c.Finish(ctx, byID["a"], nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Fail(ctx, byID["b"], "boom"); err != nil {
		t.Fatal(err)
	}
	if err := c.Fail(ctx, byID["c"], "boom"); err != nil {
		t.Fatal(err)
	}
	// A refused finish (a lock that is not the job's) is no outcome.
	stale := *byID["b"]
	stale.Lock = "not-the-lock"
	if err := c.Finish(ctx, &stale, nil); err == nil {
		t.Fatal("finish with a wrong lock succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) >= 3 {
		slices.Sort(events[:3]) // accepted in random order
	}
	got := strings.Join(events, "; ")
	want := "accept email a; accept email b; accept email c; succeeded email; retried email; failed email"
	if got != want {
		t.Fatalf("hooks saw %q, want %q", got, want)
	}
}

// TestLongPollsCutByShutdownAnswerNotReady: once the server is stopping,
// a long poll its shutdown cancels answers 503 not_ready (send it again),
// not the status of a request its client left.
func TestLongPollsCutByShutdownAnswerNotReady(t *testing.T) {
	shutdown, cut := context.WithCancel(context.Background())
	defer cut()
	e := newEnv(t, httpapi.Options{}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			stop := context.AfterFunc(shutdown, cancel)
			defer stop()
			h.ServeHTTP(w, r.WithContext(ctx))
		})
	})
	ctx := context.Background()
	c := e.client("")
	if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: "w"}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() {
		_, err := c.Accept(ctx, "email", httpapi.AcceptRequest{Max: 1, Wait: httpapi.Duration(50 * time.Second)})
		errs <- err
	}()
	go func() {
		_, err := c.Wait(ctx, "email", "w", fdbq.Finished, 50*time.Second)
		errs <- err
	}()
	// Whether the polls are parked or not yet arrived, they are cut short
	// by the shutdown and answer alike.
	e.srv.Stopping()
	cut()
	for range 2 {
		err := <-errs
		var ae *httpapi.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.Code != httpapi.CodeNotReady {
			t.Errorf("long poll during shutdown: %v", err)
		}
	}
}

func TestAcceptMaxZeroRefused(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	a := e.do("POST", "/v1/types/email/accept", "", `{"max":0}`)
	wantError(t, a, http.StatusBadRequest, httpapi.CodeInvalid, "max", "below 1")
	if a := e.do("POST", "/v1/types/email/accept", "", `{}`); a.status != http.StatusOK {
		t.Errorf("accept without max: %d", a.status)
	}
}

// An HTTP worker's accept names its holder, or is named by its address;
// the job shows it while it runs. A holder that is not printable is
// refused and takes nothing.
func TestAcceptHolder(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	ctx := context.Background()
	c := httpapi.NewClient(e.url, "", nil)
	for _, id := range []string{"a", "b"} {
		if _, err := e.q.Add(ctx, e.db, fdbq.NewJob{Type: "email", ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	a := e.do("POST", "/v1/types/email/accept", "", `{"holder":"worker\u001b[2J"}`)
	wantError(t, a, http.StatusBadRequest, httpapi.CodeInvalid, "holder", "printable")
	named, err := c.Accept(ctx, "email", httpapi.AcceptRequest{Holder: "worker-3"})
	if err != nil || len(named) != 1 || named[0].Holder != "worker-3" {
		t.Fatalf("accept naming worker-3: %+v %v", named, err)
	}
	unnamed, err := c.Accept(ctx, "email", httpapi.AcceptRequest{})
	if err != nil || len(unnamed) != 1 {
		t.Fatalf("accept: %+v %v", unnamed, err)
	}
	for _, l := range []*httpapi.Lease{named[0], unnamed[0]} {
		j, err := c.Get(ctx, "email", l.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := "worker-3"
		if l == unnamed[0] {
			want = "http 127.0.0.1"
		}
		if j.Holder != want {
			t.Errorf("job %s: holder %q, want %q", l.ID, j.Holder, want)
		}
	}
	if err := c.Finish(ctx, named[0], nil); err != nil {
		t.Fatal(err)
	}
	if j, err := c.Get(ctx, "email", named[0].ID); err != nil || j.Holder != "" {
		t.Fatalf("finished job: holder %q, %v", j.Holder, err)
	}
}
