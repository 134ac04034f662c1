package metrics_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
	"github.com/jobstage/jobstage/metrics"
)

var root = tuple.FromBytes(fdbq.DefaultPrefix)

func plant(t *testing.T, db *kv.DB, kvs ...[]byte) {
	t.Helper()
	if err := db.Transact(context.Background(), func(tx kv.Tx) error {
		for i := 0; i+1 < len(kvs); i += 2 {
			tx.Set(kvs[i], kvs[i+1])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A type whose settings cannot be read, and a key of the registry that
// names no type, fail no scrape: they are counted, and every type's jobs
// reported. A pending key that is not one fdbq writes neither.
func TestScrapeOfUnreadableTypes(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	q := fdbq.New(db, fdbq.Options{})
	setType(t, q, "email", 3, true)
	setType(t, q, "sms", 3, true)
	if _, err := q.AddBatch(ctx, db, []fdbq.NewJob{{Type: "email"}, {Type: "sms"}, {Type: "sms"}}); err != nil {
		t.Fatal(err)
	}
	plant(t, db,
		root.MustPack(tuple.Tuple{8, "sms"}), []byte("garbage"),
		root.MustPack(tuple.Tuple{8, int64(1)}), []byte("{}"),
		root.MustPack(tuple.Tuple{2, "email", nil}), nil,
	)
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, q); err != nil {
		t.Fatal(err)
	}
	if v := value(t, reg, "jobstage_queue_scrape_errors_total"); v != 0 {
		t.Errorf("scrape errors: %v", v)
	}
	if v := value(t, reg, "jobstage_types_unreadable"); v != 2 {
		t.Errorf("unreadable types: %v, want 2", v)
	}
	if v := value(t, reg, "jobstage_jobs_pending", "email"); v != 1 {
		t.Errorf("pending email jobs: %v, want 1", v)
	}
	if v := value(t, reg, "jobstage_jobs_pending", "sms"); v != 2 {
		t.Errorf("pending sms jobs: %v, want 2 (the counts are read without the settings)", v)
	}
}

// The jobs a sweep skips are counted by type, as the ones it recycles.
func TestSkippedBySweep(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	var clock struct{ now time.Time }
	clock.now = time.Now()
	q := fdbq.New(db, fdbq.Options{Now: func() time.Time { return clock.now }})
	setType(t, q, "email", 2, false)
	if _, err := q.AddBatch(ctx, db, []fdbq.NewJob{{Type: "email", ID: "bad"}, {Type: "email", ID: "ok"}}); err != nil {
		t.Fatal(err)
	}
	if ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{Max: 2}); err != nil || len(ls) != 2 {
		t.Fatalf("accepted %d: %v", len(ls), err)
	}
	plant(t, db, root.MustPack(tuple.Tuple{1, "email", "bad"}), []byte{0x7f})
	clock.now = clock.now.Add(time.Hour)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, q)
	if err != nil {
		t.Fatal(err)
	}
	// The monitor notes the accepts, then its clock passes the timeout.
	own := time.Now()
	mon := fdbq.NewMonitor(q, fdbq.MonitorOptions{Logger: slog.New(slog.DiscardHandler), Clock: func() time.Time { return own }})
	if _, err := mon.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	own = own.Add(time.Hour)
	for range 2 {
		s, err := mon.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m.OnSweep(s)
	}
	if v := value(t, reg, "jobstage_jobs_sweep_skipped_total", "email"); v != 2 {
		t.Errorf("skipped: %v, want 2 (one job, at each of two sweeps)", v)
	}
	if v := value(t, reg, "jobstage_jobs_recycled_total", "email", "retried"); v != 1 {
		t.Errorf("recycled and retried: %v, want 1", v)
	}
}
