package httpapi

import (
	"fmt"
	"net"
	"net/netip"
)

// CheckListen refuses to serve the API on a non-loopback address without
// tokens: every route would be open to whoever can reach the port. addr is
// a listen address as net.Listen takes it ("127.0.0.1:8080", "[::1]:8080",
// "localhost:8080"); tokens is how many tokens are configured. An empty
// host (":8080") binds every interface and is refused without tokens.
func CheckListen(addr string, tokens int) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("httpapi: listen address %q: %w", addr, err)
	}
	if tokens > 0 || isLoopbackHost(host) {
		return nil
	}
	where := host
	if where == "" {
		where = "every interface"
	}
	return fmt.Errorf("httpapi: refusing to listen on %q (%s) without tokens: anyone who can reach it could enqueue, cancel and work jobs; "+
		"configure tokens, or listen on a loopback address such as 127.0.0.1:8080", addr, where)
}

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
