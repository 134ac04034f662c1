package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRunMeasuresEveryPhase(t *testing.T) {
	var progress bytes.Buffer
	r, err := Run(context.Background(), Options{
		Dir: filepath.Join(t.TempDir(), "store"), Jobs: 500, Duration: 300 * time.Millisecond,
		Latency: 5, Concurrency: 16, InsertBatch: 50, Progress: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Jobs != 500 || r.InsertJobsPerSec <= 0 || r.WorkJobsPerSec <= 0 || r.WorkTxPerJob <= 0 {
		t.Errorf("burn-down not measured: %+v", r)
	}
	if r.ContinuousSeconds <= 0 || r.ContinuousWorked <= 0 {
		t.Errorf("continuous run not measured: %+v", r)
	}
	if r.LatencySamples != 5 || r.LatencyP50Ms <= 0 || r.LatencyP50Ms > r.LatencyP99Ms || r.LatencyP99Ms > r.LatencyMaxMs {
		t.Errorf("latency not measured: %+v", r)
	}
	var out bytes.Buffer
	r.Print(&out)
	for _, want := range []string{"burn-down", "continuous", "latency"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(progress.String(), "burn-down: 500 jobs worked") {
		t.Errorf("progress lacks the burn-down line:\n%s", progress.String())
	}
}

func TestRunRefusesNonEmptyDirAndNothingToDo(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), Options{Dir: dir, Jobs: 10}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("non-empty dir: got %v", err)
	}
	if _, err := Run(context.Background(), Options{}); err == nil || !strings.Contains(err.Error(), "nothing to measure") {
		t.Errorf("no phases: got %v", err)
	}
	if _, err := Run(context.Background(), Options{Jobs: -1}); err == nil {
		t.Error("negative jobs accepted")
	}
}
