package httpapi

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"
)

// A full limiter (maxGuessClients addresses) makes room by dropping the
// windows that are over and those of addresses not refused now, never
// one refused now: failing once from each of many other addresses (IPv6
// /64s) does not free a locked-out address before its minute is over.
func TestLimiterKeepsLockedOutAddress(t *testing.T) {
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
	const n = 3 * maxGuessClients
	for i := range n {
		o.RemoteAddr = fmt.Sprintf("[2001:db8:%x:%x::1]:1", i>>16, i&0xffff)
		g.failed(o)
	}
	per := time.Since(start) / n
	if g.check(r) == nil {
		t.Fatalf("the locked-out address is served again %v later, after %d failures from other addresses (%v each)", time.Second, n, per)
	}
}
