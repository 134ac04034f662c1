package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobstage/jobstage/pipeline"
)

var (
	demandDesc = prometheus.NewDesc("jobstage_producer_demand",
		"Demand a pipeline's consumers hold and have not received jobs for.", []string{"pipeline", "type"}, nil)
	bufferedDesc = prometheus.NewDesc("jobstage_pipeline_buffered_jobs",
		"Jobs a pipeline accepted and has not committed yet: buffered or running.", []string{"pipeline", "type"}, nil)
)

type observedPipeline struct {
	typ string
	p   *pipeline.Pipeline
}

// pipelineCollector reads the demand and jobs in flight of the pipelines
// given to ObservePipeline.
type pipelineCollector struct {
	mu        sync.Mutex
	pipelines map[string]observedPipeline // REQUIRES: mu is held.
}

func newPipelineCollector() *pipelineCollector {
	return &pipelineCollector{pipelines: make(map[string]observedPipeline)}
}

// ObservePipeline reports a pipeline's demand (jobstage_producer_demand)
// and the jobs it holds (jobstage_pipeline_buffered_jobs) under its name
// and job type. Observing another pipeline under the same name replaces
// it; a nil p stops reporting the name.
func (m *Metrics) ObservePipeline(name, typ string, p *pipeline.Pipeline) {
	if m == nil {
		return
	}
	c := m.pipelines
	c.mu.Lock()
	defer c.mu.Unlock()
	if p == nil {
		delete(c.pipelines, name)
		return
	}
	c.pipelines[name] = observedPipeline{typ: typ, p: p}
}

func (c *pipelineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- demandDesc
	ch <- bufferedDesc
}

func (c *pipelineCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := newConstMetrics(ch)
	for name, o := range c.pipelines {
		out.send(demandDesc, prometheus.GaugeValue, float64(o.p.Demand()), name, o.typ)
		out.send(bufferedDesc, prometheus.GaugeValue, float64(o.p.InFlight()), name, o.typ)
	}
}
