package kv_test

import (
	"bytes"
	"os"
	"os/exec"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// leakChildEnv makes TestLeakedGoroutineFailsTests the child that leaks.
const leakChildEnv = "JOBSTAGE_KV_LEAK_CHILD"

// TestLeakedGoroutineFailsTests: a test that passes but leaves a goroutine
// running fails the test binary, naming the goroutine. The test runs this
// binary again, where it leaks one goroutine and passes.
func TestLeakedGoroutineFailsTests(t *testing.T) {
	if os.Getenv(leakChildEnv) != "" {
		never := make(chan struct{})
		go func() { <-never }()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeakedGoroutineFailsTests$", "-test.count=1")
	cmd.Env = append(os.Environ(), leakChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("a test binary whose test leaked a goroutine exited 0:\n%s", out)
	}
	for _, want := range []string{"goleak", "TestLeakedGoroutineFailsTests.func1"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Fatalf("the leaking test binary's output lacks %q (exit: %v):\n%s", want, err, out)
		}
	}
}
