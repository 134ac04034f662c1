package dashboards_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"slices"

	"github.com/jobstage/jobstage/dashboards"
)

// The dashboard is a Grafana JSON model: its rows group the panels, each
// of which queries metrics of package metrics.
func Example() {
	b, err := fs.ReadFile(dashboards.Files, "jobstage.json")
	if err != nil {
		log.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			Type  string `json:"type"`
			Title string `json:"title"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (uid %s)\n", d.Title, d.UID)
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	slices.Sort(vars)
	fmt.Println("variables:", vars)
	var rows, panels []string
	for _, p := range d.Panels {
		if p.Type == "row" {
			rows = append(rows, p.Title)
		} else {
			panels = append(panels, p.Title)
		}
	}
	fmt.Println("rows:", rows)
	slices.Sort(panels)
	for _, p := range panels {
		fmt.Println("panel:", p)
	}
	// Output:
	// jobstage (uid jobstage-overview)
	// variables: [DS_PROMETHEUS job type]
	// rows: [Jobs Queue Store HTTP API Process]
	// panel: CPU and goroutines
	// panel: Enqueued and accepted
	// panel: HTTP latency
	// panel: HTTP requests
	// panel: Memory and goroutines
	// panel: Oldest pending age
	// panel: Pending jobs
	// panel: Queue wait percentiles
	// panel: Retries and recycled jobs
	// panel: Run duration percentiles
	// panel: Running vs demand
	// panel: Store retries by error code
	// panel: Store transactions
	// panel: Throughput by outcome
}

// Files written to a directory give Grafana's provisioning the dashboard,
// a dashboard provider and an example data source.
func ExampleFiles() {
	dir, err := os.MkdirTemp("", "jobstage-dashboards")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.CopyFS(dir, dashboards.Files); err != nil {
		log.Fatal(err)
	}
	err = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			fmt.Println(filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// jobstage.json
	// provisioning/dashboards.yaml
	// provisioning/datasources.yaml
}
