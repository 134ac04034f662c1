package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

const restConfig = `
store:
  backend: embedded
  path: %s
types:
  t1: {activity_timeout: 30s, retention: 24h}
  t2: {activity_timeout: 30s}
  t3: {activity_timeout: 30s}
  t4: {activity_timeout: 30s}
  t5: {activity_timeout: 30s}
pipelines:
  p1: {type: t1, concurrency: 2, handler: {exec: {command: ["cat"]}}}
  p2: {type: t2, concurrency: 2, handler: {exec: {command: ["cat"]}}}
metrics:
  path: /metrics
`

// storeTransactions scrapes the server's count of store transactions.
func storeTransactions(t *testing.T, url string) int64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "jobstage_store_transactions_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int64(f)
		}
	}
	t.Fatal("no jobstage_store_transactions_total in /metrics")
	return 0
}

// atRest returns the store transactions the server made in d, apart from
// the scrapes': a scrape reports the store's counters before it reads the
// store, so its own read shows in the next scrape, and one right after
// another measures it.
func atRest(t *testing.T, url string, d time.Duration) int64 {
	t.Helper()
	s0 := storeTransactions(t, url)
	s1 := storeTransactions(t, url)
	time.Sleep(d) // the window measured: nothing is to happen in it
	s2 := storeTransactions(t, url)
	return (s2 - s1) - (s1 - s0)
}

// TestAtRestNoTransactions: a server with 5 types and 2 pipelines, a job
// finished and nothing due, makes no store transaction in 20 s (a scrape
// aside): its producers and its activity monitor wait on watches and a
// timer.
func TestAtRestNoTransactions(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jobstage.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, restConfig, filepath.Join(dir, "data")), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cfg)
	defer s.stop()
	ctx := context.Background()
	cl := httpapi.NewClient(s.url, "", nil)
	if _, err := cl.Enqueue(ctx, "t1", httpapi.NewJob{ID: "a", Data: json.RawMessage(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	if j, err := cl.Wait(ctx, "t1", "a", fdbq.Finished, 30*time.Second); err != nil || j.State != fdbq.Finished {
		t.Fatalf("job a: %v %+v", err, j)
	}
	// Settled: a window of 2 s with nothing (the start's sweep, the
	// finish's wake-ups done), within 30 s.
	deadline := time.Now().Add(30 * time.Second)
	for n := atRest(t, s.url, 2*time.Second); n != 0; n = atRest(t, s.url, 2*time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("still %d store transactions in 2 s windows 30 s after the last job", n)
		}
	}
	if n := atRest(t, s.url, 20*time.Second); n != 0 {
		t.Errorf("%d store transactions in 20 s at rest (scrapes aside), want 0", n)
	}
}
