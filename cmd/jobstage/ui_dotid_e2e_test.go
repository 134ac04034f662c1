package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/internal/browsertest"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// TestUIDotIDJob: a job an earlier version stored under the id "..",
// which a browser removes from a URL's path even sent escaped, is listed
// by the UI, opened, canceled and deleted there (the UI names it by the
// routes' query form); and `jobstage` reaches it too.
func TestUIDotIDJob(t *testing.T) {
	ctx := browsertest.New(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	func() {
		st, err := embedded.Open(data, embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		db := kv.NewDB(st, kv.Options{})
		defer db.Close()
		q := fdbq.New(db, fdbq.Options{})
		bg := context.Background()
		if err := q.SetType(bg, db, "email", fdbq.DefaultTypeSettings()); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Add(bg, db, fdbq.NewJob{Type: "email", ID: "stored"}); err != nil {
			t.Fatal(err)
		}
		jobtest.RenameJob(t, db, "email", "stored", "..")
	}()
	cfg := filepath.Join(dir, "jobstage.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, uiConfig, data), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cfg, "UI_ADMIN_TOKEN="+uiAdmin, "UI_PRODUCER_TOKEN="+uiProducer,
		"UI_WORKER_TOKEN="+uiWorker, "UI_METRICS_TOKEN="+uiMetrics)
	t.Cleanup(s.stop)
	e := &uiEnv{t: t, srv: s, ctx: ctx, admin: httpapi.NewClient(s.url, uiAdmin, nil)}

	// The command line reads it.
	t.Setenv("JOBSTAGE_TOKEN", uiAdmin)
	out, errOut, code := jobstage(t, "", "get", "email", "..", "--server", s.url)
	if code != 0 {
		t.Fatalf("jobstage get email ..: exit %d: %s%s", code, out, errOut)
	}
	// A new job may not take such an id.
	if _, errOut, code := jobstage(t, "", "enqueue", "email", "--id", ".", "--server", s.url); code != 1 {
		t.Fatalf("jobstage enqueue --id .: exit %d: %s", code, errOut)
	}

	e.login(uiAdmin)
	e.do("the job in the list", e.goTo("#/types/email?state=pending"), visible(`tr.job-row[data-id=".."]`))
	e.do("open it", click(`tr.job-row[data-id=".."] a`), visible("#cancel"), visible(`dd[data-field="state"]`))
	if got := e.text(`dd[data-field="state"]`); got != "pending" {
		t.Fatalf("state shown %q", got)
	}
	e.do("cancel it", click("#cancel"), visible("#requeue"))
	if j, err := e.admin.Get(context.Background(), "email", ".."); err != nil || j.Outcome != fdbq.Canceled {
		t.Fatalf("after cancel: %v %+v", err, j)
	}
	e.do("delete it", click("#delete"), when(`document.getElementById('delete').textContent === 'Really delete'`),
		click("#delete"), visible("#jobs-table"))
	if _, err := e.admin.Get(context.Background(), "email", ".."); !isStatus(err, 404) {
		t.Fatalf("after delete: %v", err)
	}
}
