package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// newFlags returns a flag set for a command whose errors come back to the
// caller instead of exiting.
func (c *cli) newFlags(name, args string) *flag.FlagSet {
	fs := flag.NewFlagSet("jobstage "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		printf(c.stderr, "usage: jobstage %s %s\n", name, args)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, allowing flags after positional arguments
// (`jobstage get email 42 --json`), and checks the count of positional
// arguments is within [min, max] (max < 0: no limit).
func parse(fs *flag.FlagSet, args []string, min, max int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelp
			}
			// The flag package has printed the error and the usage.
			return nil, errBadFlags
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		if args[0] == "--" {
			pos = append(pos, args[1:]...)
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) < min || (max >= 0 && len(pos) > max) {
		want := fmt.Sprintf("%d", min)
		switch {
		case max < 0:
			want = fmt.Sprintf("at least %d", min)
		case max != min:
			want = fmt.Sprintf("%d to %d", min, max)
		}
		if len(pos) == 0 {
			return nil, usagef("want %s argument(s), got none", want)
		}
		return nil, usagef("want %s argument(s), got %d: %s", want, len(pos), strings.Join(pos, " "))
	}
	return pos, nil
}
