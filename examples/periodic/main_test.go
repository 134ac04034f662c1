package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun: over three seconds the one-second schedule ticks at least
// twice, each tick starts a workflow, and the last one is published
// before the run ends; a second run on the same store goes on from the
// first.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	s, err := run(dir, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if s.ticks < 2 || s.published < 1 || s.last == "" {
		t.Fatalf("first run: %+v", s)
	}
	s2, err := run(dir, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if s2.ticks < 1 || s2.published < 1 {
		t.Fatalf("second run: %+v", s2)
	}
}
