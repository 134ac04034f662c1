package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/internal/browsertest"
)

// The web UI's tests: the built binary serves it, Debian's chromium
// (headless) loads it, and chromedp clicks through it as a person would.
// Every wait is on something the page shows (an element, a DOM change);
// each step is bounded by uiStep.

const uiConfig = `
store: {path: %s}
types:
  email: {retry: {max_attempts: 1}, activity_timeout: 10m}
  thumbnail: {}
  report: {}
schedules:
  nightly: {type: report, cron: "0 3 * * *", data: '{"report":"daily"}'}
http:
  tokens:
    - {name: ops, role: admin, value_env: UI_ADMIN_TOKEN}
    - {name: shop, role: producer, value_env: UI_PRODUCER_TOKEN}
    - {name: mailer, role: worker, value_env: UI_WORKER_TOKEN}
    - {name: prometheus, role: metrics, value_env: UI_METRICS_TOKEN}
`

const (
	uiAdmin    = "admin-token-for-the-ui"
	uiProducer = "producer-token-for-the-ui"
	uiWorker   = "worker-token-for-the-ui"
	uiMetrics  = "metrics-token-for-the-ui"
)

// uiStep bounds one step of a browser test (a wait for the page to show
// something): long enough for a loaded machine, short enough that a
// failure says where it stopped without holding the run.
const uiStep = 15 * time.Second

// uiEnv is a running server with jobs in every state, and a browser.
type uiEnv struct {
	t      *testing.T
	srv    *serverProc
	admin  *httpapi.Client
	worker *httpapi.Client
	ctx    context.Context // the browser's tab
}

func newUIEnv(t *testing.T) *uiEnv {
	t.Helper()
	ctx := browsertest.New(t) // skips before the server starts when there is no browser
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jobstage.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, uiConfig, filepath.Join(dir, "data")), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cfg, "UI_ADMIN_TOKEN="+uiAdmin, "UI_PRODUCER_TOKEN="+uiProducer,
		"UI_WORKER_TOKEN="+uiWorker, "UI_METRICS_TOKEN="+uiMetrics)
	t.Cleanup(s.stop)
	e := &uiEnv{t: t, srv: s, ctx: ctx,
		admin:  httpapi.NewClient(s.url, uiAdmin, nil),
		worker: httpapi.NewClient(s.url, uiWorker, nil)}
	e.seed()
	return e
}

// seed makes jobs of type email in every state: f1 failed, s1
// succeeded, r1 running (with progress), p1–p3 pending; and some of the
// other types. No pipeline works them: each accept below takes the only
// pending job of its type.
func (e *uiEnv) seed() {
	t, ctx := e.t, context.Background()
	work := func(id string, data string, end func(*httpapi.Lease) error) {
		t.Helper()
		if _, err := e.admin.Enqueue(ctx, "email", httpapi.NewJob{ID: id, Data: json.RawMessage(data)}); err != nil {
			t.Fatal(err)
		}
		ls, err := e.worker.Accept(ctx, "email", httpapi.AcceptRequest{Max: 1, Holder: "mailer-7"})
		if err != nil || len(ls) != 1 || ls[0].ID != id {
			t.Fatalf("accept %s: %v %v", id, err, ls)
		}
		if err := end(ls[0]); err != nil {
			t.Fatal(err)
		}
	}
	work("f1", `{"to":"nobody@example.com"}`, func(l *httpapi.Lease) error {
		return e.worker.Fail(ctx, l, "smtp: 550 mailbox unavailable")
	})
	work("s1", `{"to":"ada@example.com"}`, func(l *httpapi.Lease) error {
		return e.worker.Finish(ctx, l, json.RawMessage(`{"message_id":"<a1@mx>"}`))
	})
	work("r1", `{"to":"grace@example.com"}`, func(l *httpapi.Lease) error {
		return e.worker.Heartbeat(ctx, l, json.RawMessage(`{"sent":40,"of":100}`))
	})
	for i, key := range []string{"tenant-a", "tenant-b", "tenant-a"} {
		id := fmt.Sprintf("p%d", i+1)
		if _, err := e.admin.Enqueue(ctx, "email", httpapi.NewJob{ID: id, Key: key, Data: json.RawMessage(fmt.Sprintf(`{"to":"user%d@example.com"}`, i+1))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if _, err := e.admin.Enqueue(ctx, "thumbnail", httpapi.NewJob{Data: json.RawMessage(fmt.Sprintf(`{"image":"cat-%d.jpg"}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
}

// do runs browser steps, each bounded by uiStep, and fails the test with
// the step's error.
func (e *uiEnv) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	e.t.Helper()
	for i, s := range steps {
		ctx, cancel := context.WithTimeout(e.ctx, uiStep)
		_, err := chromedp.Run(ctx, s)
		cancel()
		if err != nil {
			e.t.Fatalf("%s (step %d): %v\n%s", what, i+1, err, e.pageState())
		}
	}
}

// pageState is what the page shows, for a failure's message.
func (e *uiEnv) pageState() string {
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
	if err != nil {
		return "(the page could not be read: " + err.Error() + ")"
	}
	return "the page:\n" + s
}

func (e *uiEnv) eval(expr string, out any) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, uiStep)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		e.t.Fatalf("%s: %v", expr, err)
	}
	if err := json.Unmarshal(v, out); err != nil {
		e.t.Fatalf("%s: %v: %s", expr, err, v)
	}
}

// text is what the first element sel matches shows, once there is one. It
// is read in one evaluation in the page: a live update that replaces the
// element between a lookup and a read (as chromedp.Text does them) cannot
// lose it.
func (e *uiEnv) text(sel string) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, uiStep)
	defer cancel()
	q := fmt.Sprintf(`document.querySelector(%q)`, sel)
	s, err := chromedp.Run(ctx, chromedp.Action[string](func(ctx context.Context, t *chromedp.Target) (string, error) {
		if _, err := when(q+` !== null`)(ctx, t); err != nil {
			return "", err
		}
		return chromedp.Evaluate[string](fmt.Sprintf(`(%s ?? {innerText: ""}).innerText`, q))(ctx, t)
	}))
	if err != nil {
		e.t.Fatalf("text of %s: %v\n%s", sel, err, e.pageState())
	}
	return s
}

func (e *uiEnv) count(sel string) int {
	e.t.Helper()
	var n int
	e.eval(fmt.Sprintf(`document.querySelectorAll(%q).length`, sel), &n)
	return n
}

// goTo shows a view of the page (a same-document navigation).
func (e *uiEnv) goTo(hash string) chromedp.Action[chromedp.Void] {
	return chromedp.Action[chromedp.Void](func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Evaluate[json.RawMessage](fmt.Sprintf(`location.hash = %q`, hash))(ctx, t)
		return chromedp.Void{}, err
	})
}

// when waits until a JavaScript predicate holds, checked at each change
// of the page's DOM.
func when(predicate string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](predicate, chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(uiStep))
}

func visible(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}

func gone(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitNotPresent(chromedp.CSS(sel))
}

// setLocalTime sets the datetime-local input sel to now plus d (d 0:
// empty), as the browser's local time, and reports the change as a
// person's input does.
func setLocalTime(sel string, d time.Duration) chromedp.Action[chromedp.Void] {
	return chromedp.Action[chromedp.Void](func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Evaluate[json.RawMessage](fmt.Sprintf(`(() => {
			const el = document.querySelector(%q);
			let v = '';
			if (%d !== 0) {
				const d = new Date(Date.now() + %d);
				v = new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
			}
			el.value = v;
			el.dispatchEvent(new Event('change'));
			return el.value;
		})()`, sel, d.Milliseconds(), d.Milliseconds()))(ctx, t)
		return chromedp.Void{}, err
	})
}

// click clicks the first element sel matches as a mouse does. A live
// update may replace the element between its lookup and the click (the
// browser then answers that it cannot find the node): the click looks it
// up again, as a person clicks again on what the page now shows.
func click(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Action[chromedp.Void](func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		for {
			v, err := chromedp.Click(chromedp.CSS(sel))(ctx, t)
			if err == nil || ctx.Err() != nil || !nodeReplaced(err) {
				return v, err
			}
		}
	})
}

// nodeReplaced reports whether err is the browser's answer for a node that
// left the document after it was looked up.
func nodeReplaced(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Could not find node with given id") ||
		strings.Contains(msg, "Node is detached from document") ||
		strings.Contains(msg, "No node with given id found")
}

// login opens the server's root, which sends the browser to the login
// page, and logs in with token.
func (e *uiEnv) login(token string) {
	e.t.Helper()
	e.do("login as "+token,
		chromedp.Navigate(e.srv.url+"/"),
		visible("#token"),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		click("#login-submit"),
		visible("#who"),
		when(`document.getElementById('view').dataset.loaded`),
	)
}

// fetchStatus has the page send a request with its cookie (and the UI's
// header when ui) and returns the answer's status.
func (e *uiEnv) fetchStatus(method, path string, ui bool) int {
	e.t.Helper()
	headers := `{}`
	if ui {
		headers = `{"X-Jobstage-UI":"1"}`
	}
	var status int
	e.eval(fmt.Sprintf(`fetch(%q, {method: %q, headers: %s, credentials: "same-origin"}).then(r => r.status)`, path, method, headers), &status)
	return status
}

func (e *uiEnv) job(id string) *httpapi.Job {
	e.t.Helper()
	j, err := e.admin.Get(context.Background(), "email", id)
	if err != nil {
		e.t.Fatalf("job %s: %v", id, err)
	}
	return j
}

func (e *uiEnv) screenshot(name string) {
	e.t.Helper()
	dir := os.Getenv("JOBSTAGE_UI_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(e.ctx, uiStep)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// TestUIAdmin: an admin logs in (after a wrong token is refused), reads
// the overview, lists a type's jobs by state, filters them, opens a
// failed job and retries it, cancels it, requeues and deletes it,
// enqueues a job, pauses and resumes the type, reads the schedules and a
// workflow, and logs out; each action is checked through the API.
// With JOBSTAGE_UI_SCREENSHOTS=DIR it saves the main pages as PNGs.
func TestUIAdmin(t *testing.T) {
	e := newUIEnv(t)
	ctx := context.Background()

	// Nothing but the login page without a token.
	e.do("the UI without a token",
		chromedp.Navigate(e.srv.url+"/ui/"),
		visible("#token"),
		chromedp.SendKeys(chromedp.CSS("#token"), "not-a-token"),
		click("#login-submit"),
		visible("#login-error"))
	if got := e.text("#login-error"); !strings.Contains(got, "Unknown token") {
		t.Fatalf("login error %q", got)
	}

	e.login(uiAdmin)
	if got := e.text("#who"); got != "ops · admin" {
		t.Fatalf("who: %q", got)
	}
	e.do("overview", visible(`tr.type-row[data-type="email"]`), visible(`tr.type-row[data-type="thumbnail"]`))
	row := `tr.type-row[data-type="email"] `
	if p, r, f := e.text(row+"td.pending"), e.text(row+"td.running"), e.text(row+"td.finished"); p != "3" || r != "1" || f != "2" {
		t.Fatalf("email counts pending %s running %s finished %s", p, r, f)
	}
	if got := e.text(row + "td.oldest"); got == "—" {
		t.Fatalf("oldest due: %q", got)
	}
	// The activity of the last hour is the store's, though this page
	// opened after the jobs finished: s1 succeeded, f1 failed.
	if got := e.text(row + "td.activity span.summary"); got != "1 ok · 0 retried · 1 failed" {
		t.Fatalf("email activity %q", got)
	}
	if ok, failed := e.count(row+"td.activity svg rect.ok"), e.count(row+"td.activity svg rect.failed"); ok != 1 || failed != 1 {
		t.Fatalf("email activity bars: %d ok, %d failed", ok, failed)
	}
	var title string
	e.eval(`document.querySelector('tr.type-row[data-type="email"] td.activity svg rect.ok title')?.textContent ?? ''`, &title)
	if !strings.Contains(title, "1 succeeded, 1 failed, 0 canceled, 0 retried, 0 recycled") {
		t.Fatalf("activity bar title %q", title)
	}
	// A bar of three parts, two of them too small for a pixel, stays
	// within the sparkline's 20 px: each part shows, the tallest gives
	// way.
	var heights []int
	e.eval(`import('/ui/assets/dom.js').then(({ sparkline }) =>
		[...sparkline([{ ok: 98, retried: 1, failed: 1 }]).querySelectorAll('rect:not(.base)')]
			.map((r) => Number(r.getAttribute('height'))))`, &heights)
	if len(heights) != 3 || heights[0]+heights[1]+heights[2] != 20 || heights[1] != 1 || heights[2] != 1 {
		t.Fatalf("a bar of 98 ok, 1 retried and 1 failed: heights %v, want 18, 1, 1", heights)
	}
	e.screenshot("ui-overview.png")

	// A type's jobs, by state, filtered.
	e.do("jobs of email",
		click(row+"td a"),
		visible(`tr.job-row[data-id="p1"]`), visible(`tr.job-row[data-id="p3"]`))
	if n := e.count("tr.job-row"); n != 3 {
		t.Fatalf("%d pending rows, want 3", n)
	}
	// Thirty jobs without a key come first in the list (their zone sorts
	// first), so p1–p3 are past the first page of 25: the filters find
	// them because the server applies them.
	bulk := make([]httpapi.NewJob, 30)
	for i := range bulk {
		bulk[i] = httpapi.NewJob{ID: fmt.Sprintf("bulk-%02d", i)}
	}
	if _, err := e.admin.EnqueueBatch(ctx, "email", bulk); err != nil {
		t.Fatal(err)
	}
	e.do("the first page, bulk jobs", e.goTo("#/types/email?state=pending"), visible(`tr.job-row[data-id="bulk-00"]`), gone(`tr.job-row[data-id="p1"]`), visible("#next-page"))
	if n := e.count("tr.job-row"); n != 25 {
		t.Fatalf("%d rows on the first page, want 25", n)
	}
	e.do("filter by id prefix",
		chromedp.SendKeys(chromedp.CSS("#filter-id"), "p2"+kb.Enter),
		gone(`tr.job-row[data-id="bulk-00"]`), visible(`tr.job-row[data-id="p2"]`), gone("#next-page"))
	if n := e.count("tr.job-row"); n != 1 {
		t.Fatalf("%d rows for id prefix p2", n)
	}
	var hash string
	e.eval(`location.hash`, &hash)
	if !strings.Contains(hash, "id_prefix=p2") {
		t.Fatalf("the filtered view's address %q", hash)
	}
	e.do("filter by key",
		e.goTo("#/types/email?state=pending&key=tenant-a"),
		visible(`tr.job-row[data-id="p1"]`), visible(`tr.job-row[data-id="p3"]`))
	if n := e.count("tr.job-row"); n != 2 {
		t.Fatalf("%d rows for key tenant-a", n)
	}
	var shown string
	e.eval(`document.getElementById('filter-key').value`, &shown)
	if shown != "tenant-a" {
		t.Fatalf("the key filter shows %q", shown)
	}
	e.do("filter by key and id prefix",
		chromedp.SendKeys(chromedp.CSS("#filter-id"), "p3"+kb.Enter),
		gone(`tr.job-row[data-id="p1"]`), visible(`tr.job-row[data-id="p3"]`))
	if n := e.count("tr.job-row"); n != 1 {
		t.Fatalf("%d rows for key tenant-a and id prefix p3", n)
	}
	e.do("a key and id prefix no job has", chromedp.SendKeys(chromedp.CSS("#filter-id"), "x"+kb.Enter), visible("tr.empty"))
	if got := e.text("tr.empty"); got != "No pending job matches the filters." {
		t.Fatalf("an empty filtered list says %q", got)
	}
	// The filters stay with the pages: the next page of id prefix bulk
	// lists the rest of them, still filtered.
	rowIDs := `[...document.querySelectorAll('tr.job-row')].map((r) => r.dataset.id)`
	allBulk := func(n int) chromedp.Action[chromedp.Void] {
		return when(fmt.Sprintf(`(() => { const ids = %s; return ids.length === %d && ids.every((id) => id.startsWith('bulk-')); })()`, rowIDs, n))
	}
	e.do("pages of a filter",
		click("#clear-filters"), gone("#clear-filters"),
		chromedp.SendKeys(chromedp.CSS("#filter-id"), "bulk"+kb.Enter),
		visible("#clear-filters"), allBulk(25), visible("#next-page"))
	var first, second []string
	e.eval(rowIDs, &first)
	e.do("the next page of a filter", click("#next-page"), visible("#first-page"), allBulk(5), gone("#next-page"))
	e.eval(rowIDs, &second)
	listed := append(first, second...)
	slices.Sort(listed)
	if len(slices.Compact(listed)) != 30 {
		t.Fatalf("the pages of id prefix bulk: %v then %v", first, second)
	}
	e.eval(`document.getElementById('filter-id').value`, &shown)
	if shown != "bulk" {
		t.Fatalf("the id prefix filter shows %q on the second page", shown)
	}
	e.do("clear filters", click("#clear-filters"), gone("#clear-filters"), allBulk(25))

	e.do("running", click(`a.tab[data-state="running"]`), visible(`tr.job-row[data-id="r1"]`))
	if got := e.text(`tr.job-row[data-id="r1"] td.holder`); got != "mailer-7" {
		t.Fatalf("running job r1 held by %q in the list, want mailer-7", got)
	}
	e.do("finished", click(`a.tab[data-state="finished"]`), visible(`tr.job-row[data-id="f1"][data-outcome="failed"]`), visible(`tr.job-row[data-id="s1"][data-outcome="succeeded"]`))
	// Finished until a day ago: none; since an hour ago: both.
	e.do("finished until a day ago", setLocalTime("#filter-until", -24*time.Hour), visible("tr.empty"), gone(`tr.job-row[data-id="f1"]`))
	e.eval(`location.hash`, &hash)
	if !strings.Contains(hash, "until=") || !strings.Contains(hash, "Z") {
		t.Fatalf("the address with until %q", hash)
	}
	e.do("finished since an hour ago",
		setLocalTime("#filter-since", -time.Hour), setLocalTime("#filter-until", 0),
		visible(`tr.job-row[data-id="f1"]`), visible(`tr.job-row[data-id="s1"]`))
	e.eval(`location.hash`, &hash)
	if !strings.Contains(hash, "since=") || strings.Contains(hash, "until=") {
		t.Fatalf("the address with since %q", hash)
	}
	e.screenshot("ui-jobs.png")
	e.do("unfiltered", click("#clear-filters"), gone("#clear-filters"), visible(`tr.job-row[data-id="f1"]`))

	// A failed job: its error, then retry, cancel, requeue, delete.
	e.do("failed job", click(`tr.job-row[data-id="f1"] a`), visible("#job-error"), visible("#requeue"))
	if got := e.text("#job-error"); got != "smtp: 550 mailbox unavailable" {
		t.Fatalf("error shown: %q", got)
	}
	if got := e.text("#requeue"); got != "Retry" {
		t.Fatalf("a failed job's requeue button says %q", got)
	}
	if got := e.text(`#job-data`); !strings.Contains(got, `"to": "nobody@example.com"`) {
		t.Fatalf("data shown: %q", got)
	}
	e.screenshot("ui-job.png")
	e.do("retry", click("#requeue"), visible("#cancel"), gone("#requeue"))
	if j := e.job("f1"); j.State != fdbq.Pending {
		t.Fatalf("f1 after retry: %s", j.State)
	}
	e.do("cancel", click("#cancel"), visible("#requeue"), gone("#cancel"))
	if j := e.job("f1"); j.State != fdbq.Finished || j.Outcome != fdbq.Canceled {
		t.Fatalf("f1 after cancel: %s %s", j.State, j.Outcome)
	}
	if got := e.text(`dd[data-field="state"]`); got != "finished (canceled)" {
		t.Fatalf("state shown %q", got)
	}
	e.do("requeue", click("#requeue"), visible("#cancel"))
	if j := e.job("f1"); j.State != fdbq.Pending {
		t.Fatalf("f1 after requeue: %s", j.State)
	}
	e.do("delete", click("#delete"), when(`document.getElementById('delete').textContent === 'Really delete'`),
		click("#delete"), visible("#jobs-table"))
	if _, err := e.admin.Get(ctx, "email", "f1"); !isStatus(err, 404) {
		t.Fatalf("f1 after delete: %v", err)
	}

	// The running job shows its progress.
	e.do("running job", e.goTo("#/types/email/jobs/r1"), visible("#job-progress"), visible("#cancel"))
	if got := e.text("#job-progress"); !strings.Contains(got, `"sent": 40`) {
		t.Fatalf("progress shown %q", got)
	}
	if got := e.text(`dd[data-field="holder"]`); got != "mailer-7" {
		t.Fatalf("running job r1 held by %q on its page, want mailer-7", got)
	}

	// Enqueue: the data goes as written, every digit kept. (The list is
	// filtered by the new job's key: the bulk jobs fill the first page.)
	e.do("enqueue",
		e.goTo("#/types/email?state=pending&key=tenant-c"),
		visible("#enqueue-form"),
		chromedp.SetValue(chromedp.CSS("#enqueue-data"), `{"to":"new@example.com","n":12345678901234567890}`),
		chromedp.SendKeys(chromedp.CSS("#enqueue-id"), "ui-1"),
		chromedp.SendKeys(chromedp.CSS("#enqueue-key"), "tenant-c"),
		click("#enqueue-submit"),
		visible("#enqueued"),
		visible(`tr.job-row[data-id="ui-1"]`))
	if j := e.job("ui-1"); string(j.Data) != `{"to":"new@example.com","n":12345678901234567890}` || j.Key != "tenant-c" || j.State != fdbq.Pending {
		t.Fatalf("enqueued %s key %q state %s", j.Data, j.Key, j.State)
	}
	e.do("enqueue bad JSON",
		chromedp.SetValue(chromedp.CSS("#enqueue-data"), `{"to":`),
		click("#enqueue-submit"),
		visible("#flash.error"))

	// Pause and resume the type.
	e.do("pause", click("#pause"), visible("#resume"))
	if !e.typeInfo("email").Settings.Paused {
		t.Fatal("email not paused after the click")
	}
	if got := e.text("#type-state"); got != "paused" {
		t.Fatalf("type state shown %q", got)
	}
	e.do("resume", click("#resume"), visible("#pause"))
	if e.typeInfo("email").Settings.Paused {
		t.Fatal("email still paused after resume")
	}
	// And from the overview.
	e.do("pause from the overview", e.goTo("#/"), click(`tr.type-row[data-type="thumbnail"] button.pause`),
		visible(`tr.type-row[data-type="thumbnail"] button.resume`))
	if !e.typeInfo("thumbnail").Settings.Paused {
		t.Fatal("thumbnail not paused")
	}

	// Schedules and a workflow.
	e.do("schedules", e.goTo("#/schedules"), visible(`tr.schedule-row[data-name="nightly"]`))
	if _, err := e.admin.AddWorkflow(ctx, httpapi.NewWorkflow{ID: "wf1", Jobs: []httpapi.WorkflowJob{
		{Name: "extract", Type: "report"}, {Name: "render", Type: "report", DependsOn: []string{"extract"}},
	}}); err != nil {
		t.Fatal(err)
	}
	e.do("workflow", e.goTo("#/workflows/wf1"), visible(`tr.node-row[data-name="render"]`), visible(`tr.node-row[data-name="extract"] a`))
	e.do("workflow job", click(`tr.node-row[data-name="extract"] a`), visible(`dd[data-field="workflow"] a`))

	// Log out: the page is the login page's again.
	e.do("logout", click("#logout"), visible("#token"), chromedp.Navigate(e.srv.url+"/ui/"), visible("#token"))
	if s := e.fetchStatus("GET", "/v1/types", false); s != 401 {
		t.Fatalf("GET /v1/types after logout: %d", s)
	}
}

func (e *uiEnv) typeInfo(name string) *httpapi.TypeInfo {
	e.t.Helper()
	types, err := e.admin.Types(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	for _, ti := range types {
		if ti.Name == name {
			return ti
		}
	}
	e.t.Fatalf("no type %s", name)
	return nil
}

func isStatus(err error, status int) bool {
	var ae *httpapi.APIError
	return errors.As(err, &ae) && ae.Status == status
}

// TestUIRoles: a producer sees no button it may not use (pause, delete)
// and the API refuses those requests all the same, from the browser with
// its cookie and with its token; a request the cookie authenticates
// without the UI's header is refused; a worker and a metrics token see
// no job lists.
func TestUIRoles(t *testing.T) {
	e := newUIEnv(t)

	e.login(uiProducer)
	e.do("producer overview", visible(`tr.type-row[data-type="email"] td a`))
	if n := e.count("button.pause, button.resume"); n != 0 {
		t.Fatalf("a producer sees %d pause/resume buttons", n)
	}
	e.do("producer type page", e.goTo("#/types/email"), visible(`tr.job-row[data-id="p1"]`), visible("#enqueue-form"))
	if n := e.count("#pause, #resume"); n != 0 {
		t.Fatal("a producer sees the type's pause button")
	}
	e.do("producer job page", e.goTo("#/types/email/jobs/p1"), visible("#cancel"))
	if n := e.count("#delete"); n != 0 {
		t.Fatal("a producer sees the delete button")
	}
	// The API refuses anyway.
	if s := e.fetchStatus("POST", "/v1/types/email/pause", true); s != 403 {
		t.Fatalf("producer's pause from the browser: %d", s)
	}
	if s := e.fetchStatus("DELETE", "/v1/types/email/jobs/p1", true); s != 403 {
		t.Fatalf("producer's delete from the browser: %d", s)
	}
	if _, err := httpapi.NewClient(e.srv.url, uiProducer, nil).Pause(context.Background(), "email"); !isStatus(err, 403) {
		t.Fatalf("producer's pause with its token: %v", err)
	}
	// A request that changes something, authenticated by the cookie
	// alone, without the UI's header: refused, the job untouched.
	if s := e.fetchStatus("POST", "/v1/types/email/jobs/p1/cancel", false); s != 403 {
		t.Fatalf("cancel without the UI's header: %d", s)
	}
	if j := e.job("p1"); j.State != fdbq.Pending {
		t.Fatalf("p1 is %s after a refused cancel", j.State)
	}
	if s := e.fetchStatus("POST", "/v1/types/email/jobs/p1/cancel", true); s != 200 {
		t.Fatalf("cancel with the UI's header: %d", s)
	}

	// A worker may read the types, not list jobs.
	e.do("logout", click("#logout"), visible("#token"))
	e.login(uiWorker)
	e.do("worker overview", visible(`tr.type-row[data-type="email"]`))
	if n := e.count(`tr.type-row a, button.pause`); n != 0 {
		t.Fatalf("a worker sees %d links or buttons", n)
	}
	e.do("worker type page", e.goTo("#/types/email"), visible("#forbidden"))
	if s := e.fetchStatus("GET", "/v1/types/email/jobs", true); s != 403 {
		t.Fatalf("worker's list from the browser: %d", s)
	}

	// A metrics token reads nothing.
	e.do("logout", click("#logout"), visible("#token"))
	e.login(uiMetrics)
	e.do("metrics overview", visible("#forbidden"))
	if s := e.fetchStatus("GET", "/v1/types", true); s != 403 {
		t.Fatalf("metrics token's types from the browser: %d", s)
	}
}

// TestUILiveUpdate: pages follow GET /v1/events. A job enqueued through
// the API shows in the open jobs list, and a job finished by a worker
// moves the overview's counts, without a reload. It needs the event
// stream's route on the server.
func TestUILiveUpdate(t *testing.T) {
	e := newUIEnv(t)
	ctx := context.Background()

	// The stream must exist: say so plainly rather than time out below.
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.url+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+uiAdmin)
	rctx, cancel := context.WithCancel(ctx)
	resp, err := http.DefaultClient.Do(req.WithContext(rctx))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	status, ctype := resp.StatusCode, resp.Header.Get("Content-Type")
	cancel()
	resp.Body.Close()
	if status != 200 || !strings.HasPrefix(ctype, "text/event-stream") {
		t.Fatalf("GET /v1/events answered %d %q: the server has no event stream, which the UI's live updates follow", status, ctype)
	}

	e.login(uiAdmin)
	e.do("jobs list, live", e.goTo("#/types/email?state=pending"), visible(`tr.job-row[data-id="p1"]`), visible(`#live[data-status="on"]`))
	if _, err := e.admin.Enqueue(ctx, "email", httpapi.NewJob{ID: "live-1"}); err != nil {
		t.Fatal(err)
	}
	e.do("the enqueued job shows", visible(`tr.job-row[data-id="live-1"]`))

	e.do("overview, live", e.goTo("#/"), visible(`tr.type-row[data-type="thumbnail"]`), visible(`#live[data-status="on"]`))
	if got := e.text(`tr.type-row[data-type="thumbnail"] td.finished`); got != "0" {
		t.Fatalf("thumbnail finished %s", got)
	}
	ls, err := e.worker.Accept(ctx, "thumbnail", httpapi.AcceptRequest{Max: 1})
	if err != nil || len(ls) != 1 {
		t.Fatalf("accept: %v %v", err, ls)
	}
	if err := e.worker.Finish(ctx, ls[0], nil); err != nil {
		t.Fatal(err)
	}
	e.do("the finish shows", when(`document.querySelector('tr.type-row[data-type="thumbnail"] td.finished')?.textContent === '1'`),
		when(`document.querySelector('tr.type-row[data-type="thumbnail"] td.activity span.summary')?.textContent === '1 ok · 0 retried · 0 failed'`))
	if got := e.text(`tr.type-row[data-type="thumbnail"] td.pending`); got != "3" {
		t.Fatalf("thumbnail pending %s after one finished", got)
	}
}

// TestUIQuickstart is the README's walk through the UI: the quickstart's
// config as it is (no tokens, loopback), a job of type check that fails
// is enqueued with the CLI, the open overview counts it finished without
// a reload, its page shows the error and its trace id (the same the CLI
// prints), and Retry runs it again: the page follows it back to finished
// on its own, attempts counted anew.
func TestUIQuickstart(t *testing.T) {
	ctx := browsertest.New(t)
	cfg, data := copyQuickstart(t)
	s := startServer(t, cfg, "JOBSTAGE_STORE__PATH="+data)
	t.Cleanup(s.stop)
	e := &uiEnv{t: t, srv: s, ctx: ctx, admin: httpapi.NewClient(s.url, "", nil)}

	e.do("the overview, no login on loopback",
		chromedp.Navigate(s.url+"/"),
		visible(`tr.type-row[data-type="echo"]`), visible(`tr.type-row[data-type="check"]`),
		visible(`#live[data-status="on"]`))
	if got := e.text(`tr.type-row[data-type="check"] td.finished`); got != "0" {
		t.Fatalf("check finished %s before any job", got)
	}
	if _, errOut, code := jobstage(t, "", "enqueue", "check", `{"order": 7, "fail": true}`, "--id", "broken", "--server", s.url); code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, errOut)
	}
	e.do("the overview counts it finished, live",
		when(`document.querySelector('tr.type-row[data-type="check"] td.finished')?.textContent === '1'`))

	out, errOut, code := jobstage(t, "", "get", "check", "broken", "--json", "--server", s.url)
	var j httpapi.Job
	if err := json.Unmarshal([]byte(out), &j); code != 0 || err != nil {
		t.Fatalf("get: exit %d: %v: %s%s", code, err, out, errOut)
	}
	if j.Outcome != fdbq.Failed || j.Attempts != 2 || len(j.TraceID) != 32 {
		t.Fatalf("the job: %+v, want failed after 2 attempts, with a trace id", j)
	}
	e.do("the failed job", e.goTo("#/types/check/jobs/broken"), visible("#job-error"), visible("#requeue"))
	if got := e.text("#job-error"); !strings.Contains(got, "check: the job's data asks it to fail") {
		t.Fatalf("error shown: %q", got)
	}
	if got := e.text(`dd[data-field="trace_id"]`); got != j.TraceID {
		t.Fatalf("trace id shown %q, the job's is %s", got, j.TraceID)
	}
	if n := e.count("#job-errors tr.attempt-error"); n != 2 {
		t.Fatalf("%d failed attempts shown, want 2\n%s", n, e.pageState())
	}
	if got := e.text(`#job-errors tr.attempt-error[data-attempt="1"] pre`); got != "exit status 1: check: the job's data asks it to fail" {
		t.Fatalf("the first attempt's error shown: %q", got)
	}
	e.screenshot("ui-quickstart-failed.png")

	// Retry: pending again with its attempts reset, then worked twice
	// more and finished failed; the page shows each without a reload.
	e.do("retry",
		click("#requeue"), gone("#requeue"),
		when(`document.querySelector('dd[data-field="state"]')?.textContent === 'finished (failed)'`),
		when(`document.querySelector('dd[data-field="attempts"]')?.textContent.startsWith('2')`),
		when(`document.querySelectorAll('#job-errors tr.attempt-error').length === 4`))
	j2, err := e.admin.Get(context.Background(), "check", "broken")
	if err != nil || j2.Outcome != fdbq.Failed || j2.Attempts != 2 || j2.TraceID != j.TraceID || !j2.FinishedAt.After(j.FinishedAt) {
		t.Fatalf("after the retry: %+v (%v); before: %+v", j2, err, j)
	}
}

// TestUIKeys: a type's keys view, reached from the keys tab of its jobs
// (which a type without keys does not show), lists its keys a page at a
// time with their policy, ready zones, running jobs and rate window, and
// follows a finish without a reload.
func TestUIKeys(t *testing.T) {
	e := newUIEnv(t)
	ctx := context.Background()
	req, err := http.NewRequest("PUT", e.srv.url+"/v1/types/tenants", strings.NewReader(
		`{"zones":2,"key_default":{"max_running":5},"keys":{"idle":{"weight":4},"rated":{"max_starts":10,"per":"1h"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+uiAdmin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("PUT tenants: %v %v", resp, err)
	}
	resp.Body.Close()
	enqueue := func(jobs ...httpapi.NewJob) {
		t.Helper()
		if _, err := e.admin.EnqueueBatch(ctx, "tenants", jobs); err != nil {
			t.Fatal(err)
		}
	}
	// Running: two of rated, one of k05; then the rest ready.
	enqueue(httpapi.NewJob{ID: "r1", Key: "rated"}, httpapi.NewJob{ID: "r2", Key: "rated"}, httpapi.NewJob{ID: "k05-0", Key: "k05"})
	var leases []*httpapi.Lease
	for len(leases) < 3 {
		ls, err := e.worker.Accept(ctx, "tenants", httpapi.AcceptRequest{Max: 3})
		if err != nil || len(ls) == 0 {
			t.Fatalf("accept: %v %v", ls, err)
		}
		leases = append(leases, ls...)
	}
	var rest []httpapi.NewJob
	for i := range 30 {
		rest = append(rest, httpapi.NewJob{ID: fmt.Sprintf("k%02d-1", i), Key: fmt.Sprintf("k%02d", i)})
	}
	enqueue(append(rest, httpapi.NewJob{ID: "k05-2", Key: "k05"}, httpapi.NewJob{ID: "plain"})...)

	e.login(uiAdmin)
	e.do("the keys tab of tenants", e.goTo("#/types/tenants"), visible(`tr.job-row[data-id="plain"]`), visible("#keys-tab"))
	e.do("the keys view", click("#keys-tab"), visible(`tr.key-row[data-key="k05"]`), visible(`#live[data-status="on"]`))
	row := func(key, cell string) string { return e.text(fmt.Sprintf(`tr.key-row[data-key=%q] td.%s`, key, cell)) }
	if n := e.count("tr.key-row"); n != 26 {
		t.Fatalf("%d rows on the first page, want the jobs without a key and 25 keys\n%s", n, e.pageState())
	}
	for _, c := range []struct{ key, cell, want string }{
		{"", "key", "(no key)"}, {"", "running", "—"}, {"", "policy", "no key"}, {"", "ready", "1"},
		{"idle", "policy", "named"}, {"idle", "weight", "4"}, {"idle", "running", "0"}, {"idle", "ready", "0"},
		{"k05", "policy", "default"}, {"k05", "running", "1"}, {"k05", "max-running", "5"}, {"k05", "zones", "2"}, {"k05", "window", "—"},
		{"k00", "running", "0"}, {"k00", "ready", "1"},
	} {
		if got := row(c.key, c.cell); got != c.want {
			t.Fatalf("key %q, %s: %q, want %q", c.key, c.cell, got, c.want)
		}
	}
	if n := e.count(`tr.key-row[data-key="rated"]`); n != 0 {
		t.Fatal("rated, the 32nd key, on the first page")
	}
	e.screenshot("ui-keys.png")
	e.do("the next page", click("#keys-next-page"), visible(`tr.key-row[data-key="rated"]`), gone(`tr.key-row[data-key="k05"]`))
	if n := e.count("tr.key-row"); n != 7 {
		t.Fatalf("%d rows on the second page, want k24–k29 and rated", n)
	}
	if got := row("rated", "window"); !strings.HasPrefix(got, "2 of 10 until ") {
		t.Fatalf("rated's window: %q", got)
	}
	if got := row("rated", "running"); got != "2" {
		t.Fatalf("rated running: %q", got)
	}
	// A finish moves the count, live.
	for _, l := range leases {
		if l.Key == "rated" {
			if err := e.worker.Finish(ctx, l, nil); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	e.do("the finish shows", when(`document.querySelector('tr.key-row[data-key="rated"] td.running')?.textContent === '1'`))
	e.do("back to the first page", click("#keys-first-page"), visible(`tr.key-row[data-key="k05"]`))

	// A type without keys shows no keys tab; its keys view says so.
	var loaded string
	e.eval(`document.getElementById('view').dataset.loaded || '0'`, &loaded)
	e.do("thumbnail's jobs", e.goTo("#/types/thumbnail"), visible("tr.job-row"),
		when(fmt.Sprintf(`Number(document.getElementById('view').dataset.loaded) > %s`, loaded)))
	var hidden bool
	e.eval(`document.getElementById('keys-tab').hidden`, &hidden)
	if !hidden {
		t.Fatal("thumbnail, without keys, shows a keys tab")
	}
	e.do("thumbnail's keys view", e.goTo("#/types/thumbnail/keys"), visible("#no-keys"))
}
