package kvtest_test

import (
	"testing"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/kvtest"
)

// lifetime is short so that the too-old tests wait about a second, and long
// enough for the large range reads under the race detector on a loaded
// machine.
const lifetime = time.Second

var features = kvtest.Features{TransactionLifetime: lifetime}

// open returns a DB over a fresh embedded store, closed when t ends.
func open(t *testing.T, inMemory bool) *kv.DB {
	t.Helper()
	dir := ""
	if !inMemory {
		dir = t.TempDir()
	}
	s, err := embedded.Open(dir, embedded.Options{InMemory: inMemory, TransactionLifetime: lifetime})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return kv.NewDB(s, kv.Options{})
}

func TestEmbeddedInMemory(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) *kv.DB { return open(t, true) }, features)
}

func TestEmbeddedOnDisk(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) *kv.DB { return open(t, false) }, features)
}

func TestEmbeddedFaulty(t *testing.T) {
	kvtest.RunFaulty(t, func(t *testing.T) *kv.DB { return open(t, true) }, features)
}

func TestEmbeddedFaultyOnDisk(t *testing.T) {
	kvtest.RunFaulty(t, func(t *testing.T) *kv.DB { return open(t, false) }, features)
}
