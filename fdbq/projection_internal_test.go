package fdbq

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/kvtest"
	"github.com/jobstage/jobstage/kv/tuple"
)

// TestProjectionOneType runs the whole cycle of one type's jobs — add,
// accept, two heartbeats, finish — beside an activity monitor, through a
// TracingBackend, and projects
// the writes of every window of jobs onto clusters of 1, 8, 64 and 512
// shards (kvtest.Projection). It logs the table; run it with -v:
//
//	JOBSTAGE_PROJECTION_JOBS=100000 go test -run TestProjectionOneType -v ./fdbq/
//
// JOBSTAGE_PROJECTION_ZONES sets the type's Zones, and
// JOBSTAGE_PROJECTION_TENANTS=N gives the jobs N fairness keys in turn.
//
// projects 100,000 jobs in windows of 10,000 (by default 2,000 in
// windows of 250). The DB writes commit markers, as it does on
// FoundationDB; the second table leaves them out, for the jobs layer's
// own writes, and the third counts a key once per transaction that writes
// it (kvtest.ProjectionOptions.PerTransaction). What it asserts is what
// holds of any layout.
func TestProjectionOneType(t *testing.T) {
	jobs, window := 2_000, 250
	if v := os.Getenv("JOBSTAGE_PROJECTION_JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("JOBSTAGE_PROJECTION_JOBS=%q: want a number of jobs", v)
		}
		jobs, window = n, min(n, 10_000)
	}
	if testing.Short() {
		jobs, window = 1_000, 250
	}
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	db, tr := kvtest.NewTracingDB(kv.NewDB(st, kv.Options{}), kv.Options{AlwaysMarkers: true})
	q := New(db, Options{})
	ctx := context.Background()
	const typ = "proj"
	s := DefaultTypeSettings()
	s.ActivityTimeout = time.Hour
	if v := os.Getenv("JOBSTAGE_PROJECTION_ZONES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxZones {
			t.Fatalf("JOBSTAGE_PROJECTION_ZONES=%q: want a number of zones", v)
		}
		s.Zones = n
	}
	tenants := 0
	if v := os.Getenv("JOBSTAGE_PROJECTION_TENANTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("JOBSTAGE_PROJECTION_TENANTS=%q: want a number of fairness keys", v)
		}
		tenants = n
	}
	if err := q.SetType(ctx, db, typ, s); err != nil {
		t.Fatal(err)
	}
	// An activity monitor runs beside the jobs, as in every deployment:
	// its holds and reads are in the trace.
	m := NewMonitor(q, MonitorOptions{Logger: slog.New(slog.DiscardHandler)})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	tr.Take() // the type's registration is not a job's

	noMarkers := func(w kvtest.Write) int64 {
		if bytes.HasPrefix(w.Key, kv.DefaultMarkerPrefix) {
			return 0
		}
		return 1
	}
	all := kvtest.NewProjection(kvtest.ProjectionOptions{Group: keySpace})
	own := kvtest.NewProjection(kvtest.ProjectionOptions{Group: keySpace, Weight: noMarkers})
	once := kvtest.NewProjection(kvtest.ProjectionOptions{Group: keySpace, Weight: noMarkers, PerTransaction: true})
	start := time.Now()
	for done := 0; done < jobs; done += window {
		n := min(window, jobs-done)
		runCycles(t, q, typ, n, tenants)
		txns := tr.Take()
		// Two heartbeats and the finish are each a transaction of one
		// job's, whatever the layout.
		if len(txns) < 3*n {
			t.Fatalf("window of %d jobs: %d transactions traced, want at least %d", n, len(txns), 3*n)
		}
		all.AddWindow(txns)
		own.AddWindow(txns)
		once.AddWindow(txns)
	}
	elapsed := time.Since(start)
	if c, err := q.Count(ctx, db, typ, Finished); err != nil || c != int64(jobs) {
		t.Fatalf("%d jobs finished (%v), want %d", c, err, jobs)
	}

	for _, p := range []struct {
		name string
		r    kvtest.ProjectionReport
	}{
		{"every write, commit markers included (as on FoundationDB)", all.Report()},
		{"the jobs layer's writes (no commit markers)", own.Report()},
		{"the jobs layer's writes, each key once per transaction", once.Report()},
	} {
		checkProjection(t, p.r)
		t.Logf("%d jobs of one type (add, accept, 2 heartbeats, finish), windows of %d jobs; %s:\n%s", jobs, window, p.name, p.r.Table(describeKey))
	}
	t.Logf("%d jobs in %v", jobs, elapsed.Round(time.Millisecond))
}

// checkProjection checks what holds of a projection whatever the layout.
func checkProjection(t *testing.T, r kvtest.ProjectionReport) {
	t.Helper()
	for i, w := range r.Windows {
		if w.Writes == 0 || w.BusiestKeyShare <= 0 || w.BusiestKeyShare > 1 {
			t.Errorf("window %d: %d writes, busiest key's share %v", i, w.Writes, w.BusiestKeyShare)
		}
		for _, sw := range w.Shards {
			var sum int64
			for _, n := range sw.Writes {
				sum += n
			}
			if sum != w.Writes {
				t.Errorf("window %d, %d shards: shards' writes add up to %d, want %d", i, sw.Shards, sum, w.Writes)
			}
			if sw.Share > 1 || sw.Share < w.BusiestKeyShare || sw.Share*float64(sw.Shards) < 1-1e-9 {
				t.Errorf("window %d, %d shards: busiest shard's share %v below the busiest key's %v or 1/S", i, sw.Shards, sw.Share, w.BusiestKeyShare)
			}
			if sw.Shards == 1 && sw.Share != 1 {
				t.Errorf("window %d: a single shard takes %v of the writes", i, sw.Share)
			}
		}
	}
	for _, s := range r.Shards {
		if s.Median > s.Max {
			t.Errorf("%d shards: median %v above max %v", s.Shards, s.Median, s.Max)
		}
	}
}

// runCycles adds n jobs of typ, 100 to an AddBatch, while four workers
// accept up to 100 at a time (a producer's default batch), heartbeat each
// job twice and finish it, until all n are finished.
func runCycles(t *testing.T, q *Queue, typ string, n, tenants int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const batch, workers = 100, 4
	var (
		finished atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		cancel()
	}
	data := json.RawMessage(`{"to":"someone@example.com"}`)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for added := 0; added < n; added += batch {
			js := make([]NewJob, min(batch, n-added))
			for i := range js {
				js[i] = NewJob{Type: typ, Data: data}
				if tenants > 0 {
					js[i].Key = fmt.Sprintf("tenant-%d", (added+i)%tenants)
				}
			}
			if _, err := q.AddBatch(ctx, q.DB(), js); err != nil {
				fail(fmt.Errorf("add: %w", err))
				return
			}
		}
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for finished.Load() < int64(n) && ctx.Err() == nil {
				ls, err := q.Accept(ctx, typ, AcceptOptions{Max: batch, Timeout: 20 * time.Millisecond})
				if err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("accept: %w", err))
					}
					return
				}
				for _, l := range ls {
					for range 2 {
						if err := q.Heartbeat(ctx, q.DB(), l, HeartbeatOptions{}); err != nil {
							fail(fmt.Errorf("heartbeat: %w", err))
							return
						}
					}
					if err := q.Finish(ctx, q.DB(), l, nil); err != nil {
						fail(fmt.Errorf("finish: %w", err))
						return
					}
					finished.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
}

// keyNames name the queue's key spaces by their tag (keys.go).
var keyNames = map[int64]string{
	tagJob:          "job record",
	tagPending:      "ready index",
	tagWatch:        "type's watch counter",
	tagChange:       "type's change counter",
	tagLegacyActive: "legacy activity index",
	tagFinished:     "finished index",
	tagCount:        "type's state counter",
	tagType:         "type settings",
	tagClaim:        "accept claims",
	tagRegistry:     "registry counter",
	tagSchedule:     "scheduled index",
	tagActive:       "activity index",
	tagStamp:        "renewal stamps",
	tagLayout:       "layout version",
	tagZones:        "zone marks",
	tagKeyRunning:   "key's running count",
	tagKeyStarts:    "key's rate window",
	tagInterest:     "type's interest count",
	tagInterested:   "interest entry",
	tagUnique:       "unique index",
	tagSchedules:    "schedules",
	tagWorkflows:    "workflows",
	tagEvents:       "event log",
	tagEventsHeld:   "event log holds",
	tagEventsFloor:  "event log floor",
	tagHistory:      "type's history",
	// The schedules' change counter, whose name would not align above.
	tagSchedulesChange: "schedules' change counter",
}

// keySpace names the key space of a key of the queue, or says it is a
// commit marker.
func keySpace(key []byte) string {
	if bytes.HasPrefix(key, kv.DefaultMarkerPrefix) {
		return "commit markers"
	}
	if el, err := tuple.Unpack(key); err == nil && len(el) >= 2 {
		if tag, ok := el[1].(int64); ok && keyNames[tag] != "" {
			return keyNames[tag]
		}
	}
	return "other"
}

// describeKey formats a key of the queue as its tuple and the name of its
// key space, and a commit marker as one.
func describeKey(key []byte) string {
	if rest, ok := bytes.CutPrefix(key, kv.DefaultMarkerPrefix); ok && len(rest) >= 9 {
		if rest[0] >= 0x80 { // a bucket byte, then the seconds
			return fmt.Sprintf("commit marker of bucket %#x, second %d", rest[0], binary.BigEndian.Uint64(rest[1:]))
		}
		return fmt.Sprintf("commit marker of second %d", binary.BigEndian.Uint64(rest))
	}
	return kvtest.FormatKey(key) + " " + keySpace(key)
}
