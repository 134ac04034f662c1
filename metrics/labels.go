package metrics

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Label returns the label value a name is reported under. Label values
// come from data (type names read from the store, pipeline names, route
// patterns), and Prometheus refuses a value that is not UTF-8: its
// WithLabelValues panics on one. A name that is valid UTF-8 without
// control characters is its own label; any other is reported quoted as Go
// quotes it ("\xff" becomes `"\xff"`, with the quotes), which is UTF-8,
// printable and tells such names apart. fdbq's type names (see
// fdbq.ValidateTypeName) are always their own label.
func Label(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl) {
		return strconv.Quote(s)
	}
	return s
}

func labels(lvs []string) []string {
	out := make([]string, len(lvs))
	for i, v := range lvs {
		out[i] = Label(v)
	}
	return out
}

// The metrics' children are taken through these, never WithLabelValues:
// they make every value a valid label and cannot panic. A child that
// still cannot be made (a wrong number of labels: a mistake of this
// package) counts into one that is not registered.

func counter(v *prometheus.CounterVec, lvs ...string) prometheus.Counter {
	c, err := v.GetMetricWithLabelValues(labels(lvs)...)
	if err != nil {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "discarded"})
	}
	return c
}

func gauge(v *prometheus.GaugeVec, lvs ...string) prometheus.Gauge {
	g, err := v.GetMetricWithLabelValues(labels(lvs)...)
	if err != nil {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "discarded"})
	}
	return g
}

func observer(v *prometheus.HistogramVec, lvs ...string) prometheus.Observer {
	o, err := v.GetMetricWithLabelValues(labels(lvs)...)
	if err != nil {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "discarded"})
	}
	return o
}

// constMetrics sends the metrics a collector reads at scrape time, each
// label value made valid by Label, and at most one series per label set:
// two names that Label reports alike (a name not UTF-8 and another that is
// its quoted form) would otherwise fail the scrape of every other metric
// of the collector.
type constMetrics struct {
	ch   chan<- prometheus.Metric
	seen map[string]bool
}

func newConstMetrics(ch chan<- prometheus.Metric) *constMetrics {
	return &constMetrics{ch: ch, seen: map[string]bool{}}
}

// send reports one series, and false when it was left out (a label set
// already sent).
func (c *constMetrics) send(d *prometheus.Desc, t prometheus.ValueType, v float64, lvs ...string) bool {
	lvs = labels(lvs)
	k := d.String()
	for _, l := range lvs {
		k += "\xff" + l
	}
	if c.seen[k] {
		return false
	}
	m, err := prometheus.NewConstMetric(d, t, v, lvs...)
	if err != nil {
		return false
	}
	c.seen[k] = true
	c.ch <- m
	return true
}
