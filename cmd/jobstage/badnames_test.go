package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/tuple"
)

const badNamesConfig = `
store:
  path: %s
types:
  echo:
    activity_timeout: 2s
pipelines:
  echo:
    type: echo
    concurrency: 1
    handler:
      exec:
        command: ["cat"]
`

// A store that holds type names an earlier version let in (bytes that are
// not UTF-8, a control character) starts, serves and answers /metrics:
// such a name is logged, never made a metric label that panics.
func TestBadTypeNamesInStore(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	bad := []string{"\xff", "a\x01b"}
	seedTypes(t, data, bad)
	cfg := filepath.Join(dir, "jobstage.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, badNamesConfig, data), 0o600); err != nil {
		t.Fatal(err)
	}

	for run := range 2 { // the second start finds the same store
		s := startServer(t, cfg)
		body := httpGet(t, s.url+"/metrics")
		for _, want := range []string{
			`jobstage_jobs_pending{type="echo"} 0`,
			`jobstage_jobs_pending{type="\"\\xff\""} 0`,
			`jobstage_jobs_pending{type="\"a\\x01b\""} 0`,
		} {
			if !strings.Contains(body, want) {
				t.Fatalf("run %d: metrics lack %s:\n%s", run, want, body)
			}
		}
		out, errOut, code := jobstage(t, "", "enqueue", "echo", `{"n":1}`, "--wait", "30s", "--server", s.url)
		if code != 0 {
			t.Fatalf("run %d: enqueue: exit %d: %s%s\n%s", run, code, out, errOut, s.logs)
		}
		// The API refuses such a name, and the server lives on.
		req, _ := http.NewRequest("PUT", s.url+"/v1/types/%ff", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("run %d: PUT /v1/types/%%ff: %s", run, resp.Status)
		}
		httpGet(t, s.url+"/metrics")
		s.stop()
		logs := s.logs.String()
		if strings.Contains(logs, "panic") {
			t.Fatalf("run %d: the server panicked:\n%s", run, logs)
		}
		var named []string
		for _, line := range strings.Split(logs, "\n") {
			var rec struct{ Msg, Type string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "the store holds a type whose name is not valid" {
				named = append(named, rec.Type)
			}
		}
		if want := []string{`"\xff"`, `"a\x01b"`}; !slices.Equal(slices.Sorted(slices.Values(named)), want) {
			t.Fatalf("run %d: the log names the bad types %q, want %q:\n%s", run, named, want, logs)
		}
	}
}

// seedTypes registers types under names fdbq refuses, writing their keys
// directly as an earlier version could have.
func seedTypes(t *testing.T, dir string, names []string) {
	t.Helper()
	ctx := context.Background()
	st, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	defer db.Close()
	q := fdbq.New(db, fdbq.Options{})
	if err := q.SetType(ctx, db, "seed", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	root := tuple.FromBytes(fdbq.DefaultPrefix)
	if err := db.Transact(ctx, func(tx kv.Tx) error {
		settings, err := tx.Get(root.MustPack(tuple.Tuple{8, "seed"}))
		if err != nil {
			return err
		}
		if settings == nil {
			return fmt.Errorf("no settings under the key of type seed")
		}
		for _, name := range names {
			tx.Set(root.MustPack(tuple.Tuple{8, name}), settings)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
