// Package dashboards holds jobstage's Grafana dashboard and the files that
// provision it, embedded so that a program can write them out
// (os.CopyFS(dir, dashboards.Files)) for Grafana to read, or serve them.
//
// jobstage.json (uid "jobstage-overview") shows every metric of package
// metrics: throughput by outcome, enqueued and accepted jobs, run duration
// and queue wait percentiles, pending jobs and the oldest pending job's age,
// running jobs against pipeline demand, retries and jobs recycled by the
// activity monitor, store transactions, conflicts and retries by error
// code, HTTP requests and latency, and the processes' memory and CPU. A
// "type" variable selects job types and a "job" variable Prometheus scrape
// jobs.
//
// The data source is the DS_PROMETHEUS input, for Grafana's dashboard import,
// and also a data source variable of that name, so that the same file works
// when provisioned (provisioning does not fill in inputs):
// provisioning/dashboards.yaml is a dashboard provider for it and
// provisioning/datasources.yaml an example Prometheus data source.
//
// The Example lists the dashboard's rows and panels; ExampleFiles writes
// the files to a directory.
//
// The package's test runs jobstage's metrics and a real Prometheus, and
// evaluates every panel's query.
package dashboards

import "embed"

// Files holds jobstage.json and provisioning/*.yaml.
//
//go:embed jobstage.json provisioning/*.yaml
var Files embed.FS
