package main

import "testing"

func TestGCPercent(t *testing.T) {
	if got := gcPercent("", 100); got != defaultGCPercent {
		t.Errorf("GOGC unset: %d, want %d", got, defaultGCPercent)
	}
	if got := gcPercent("50", 50); got != 50 {
		t.Errorf("GOGC=50: %d, want the runtime's 50", got)
	}
	if got := gcPercent("off", -1); got != -1 {
		t.Errorf("GOGC=off: %d, want -1", got)
	}
}
