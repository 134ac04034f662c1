package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
)

var (
	pendingDesc = prometheus.NewDesc("jobstage_jobs_pending",
		"Pending jobs, by type, read from the store.", []string{"type"}, nil)
	runningDesc = prometheus.NewDesc("jobstage_jobs_running",
		"Running jobs in every process, by type, read from the store.", []string{"type"}, nil)
	oldestDesc = prometheus.NewDesc("jobstage_oldest_pending_age_seconds",
		"How long the pending job due the longest has waited since its scheduled time, by type; 0 when none is due.", []string{"type"}, nil)
	unreadableTypesDesc = prometheus.NewDesc("jobstage_types_unreadable",
		"Registered types whose settings in the store cannot be read (nor accepted or swept until they are replaced), read from the store.", nil, nil)
)

// queueCollector reads the job store when Prometheus scrapes.
type queueCollector struct {
	m *Metrics
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pendingDesc
	ch <- runningDesc
	ch <- oldestDesc
	ch <- unreadableTypesDesc
	c.m.scrapeErrs.Describe(ch)
}

type typeSample struct {
	info   *fdbq.TypeInfo
	oldest time.Time
}

// Collect reads every type's counters and oldest due job in one read-only
// transaction, bounded by ScrapeTimeout. A failed read is counted in
// jobstage_queue_scrape_errors_total and reports no queue metrics. A type
// whose settings cannot be read is counted in jobstage_types_unreadable
// and reported with the others.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	q := c.m.q
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	now := time.Now()
	samples, err := kv.ReadTransact(ctx, q.DB(), func(tx kv.ReadTx) ([]typeSample, error) {
		types, err := q.Types(ctx, tx)
		if err != nil {
			return nil, err
		}
		out := make([]typeSample, 0, len(types))
		for _, t := range types {
			if t.Name == "" || fdbq.ValidateTypeName(t.Name) != nil {
				// A key that names no type, or a name fdbq refuses
				// (written by an earlier version): its counters are
				// reported, and no oldest job, which fdbq would not
				// look up.
				out = append(out, typeSample{info: t})
				continue
			}
			oldest, err := q.OldestDue(ctx, tx, t.Name)
			if err != nil {
				return nil, err
			}
			out = append(out, typeSample{info: t, oldest: oldest})
		}
		return out, nil
	})
	if err != nil {
		c.m.scrapeErrs.Inc()
	}
	c.m.scrapeErrs.Collect(ch)
	if err != nil {
		return
	}
	unreadable := 0
	out := newConstMetrics(ch)
	for _, s := range samples {
		name := s.info.Name
		if s.info.Err != nil {
			unreadable++
			if name == "" {
				continue
			}
		}
		out.send(pendingDesc, prometheus.GaugeValue, float64(s.info.Pending), name)
		out.send(runningDesc, prometheus.GaugeValue, float64(s.info.Running), name)
		age := 0.0
		if !s.oldest.IsZero() {
			age = max(now.Sub(s.oldest).Seconds(), 0)
		}
		out.send(oldestDesc, prometheus.GaugeValue, age, name)
	}
	out.send(unreadableTypesDesc, prometheus.GaugeValue, float64(unreadable))
}
