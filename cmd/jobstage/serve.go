package main

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/jobstage/jobstage/config"
	"github.com/jobstage/jobstage/server"
)

// stopMargin is what a server's stop may take beyond the pipelines'
// drain (shutdown.drain_timeout): stopping the HTTP API, handing jobs
// back, and closing the store.
const stopMargin = 30 * time.Second

// forcedStopWait is how long a stop that a second signal cut short may
// still take to close the store before serve returns without it.
const forcedStopWait = 2 * time.Second

// errForced is the failure of a serve that a second signal stopped at
// once.
var errForced = errors.New("stopped at once by a second signal: running handlers were interrupted and their jobs will run again")

func (c *cli) serve(args []string) error {
	fs := c.newFlags("serve", "--config FILE")
	path := fs.String("config", envOr("JOBSTAGE_CONFIG", "jobstage.yaml"), "config file (default $JOBSTAGE_CONFIG, else jobstage.yaml)")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	cfg, err := config.Load(*path)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			for _, p := range ce.Problems {
				printf(c.stderr, "%s\n", p.String())
			}
			printf(c.stderr, "jobstage serve: %s: %d problem(s); nothing started (check with: jobstage config lint %s)\n",
				*path, len(ce.Problems), *path)
			return errReported
		}
		return err
	}
	log := server.NewLogger(cfg.Logging, c.stderr)
	// Without a tracing section nothing is sent, but each job still has a
	// trace id to find it by (the UI, jobstage get, an exec command's
	// TRACEPARENT).
	srv, err := server.New(cfg, server.Options{Logger: log, TracerProvider: server.IDTracerProvider()})
	if err != nil {
		return err
	}
	startCtx, cancel := context.WithTimeout(c.ctx, time.Minute)
	defer cancel()
	if err := srv.Start(startCtx); err != nil {
		return err
	}
	log.Info("started", "config", *path, "version", versionInfo().Version)
	<-c.ctx.Done()
	log.Info("stopping: draining pipelines", "drain_timeout", cfg.Shutdown.DrainTimeout)
	// A second signal ends stopCtx: every step of the stop is cut short.
	stopCtx, cancelStop := context.WithTimeout(c.force, cfg.Shutdown.DrainTimeout+stopMargin)
	defer cancelStop()
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Stop(stopCtx) }()
	select {
	case err = <-stopped:
	case <-c.force.Done():
		log.Warn("second signal: stopping at once")
		select {
		case err = <-stopped:
		case <-time.After(forcedStopWait):
		}
	}
	if c.force.Err() != nil {
		return errForced
	}
	if err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
