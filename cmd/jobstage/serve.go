package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/jobstage/jobstage/config"
	"github.com/jobstage/jobstage/internal/server"
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
	log := newLogger(cfg.Logging, c.stderr)
	srv, err := server.New(cfg, log)
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

func newLogger(lc config.Logging, w io.Writer) *slog.Logger {
	var level slog.Level
	switch lc.Level {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	o := &slog.HandlerOptions{Level: level}
	if lc.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
