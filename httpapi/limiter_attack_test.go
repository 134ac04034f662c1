package httpapi

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"
)

// Once the limiter remembers maxGuessClients addresses, each failure
// from a new address deletes one remembered address at random, even one
// locked out right now: an attacker that fails once from each of enough
// other addresses (IPv6 gives them away) frees its locked-out address
// before the minute is over. (And every such failure scans the whole map
// under the lock that every authentication takes.)
func TestAttackLimiterEvictsLockedOutAddress(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	g := &guessLimiter{now: func() time.Time { return now }}
	r := httptest.NewRequest("GET", "http://x/", nil)
	r.RemoteAddr = "192.0.2.1:1"
	for range MaxAuthFailures {
		g.failed(r)
	}
	if g.check(r) == nil {
		t.Fatal("not locked out")
	}
	now = now.Add(time.Second)
	o := httptest.NewRequest("GET", "http://x/", nil)
	start := time.Now()
	const n = 4 * maxGuessClients // 30000 evictions: the address survives with probability e^-3
	for i := range n {
		o.RemoteAddr = fmt.Sprintf("[2001:db8::%x:%x]:1", i>>16, i&0xffff)
		g.failed(o)
	}
	per := time.Since(start) / n
	if g.check(r) == nil {
		t.Fatalf("the locked-out address is served again %v later, after %d failures from other addresses (%v each)", time.Second, n, per)
	}
}
