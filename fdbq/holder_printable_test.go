package fdbq_test

import (
	"testing"

	"github.com/jobstage/jobstage/fdbq"
)

// A holder is printable: line and paragraph separators (which break a
// log line or a terminal's row), non-ASCII spaces, private-use and
// unassigned code points and noncharacters are refused.
func TestHolderPrintable(t *testing.T) {
	for _, h := range []string{"w\u2028x", "w\u2029x", "w\u00a0x", "w\ue000x", "w\U000effffx", "w\ufffex"} {
		if err := fdbq.ValidateHolder(h); err == nil {
			t.Errorf("ValidateHolder(%+q) accepts a holder that is not printable", h)
		}
	}
}
