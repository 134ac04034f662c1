package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun: over three seconds the one-second schedule ticks at least
// twice, and a second run on the same store goes on from the first.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	n, err := run(dir, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Fatalf("%d reports worked in 3s", n)
	}
	m, err := run(dir, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if m < 1 {
		t.Fatalf("%d reports worked on the second run", m)
	}
}
