package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/bench"
	"github.com/jobstage/jobstage/producer"
)

func (c *cli) bench(args []string) (err error) {
	fs := c.newFlags("bench", "[flags]")
	var o bench.Options
	fs.IntVar(&o.Jobs, "jobs", 100_000, "jobs the burn-down inserts, then works off (0: no burn-down)")
	fs.DurationVar(&o.Duration, "duration", 0, "also work jobs for this long while inserting them (continuous mode; 0: off)")
	fs.IntVar(&o.Concurrency, "concurrency", 256, "handlers running at once")
	fs.IntVar(&o.InsertBatch, "insert-batch", 0, "jobs per insert transaction (default 1000 for the burn-down, 100 continuous)")
	fs.IntVar(&o.Latency, "latency", 200, "enqueue→start samples on an idle pipeline (0: none)")
	fs.BoolVar(&o.PerJobFinish, "per-job-finish", false, "commit each job's outcome in its own transaction instead of batching outcomes")
	fs.IntVar(&o.Types, "types", 0, "spread the burn-down's jobs over this many types, a pipeline each (mixed run; 0 or 1: one type)")
	fs.IntVar(&o.Backlog, "backlog", 0, "fairness: a backlog of this many jobs of one key while jobs of a new key are timed (0: off)")
	fs.IntVar(&o.FairSamples, "fair-samples", 200, "fairness: jobs of the new key timed from enqueue to start")
	fs.IntVar(&o.Shares, "shares", 0, "fairness: three keys weighted 1:2:1 with this many jobs each, this many worked (0: off)")
	fs.IntVar(&o.Zones, "zones", 0, "zones of each type the run declares (0: the default)")
	fs.IntVar(&o.Express, "express", 0, "jobs a pipeline accepts at once for keys newly ready behind a backlog, beyond its demand if need be (0: the default; -1: none)")
	fs.IntVar(&o.Acceptors, "acceptors", 0, fmt.Sprintf("accepts each pipeline keeps in flight, at most %d (0: the default, %d)", producer.MaxAcceptors, producer.DefaultAcceptors))
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	memprofile := fs.String("memprofile", "", "write a profile of the run's allocations to this file")
	fs.StringVar(&o.Dir, "dir", "", "store directory, empty or new (default: a temporary directory, removed after)")
	asJSON := fs.Bool("json", false, "print the result as JSON (progress goes to stderr)")
	quiet := fs.Bool("quiet", false, "no progress lines")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	if o.Jobs < 0 || o.Latency < 0 || o.Duration < 0 || o.Concurrency < 1 || o.InsertBatch < 0 ||
		o.Types < 0 || o.Zones < 0 || o.Zones > fdbq.MaxZones || o.Backlog < 0 || o.FairSamples < 1 || o.Shares < 0 || o.Acceptors < 0 || o.Acceptors > producer.MaxAcceptors {
		return usagef("jobs, duration, latency, insert-batch, types, backlog and shares must be ≥ 0, concurrency and fair-samples ≥ 1, zones from 0 to %d, acceptors from 0 to %d", fdbq.MaxZones, producer.MaxAcceptors)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			if cerr := f.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("write the CPU profile: %w", cerr)
			}
		}()
	}
	if *memprofile != "" {
		f, err := os.Create(*memprofile)
		if err != nil {
			return err
		}
		defer func() {
			werr := pprof.Lookup("allocs").WriteTo(f, 0)
			if cerr := f.Close(); werr == nil {
				werr = cerr
			}
			if werr != nil && err == nil {
				err = fmt.Errorf("write the allocation profile: %w", werr)
			}
		}()
	}
	if !*quiet {
		o.Progress = c.stderr
	}
	r, err := bench.Run(c.ctx, o)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	r.Print(c.stdout)
	return nil
}
