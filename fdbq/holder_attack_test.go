package fdbq_test

import (
	"testing"

	"github.com/jobstage/jobstage/fdbq"
)

// AcceptOptions.Holder is documented as "printable UTF-8", but
// ValidateHolder refuses only control (Cc) and format (Cf) characters:
// line and paragraph separators (Zl, Zp, which break a log line or a
// terminal's row), no-break and other non-ASCII spaces, private-use,
// unassigned code points and noncharacters pass.
func TestAttackHolderNotPrintable(t *testing.T) {
	for _, h := range []string{"w\u2028x", "w\u2029x", "w\u00a0x", "w\ue000x", "w\U000effffx", "w\ufffex"} {
		if err := fdbq.ValidateHolder(h); err == nil {
			t.Errorf("ValidateHolder(%+q) accepts a holder that is not printable", h)
		}
	}
}
