package main

import (
	"io"

	"github.com/jobstage/jobstage/config"
)

func (c *cli) config(args []string) error {
	if len(args) == 0 {
		return usagef("want a subcommand: lint FILE or docs")
	}
	switch args[0] {
	case "lint":
		fs := c.newFlags("config lint", "FILE")
		pos, err := parse(fs, args[1:], 1, 1)
		if err != nil {
			return err
		}
		problems := config.Lint(pos[0])
		for _, p := range problems {
			printf(c.stderr, "%s\n", p.String())
		}
		if len(problems) > 0 {
			printf(c.stderr, "%s: %d problem(s)\n", pos[0], len(problems))
			return errReported
		}
		printf(c.stdout, "%s: ok\n", pos[0])
		return nil
	case "docs":
		fs := c.newFlags("config docs", "")
		if _, err := parse(fs, args[1:], 0, 0); err != nil {
			return err
		}
		io.WriteString(c.stdout, config.Docs()) // the schema's text, written as it is
		return nil
	}
	return usagef("unknown config subcommand %q: want lint or docs", args[0])
}
