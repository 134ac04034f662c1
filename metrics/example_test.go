package metrics_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/metrics"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// printMetrics prints the samples of the named metrics reg gathers,
// as name{labels} value, in the registry's order (sorted by name and
// labels).
func printMetrics(reg prometheus.Gatherer, names ...string) {
	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		found := false
		for _, n := range names {
			found = found || f.GetName() == n
		}
		if !found {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			fmt.Printf("%s{%s} %v\n", f.GetName(), strings.Join(labels, ","), v)
		}
	}
}

// Metrics count what a pipeline does (its Stage counts accepted jobs,
// OnEnded what each commit did) and read the store's counters when
// Prometheus scrapes. Serve the registry with Metrics.Handler.
func Example() {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	defer db.Close()
	q := fdbq.New(db, fdbq.Options{})
	ctx := context.Background()
	for _, typ := range []string{"email", "report"} {
		if err := q.DeclareType(ctx, db, typ, fdbq.DefaultTypeSettings()); err != nil {
			log.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, q)
	if err != nil {
		log.Fatal(err)
	}

	ids := []string{"e1", "e2", "e3"}
	for _, id := range ids {
		if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: id}); err != nil {
			log.Fatal(err)
		}
	}
	if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "report", ID: "r1"}); err != nil {
		log.Fatal(err)
	}
	m.Enqueued("email", 3)
	m.Enqueued("report", 1)

	send := func(ctx context.Context, j *consumer.Job[struct{}]) (struct{}, error) { return struct{}{}, nil }
	p, err := pipeline.From(producer.New(q, "email", producer.Options{})).
		Via(m.Stage()).
		To(consumer.Must(consumer.New(send, consumer.Options{}))).
		WithOptions(pipeline.Options{OnEnded: m.Ended}).
		Build()
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := q.Wait(ctx, "email", ids, fdbq.Finished); err != nil {
		log.Fatal(err)
	}
	if err := p.Stop(ctx); err != nil {
		log.Fatal(err)
	}

	printMetrics(reg, "jobstage_jobs_enqueued_total", "jobstage_jobs_accepted_total", "jobstage_jobs_pending")
	// Output:
	// jobstage_jobs_accepted_total{type="email"} 3
	// jobstage_jobs_enqueued_total{type="email"} 3
	// jobstage_jobs_enqueued_total{type="report"} 1
	// jobstage_jobs_pending{type="email"} 0
	// jobstage_jobs_pending{type="report"} 1
}

// A nil *Metrics counts nothing: code and tests pass nil freely.
func ExampleMetrics_nil() {
	var m *metrics.Metrics
	m.Enqueued("email", 1)
	m.ExternalOutcome("email", "succeeded")
	fmt.Println("counted nothing")
	// Output:
	// counted nothing
}

// Label values come from data; a name Prometheus would refuse is
// reported quoted.
func ExampleLabel() {
	fmt.Println(metrics.Label("email"))
	fmt.Println(metrics.Label("bad\xffname"))
	fmt.Println(metrics.Label("two\nlines"))
	// Output:
	// email
	// "bad\xffname"
	// "two\nlines"
}
