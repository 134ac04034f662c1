package metrics

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobstage/jobstage/kv"
)

var (
	storeTxDesc = prometheus.NewDesc("jobstage_store_transactions_total",
		"Store transaction attempts started.", nil, nil)
	storeCommitsDesc = prometheus.NewDesc("jobstage_store_commits_total",
		"Store transaction attempts that committed.", nil, nil)
	storeConflictsDesc = prometheus.NewDesc("jobstage_store_conflicts_total",
		"Store transaction attempts that failed with a conflict (not_committed, 1020).", nil, nil)
	storeRetriesDesc = prometheus.NewDesc("jobstage_store_retries_total",
		"Store transaction attempts that failed with a retryable error, by FoundationDB error code.", []string{"code"}, nil)
)

// storeCollector reports a kv.DB's counters; it reports nothing until
// ObserveStore gives it the DB.
type storeCollector struct {
	db atomic.Pointer[kv.DB]
}

func newStoreCollector() *storeCollector { return &storeCollector{} }

// ObserveStore reports db's transaction counters (kv.Stats). A later call
// replaces the DB observed.
func (m *Metrics) ObserveStore(db *kv.DB) {
	if m == nil {
		return
	}
	m.store.db.Store(db)
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- storeTxDesc
	ch <- storeCommitsDesc
	ch <- storeConflictsDesc
	ch <- storeRetriesDesc
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	db := c.db.Load()
	if db == nil {
		return
	}
	s := db.Stats()
	ch <- prometheus.MustNewConstMetric(storeTxDesc, prometheus.CounterValue, float64(s.Transactions.Load()))
	ch <- prometheus.MustNewConstMetric(storeCommitsDesc, prometheus.CounterValue, float64(s.Commits.Load()))
	ch <- prometheus.MustNewConstMetric(storeConflictsDesc, prometheus.CounterValue, float64(s.Conflicts.Load()))
	byCode := s.RetriesByCode()
	if len(byCode) == 0 {
		// Zero retries still make a series, so that rate() over it is 0,
		// not absent.
		byCode = map[int]int64{kv.CodeNotCommitted: 0}
	}
	out := newConstMetrics(ch)
	for code, n := range byCode {
		out.send(storeRetriesDesc, prometheus.CounterValue, float64(n), strconv.Itoa(code))
	}
}
