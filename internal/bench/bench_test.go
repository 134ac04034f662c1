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
	if r.CommittedP99Ms <= 0 || r.CommittedP50Ms > r.CommittedP99Ms || r.CommittedP50Ms > r.LatencyP50Ms || r.CommittedP99Ms > r.LatencyMaxMs {
		t.Errorf("latency from the add's commit not measured, or above the latency from its call: %+v", r)
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

// The fairness runs measure what they say: jobs of a new key start while
// a backlog of another key is worked, three keys of weights 1:2:1 share
// the jobs worked in those proportions, and a mixed run works every job
// of every type.
func TestRunFairnessAndMixed(t *testing.T) {
	r, err := Run(context.Background(), Options{
		Dir: filepath.Join(t.TempDir(), "store"), Jobs: 400, Types: 4, Backlog: 20_000, FairSamples: 5, Shares: 3000, Concurrency: 16,
	})
	if err != nil {
		t.Fatal(err)
	}
	f := r.Fairness
	if f.Samples != 5 || f.NewP50Ms <= 0 || f.NewP50Ms > f.NewP99Ms || f.NewP99Ms > f.NewMaxMs || f.BacklogRate <= 0 {
		t.Errorf("new key not measured: %+v", f)
	}
	if f.NewCommittedP50Ms <= 0 || f.NewCommittedP50Ms > f.NewP50Ms || f.NewCommittedP99Ms > f.NewP99Ms || f.NewCommittedP50Ms > f.NewCommittedP99Ms {
		t.Errorf("new key from the add's commit not measured, or beyond the figures from its call: %+v", f)
	}
	for k, want := range map[string]float64{"a": 0.25, "b": 0.5, "c": 0.25} {
		if got := f.Shares[k]; got < want-0.1 || got > want+0.1 {
			t.Errorf("shares %v, want about 1:2:1", f.Shares)
		}
	}
	if r.MixedTypes != 4 || r.MixedJobs != 400 || r.MixedJobsPerSec <= 0 || r.Jobs != 0 {
		t.Errorf("mixed run not measured: %+v", r)
	}
	var out bytes.Buffer
	r.Print(&out)
	for _, want := range []string{"mixed", "new key", "weights"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
