package httpapi

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
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

// LimitListener returns a listener that has at most n of the connections
// it accepted open at once: past n, Accept waits for one of them to close,
// and clients wait in the kernel's backlog rather than each taking a
// connection of the server. n < 1 means no limit (l itself). Closing the
// listener ends a waiting Accept.
func LimitListener(l net.Listener, n int) net.Listener {
	if n < 1 {
		return l
	}
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// limitConn gives its slot back when it is closed, once however often it
// is closed.
type limitConn struct {
	net.Conn
	release   func()
	closeOnce sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(c.release)
	return err
}
