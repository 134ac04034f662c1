//go:build fdb

package fdb_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/apple/foundationdb/bindings/go/src/fdb"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them.
// The bindings' network thread runs from the first Open until
// fdb.StopNetwork, which no Store calls (the C library cannot start it
// again); once the tests are done nothing opens a Store any more, so
// TestMain stops it before goleak looks instead of ignoring it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(stopNetworkAfter{m})
}

type stopNetworkAfter struct{ m *testing.M }

func (s stopNetworkAfter) Run() int {
	code := s.m.Run()
	if err := fdb.StopNetwork(); err != nil && !errors.Is(err, fdb.ErrNetworkNotStarted) {
		fmt.Fprintln(os.Stderr, "stopping the FoundationDB network thread:", err)
		code = 1
	}
	return code
}
