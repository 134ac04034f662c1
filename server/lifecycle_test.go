package server_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/jobstage/jobstage/internal/lifecycletest"
	"github.com/jobstage/jobstage/server"
)

const lifecycleConfig = `
store: {path: %s}
types:
  echo: {}
pipelines:
  echo:
    type: echo
    handler: {exec: {command: ["cat"]}}
http:
  listen: 127.0.0.1:0
`

// The server follows the lifecycle of every long-running part; one
// stopped before it started closes its store, which another server may
// then open.
func TestServerLifecycle(t *testing.T) {
	lifecycletest.Run(t, "server.Server", func(t *testing.T) lifecycletest.Part {
		cfg := parse(t, fmt.Sprintf(lifecycleConfig, filepath.Join(t.TempDir(), "data")), nil)
		s, err := server.New(cfg, server.Options{Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// A server stopped before it started releases its store: another server
// opens the same data directory.
func TestServerStopBeforeStartClosesStore(t *testing.T) {
	cfg := parse(t, fmt.Sprintf(lifecycleConfig, filepath.Join(t.TempDir(), "data")), nil)
	s, err := server.New(cfg, server.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	s2, err := server.New(cfg, server.Options{Logger: quiet()})
	if err != nil {
		t.Fatalf("a second server on the data directory: %v", err)
	}
	if err := s2.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
