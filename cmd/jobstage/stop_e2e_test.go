package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

// quickStop bounds a stop that must not wait for its drain or for
// clients: far less than the 30 s default drain, and still generous.
const quickStop = 15 * time.Second

// waitExit waits up to within for the server to exit and returns how
// long it took and its error (nil: status 0).
func (s *serverProc) waitExit(within time.Duration) (time.Duration, error) {
	s.t.Helper()
	start := time.Now()
	select {
	case err := <-s.done:
		return time.Since(start), err
	case <-time.After(within):
		s.t.Fatalf("jobstage serve did not exit within %s\n%s", within, s.logs)
		return 0, nil
	}
}

func (s *serverProc) waitLogged(msg string) {
	s.t.Helper()
	select {
	case <-s.loggedMsg(msg):
	case <-time.After(waitLimit):
		s.t.Fatalf("jobstage serve did not log %q\n%s", msg, s.logs)
	}
}

const stallConfig = `
store: {path: %s}
types: {echo: {}}
http:
  tokens:
    - {name: ops, role: admin, value_env: OPS_TOKEN}
`

// TestServeStopsDespiteStalledClients: clients that send part of a
// request and then nothing, with a token or without, hold neither the
// connection past the read timeout nor a SIGTERM: serve stops promptly
// and exits 0.
func TestServeStopsDespiteStalledClients(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jobstage.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, stallConfig, filepath.Join(dir, "data")), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cfg, "OPS_TOKEN=ops-secret")
	// The listener answers before Start has returned; a SIGTERM in
	// between ends the start, not a running server, and serve exits 1.
	s.waitLogged("started")
	addr := strings.TrimPrefix(s.url, "http://")
	for _, partial := range []string{
		"POST /v1/types/echo/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
		"POST /v1/types/echo/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
		"POST /v1/types/echo/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ops-secret\r\nContent-Length: 100\r\n\r\n{",
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, partial); err != nil {
			t.Fatal(err)
		}
	}
	// A request on a later connection is answered: the stalled ones were
	// accepted before it.
	if got := httpGet(t, s.url+"/healthz"); !strings.Contains(got, "ok") {
		t.Fatalf("healthz: %s", got)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	if took, err := s.waitExit(quickStop); err != nil {
		t.Fatalf("serve exited with %v after %s\n%s", err, took, s.logs)
	}
}

const drainConfig = `
store: {path: %s}
types: {sleepy: {}}
pipelines:
  sleepy:
    type: sleepy
    handler: {exec: {command: [sleep, "600"]}}
`

// startSleeper starts a server whose one job runs a command that sleeps,
// and returns once the job runs.
func startSleeper(t *testing.T, extra string) *serverProc {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jobstage.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, drainConfig+extra, filepath.Join(dir, "data")), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cfg)
	cl := httpapi.NewClient(s.url, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if _, err := cl.Enqueue(ctx, "sleepy", httpapi.NewJob{ID: "z"}); err != nil {
		t.Fatal(err)
	}
	if j, err := cl.Wait(ctx, "sleepy", "z", fdbq.Running, httpapi.MaxWait); err != nil || j.State != fdbq.Running {
		t.Fatalf("the job does not run: %v %+v", err, j)
	}
	return s
}

// TestDrainTimeoutConfigured: shutdown.drain_timeout bounds how long a
// stop waits for running handlers; then serve exits 0.
func TestDrainTimeoutConfigured(t *testing.T) {
	s := startSleeper(t, "shutdown: {drain_timeout: 1s}\n")
	s.cmd.Process.Signal(syscall.SIGTERM)
	if took, err := s.waitExit(quickStop); err != nil {
		t.Fatalf("serve exited with %v after %s\n%s", err, took, s.logs)
	}
}

// TestSecondSignalStopsAtOnce: a signal while serve drains stops it at
// once, with status 1 and a message saying so.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	s := startSleeper(t, "")
	s.cmd.Process.Signal(syscall.SIGTERM)
	s.waitLogged("stopping: draining pipelines")
	s.cmd.Process.Signal(syscall.SIGINT)
	took, err := s.waitExit(quickStop)
	if err == nil || s.cmd.ProcessState.ExitCode() != 1 || !strings.Contains(s.logs.String(), "stopped at once by a second signal") {
		t.Fatalf("serve exited with %v after %s\n%s", err, took, s.logs)
	}
}

// A client command against an address where nothing listens says which
// request got no answer and why, as text and as the API's error object,
// in the client's words (no Go package's name).
func TestClientNoServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	_, errOut, code := runIn(t, "get", "echo", "x", "--server", url)
	if code != 1 || !strings.HasPrefix(errOut, "jobstage get: GET /v1/types/echo/jobs/x: ") || !strings.Contains(errOut, "connection refused") {
		t.Errorf("get: exit %d: %s", code, errOut)
	}
	_, errOut, code = runIn(t, "get", "echo", "x", "--server", url, "--json")
	var je struct{ Error, Message string }
	if err := json.Unmarshal([]byte(errOut), &je); err != nil || code != 1 || je.Error != "client" ||
		!strings.HasPrefix(je.Message, "GET /v1/types/echo/jobs/x: ") || !strings.Contains(je.Message, "connection refused") {
		t.Errorf("get --json: exit %d: %v: %s", code, err, errOut)
	}
}

// TestClientRequestTimeout: a client command gives up on a server that
// accepts the connection and never answers, after --request-timeout (on
// top of the wait for a long poll), and says which flag to change.
func TestClientRequestTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	url := "http://" + ln.Addr().String()
	for _, args := range [][]string{
		{"get", "echo", "x", "--server", url, "--request-timeout", "300ms"},
		{"types", "--server", url, "--request-timeout", "300ms", "--json"},
		{"wait", "echo", "x", "--timeout", "300ms", "--server", url, "--request-timeout", "300ms"},
		{"enqueue", "echo", "1", "--wait", "1s", "--server", url, "--request-timeout", "300ms"},
	} {
		_, errOut, code := jobstage(t, "", args...)
		if code != 1 || !strings.Contains(errOut, "--request-timeout") {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
	// With --json the failure is the API's error object, the flag named
	// in its message.
	_, errOut, _ := runIn(t, "types", "--server", url, "--request-timeout", "300ms", "--json")
	var je struct{ Error, Message string }
	if err := json.Unmarshal([]byte(errOut), &je); err != nil || je.Error != "client" ||
		!strings.HasPrefix(je.Message, "the server did not answer within --request-timeout (300ms") || !strings.Contains(je.Message, "GET /v1/types: ") {
		t.Errorf("types --json against a silent server: %v: %s", err, errOut)
	}
	if _, errOut, code := jobstage(t, "", "wait", "echo", "x", "--timeout", "-1s", "--server", url); code != 2 || !strings.Contains(errOut, "--timeout -1s is negative") {
		t.Errorf("wait --timeout -1s: exit %d: %s", code, errOut)
	}
	for _, bad := range []string{"0s", "-1s", "soon"} {
		_, errOut, code := jobstage(t, "", "get", "echo", "x", "--server", url, "--request-timeout", bad)
		if code != 2 || !strings.Contains(errOut, "request-timeout") {
			t.Errorf("--request-timeout %s: exit %d: %s", bad, code, errOut)
		}
	}
}
