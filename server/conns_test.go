package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/jobstage/jobstage/server"
)

const connsConfig = `
store: {path: %s}
types: {echo: {}}
http:
  listen: 127.0.0.1:0
  tokens:
    - {name: ops, role: admin, value_env: OPS_TOKEN}
  read_header_timeout: %s
  read_timeout: %s
  max_connections: %d
`

func startConns(t *testing.T, header, read string, maxConns int) string {
	t.Helper()
	cfg := parse(t, fmt.Sprintf(connsConfig, filepath.Join(t.TempDir(), "data"), header, read, maxConns),
		map[string]string{"OPS_TOKEN": "ops-secret"})
	return start(t, cfg).Addr()
}

// stall opens a connection that sends part of a request and then nothing.
func stall(t *testing.T, addr, partial string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, partial); err != nil {
		t.Fatal(err)
	}
	return c
}

// stalls are requests that stop short: in the headers, and before an
// announced body, with no token, with a bad one and with a good one.
var stalls = []string{
	"POST /v1/types/echo/jobs HTTP/1.1\r\nHost: x\r\nContent-Le",
	"POST /v1/types/echo/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
	"POST /v1/types/echo/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\nContent-Length: 100\r\n\r\n",
	"POST /v1/types/echo/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ops-secret\r\nContent-Length: 100\r\n\r\n{\"id\"",
	"PUT /v1/types/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ops-secret\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"pau",
}

// closedByServer waits, up to waitLimit, for the server to close c; it
// may answer first (a refusal, or 408 for a request read too slowly).
func closedByServer(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(waitLimit))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the server kept the connection open for %s", what, waitLimit)
	}
}

// TestStalledClientsAreDisconnected: clients that stop in the middle of a
// request, authenticated or not, are disconnected by the read timeouts.
func TestStalledClientsAreDisconnected(t *testing.T) {
	addr := startConns(t, "200ms", "400ms", 100)
	var conns []net.Conn
	for i := range 50 {
		conns = append(conns, stall(t, addr, stalls[i%len(stalls)]))
	}
	for i, c := range conns {
		closedByServer(t, c, fmt.Sprintf("stall %q", stalls[i%len(stalls)]))
	}
}

// TestStopClosesStalledConnections: a stopping server closes the
// connections still open after its grace period, so that stalled clients
// cannot hold the stop, and the stop succeeds.
func TestStopClosesStalledConnections(t *testing.T) {
	cfg := parse(t, fmt.Sprintf(connsConfig, filepath.Join(t.TempDir(), "data"), "1m", "1m", 100),
		map[string]string{"OPS_TOKEN": "ops-secret"})
	s, err := server.New(cfg, server.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for _, p := range stalls {
		conns = append(conns, stall(t, s.Addr(), p))
	}
	start := time.Now()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("stop after %s: %v", time.Since(start), err)
	}
	for i, c := range conns {
		closedByServer(t, c, fmt.Sprintf("stall %q", stalls[i]))
	}
}

// TestMaxConnections: past http.max_connections a new connection is not
// served until one closes.
func TestMaxConnections(t *testing.T) {
	addr := startConns(t, "1m", "1m", 2)
	get := "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
	var held []net.Conn
	for range 2 {
		c := stall(t, addr, get)
		c.SetReadDeadline(time.Now().Add(waitLimit))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		held = append(held, c)
	}
	third := stall(t, addr, get)
	br := bufio.NewReader(third)
	// Nothing announces that a connection waits to be accepted: a short
	// wait is the only check that the third is not served meanwhile.
	third.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := br.Peek(1); err == nil {
		t.Fatal("a third connection was served with max_connections 2")
	}
	held[0].Close()
	third.SetReadDeadline(time.Now().Add(waitLimit))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("after a connection closed: %v", err)
	}
	resp.Body.Close()
}
