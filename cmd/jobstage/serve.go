package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jobstage/jobstage/config"
	"github.com/jobstage/jobstage/server"
)

// stopTimeout bounds a server's stop: the pipelines' drain (30 s by
// default) and closing the store.
const stopTimeout = 60 * time.Second

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
				fmt.Fprintln(c.stderr, p.String())
			}
			fmt.Fprintf(c.stderr, "jobstage serve: %s: %d problem(s); nothing started (check with: jobstage config lint %s)\n",
				*path, len(ce.Problems), *path)
			return errReported
		}
		return err
	}
	log := server.NewLogger(cfg.Logging, c.stderr)
	srv, err := server.New(cfg, server.Options{Logger: log})
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
	log.Info("stopping: draining pipelines")
	stopCtx, cancelStop := context.WithTimeout(context.Background(), stopTimeout)
	defer cancelStop()
	if err := srv.Stop(stopCtx); err != nil {
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
