package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
	"github.com/jobstage/jobstage/metrics"
)

func TestLabel(t *testing.T) {
	for in, want := range map[string]string{
		"email":     "email",
		"café":      "café",
		"\xff":      `"\xff"`,
		"a\x01b":    `"a\x01b"`,
		"e\xe6\x97": `"e\xe6\x97"`,
		"a\nb":      `"a\nb"`,
		"":          "",
	} {
		if got := metrics.Label(in); got != want {
			t.Errorf("Label(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every metric counted as jobs move takes a label value that is not UTF-8
// without panicking (Prometheus' WithLabelValues would), reporting it
// under its quoted name; so does every one read at scrape time, from a
// store that holds types named so by an earlier version.
func TestLabelsNotUTF8(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	q := fdbq.New(db, fdbq.Options{})
	setType(t, q, "email", 3, true)
	settings, err := kv.ReadTransact(ctx, db, func(tx kv.ReadTx) ([]byte, error) {
		return tx.Get(root.MustPack(tuple.Tuple{8, "email"}))
	})
	if err != nil || settings == nil {
		t.Fatalf("settings of email: %q %v", settings, err)
	}
	// Two names that Label reports alike: one series, and no failed scrape.
	plant(t, db,
		root.MustPack(tuple.Tuple{8, "\xff"}), settings,
		root.MustPack(tuple.Tuple{8, `"\xff"`}), settings,
		root.MustPack(tuple.Tuple{8, "a\x01b"}), settings,
	)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, q)
	if err != nil {
		t.Fatal(err)
	}
	bad := "\xff"
	m.Enqueued(bad, 2)
	m.Accepted([]*fdbq.Lease{{Job: fdbq.Job{Type: bad}}})
	m.ExternalOutcome(bad, consumer.OutcomeSucceeded)
	m.ExternalOutcome(bad, "retried")
	m.ExternalOutcome("email", "\xfe")
	m.OnSweep(fdbq.SweepStats{ByType: map[string]fdbq.TypeSweepStats{bad: {Recycled: 1}, "a\x01b": {}}})
	m.HTTPObserve("GET /\xff", 200, time.Millisecond)
	_, _ = consumer.Wrap(func(context.Context, *consumer.Job[task]) (string, error) {
		return "", nil
	}, metrics.Middleware(m))(ctx, &consumer.Job[task]{Type: bad, Attempt: 1})

	quoted := `"\xff"`
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"jobstage_jobs_enqueued_total", []string{quoted}, 2},
		{"jobstage_jobs_accepted_total", []string{quoted}, 1},
		{"jobstage_jobs_finished_total", []string{quoted, "succeeded"}, 2},
		{"jobstage_jobs_finished_total", []string{quoted, "failed"}, 1},
		{"jobstage_jobs_finished_total", []string{"email", `"\xfe"`}, 1},
		{"jobstage_jobs_retried_total", []string{quoted}, 1},
		{"jobstage_jobs_recycled_total", []string{quoted, "retried"}, 1},
		{"jobstage_jobs_recycled_total", []string{`"a\x01b"`, "retried"}, 0},
		{"jobstage_http_requests_total", []string{`"GET /\xff"`, "200"}, 1},
		{"jobstage_handlers_running", []string{quoted}, 0},
		{"jobstage_jobs_pending", []string{quoted}, 0},
		{"jobstage_jobs_running", []string{`"a\x01b"`}, 0},
		{"jobstage_oldest_pending_age_seconds", []string{quoted}, 0},
		{"jobstage_jobs_pending", []string{"email"}, 0},
		{"jobstage_queue_scrape_errors_total", nil, 0},
	} {
		if v := value(t, reg, c.name, c.labels...); v != c.want {
			t.Errorf("%s%q = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
}
