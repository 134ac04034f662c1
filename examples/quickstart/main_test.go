package main

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the example in a directory of its own, so that its store
// starts empty, and fails on a goroutine that outlives it.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "jobstage-quickstart-")
	if err == nil {
		err = os.Chdir(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { os.RemoveAll(dir) }))
}

// The README's first example, as it is there.
func Example() {
	main()
	// Output:
	// rendering cat.jpg
	// succeeded
}
