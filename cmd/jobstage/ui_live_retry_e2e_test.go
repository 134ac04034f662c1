package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/internal/browsertest"
)

// streamProxy stands between the browser and the server: it passes every
// request on, and for GET /v1/events it records the cursor each stream
// asks for, can cut the streams it carries, and can answer the next
// streams 503 busy itself.
type streamProxy struct {
	proxy *httputil.ReverseProxy
	mu    sync.Mutex
	from  []string // the cursor of each stream passed on ("" none)
	busy  int      // streams still to answer 503
	cuts  []context.CancelFunc
}

func (p *streamProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/events" {
		p.proxy.ServeHTTP(w, r)
		return
	}
	p.mu.Lock()
	if p.busy > 0 {
		p.busy--
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, `{"error":"busy","message":"the proxy says so"}`)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	p.from = append(p.from, r.Header.Get("Last-Event-ID")+r.URL.Query().Get("cursor"))
	p.cuts = append(p.cuts, cancel)
	p.mu.Unlock()
	p.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// cut ends the streams passed on so far and answers the next n 503.
func (p *streamProxy) cut(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.busy = n
	for _, c := range p.cuts {
		c()
	}
	p.cuts = nil
}

func (p *streamProxy) cursors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.from...)
}

// TestUILiveRetry: the live view of a page whose stream the server
// refuses (503: http.max_event_streams streams already run) says live
// updates are paused and tries again, later each time, until it gets
// one: then what changed meanwhile shows, and changes show live again. A
// stream cut and then refused (503 from a proxy) is taken up again from
// the last event's cursor, and the change committed while it was away
// shows.
func TestUILiveRetry(t *testing.T) {
	ctx := browsertest.New(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jobstage.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, uiConfig, filepath.Join(dir, "data")), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cfg, "UI_ADMIN_TOKEN="+uiAdmin, "UI_PRODUCER_TOKEN="+uiProducer,
		"UI_WORKER_TOKEN="+uiWorker, "UI_METRICS_TOKEN="+uiMetrics, "JOBSTAGE_HTTP__MAX_EVENT_STREAMS=1")
	t.Cleanup(s.stop)
	target, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	p := &streamProxy{proxy: httputil.NewSingleHostReverseProxy(target)}
	p.proxy.FlushInterval = -1                    // pass each event on at once
	p.proxy.ErrorLog = log.New(io.Discard, "", 0) // the cut streams' errors
	ps := httptest.NewServer(p)
	t.Cleanup(func() {
		p.cut(0) // the streams it carries would hold Close
		ps.CloseClientConnections()
		ps.Close()
	})
	admin := httpapi.NewClient(s.url, uiAdmin, nil)
	e := &uiEnv{t: t, srv: &serverProc{url: ps.URL}, ctx: ctx, admin: admin}
	bg := context.Background()
	enqueue := func(id string) {
		t.Helper()
		if _, err := admin.Enqueue(bg, "email", httpapi.NewJob{ID: id}); err != nil {
			t.Fatal(err)
		}
	}

	// The server's one stream is taken.
	hold, cancelHold := context.WithCancel(bg)
	held := make(chan error, 1)
	ready := make(chan struct{})
	var releaseOnce sync.Once
	release := func() {
		releaseOnce.Do(func() {
			cancelHold()
			if err := <-held; err != nil && !errors.Is(err, context.Canceled) {
				t.Logf("the stream that held the slot ended with %v", err)
			}
		})
	}
	go func() {
		var once sync.Once
		held <- admin.Events(hold, nil, "", func(httpapi.Event) error {
			once.Do(func() { close(ready) })
			return nil
		})
	}()
	select {
	case <-ready:
	case err := <-held:
		t.Fatalf("the stream that holds the slot: %v", err)
	case <-time.After(uiStep):
		t.Fatal("the stream that holds the slot did not start")
	}
	defer release()

	enqueue("p1")
	e.login(uiAdmin)
	e.do("the jobs, live paused",
		e.goTo("#/types/email?state=pending"),
		visible(`tr.job-row[data-id="p1"]`),
		visible(`#live[data-status="paused"]`))
	if got := e.text("#live"); !strings.Contains(got, "paused, retrying") {
		t.Fatalf("the live state says %q", got)
	}
	// While paused: a change the page is not told of.
	enqueue("while-paused")

	// The slot is free again: the page's next try gets the stream, and
	// reads again what it shows.
	release()
	// The tries back off (1, 2, 4, 8, 16 s): longer than a step.
	e.within(45*time.Second, "live again", `document.querySelector('#live[data-status="on"]') !== null`)
	e.do("what changed meanwhile shows", visible(`tr.job-row[data-id="while-paused"]`))
	enqueue("live-1")
	e.do("a change shows live", visible(`tr.job-row[data-id="live-1"]`))

	// The stream is cut, and the next two tries refused: the page goes
	// on from the cursor of the last event it read.
	before := len(p.cursors())
	p.cut(2)
	enqueue("while-cut")
	e.within(45*time.Second, "live again after the cut",
		`document.querySelector('#live[data-status="on"]') !== null && document.querySelector('tr.job-row[data-id="while-cut"]') !== null`)
	from := p.cursors()[before:]
	if len(from) == 0 || from[len(from)-1] == "" {
		t.Fatalf("the streams after the cut asked for cursors %q, want the last event's", from)
	}
	enqueue("live-2")
	e.do("changes show live after the cut", visible(`tr.job-row[data-id="live-2"]`))
}

// within waits up to d, longer than a step may take, until a JavaScript
// predicate holds.
func (e *uiEnv) within(d time.Duration, what, predicate string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, d)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(d))); err != nil {
		e.t.Fatalf("%s: %v\n%s", what, err, e.pageState())
	}
}
