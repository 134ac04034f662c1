package jobstage

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// Schedule is a periodic job of kind T: Args enqueued at each tick of
// Cron (read on the wall clock of Timezone) or of Every. Exactly one of
// Cron and Every is set. See fdbq.Schedule for the ticks, their job ids
// and clock changes.
type Schedule[T Args] struct {
	// Name names the schedule (the rules of type names, at most
	// fdbq.MaxScheduleNameSize bytes); its jobs' ids are NAME@TIME.
	Name     string
	Cron     string
	Timezone string
	Every    time.Duration
	Args     T
	// Options apply to each tick's job; its ID and At must be empty.
	Options *EnqueueOptions
	// Missed is the policy for ticks missed while no scheduler ran;
	// MissedLimit bounds fdbq.MissedEach; Grace is how late a tick may be
	// and still count as on time (fdbq.Schedule).
	Missed      fdbq.Missed
	MissedLimit int
	Grace       time.Duration
}

// Periodic registers schedule s with c: Start declares it in the store
// (a schedule that exists keeps its pause and its place) and the client
// runs the scheduler, unless Config.NoScheduler. Every client and server
// over one store runs the ticks of every schedule stored; each tick adds
// one job however many run. Periodic must be called before Start.
func Periodic[T Args](c *Client, s Schedule[T]) error {
	kind, d, err := kindOf[T]()
	if err != nil {
		return err
	}
	o := s.Options
	if o == nil {
		o = &EnqueueOptions{}
	}
	if o.ID != "" || !o.At.IsZero() {
		return fmt.Errorf("jobstage: schedule %s: Options.ID and Options.At are given by each tick", s.Name)
	}
	data, err := json.Marshal(s.Args)
	if err != nil {
		return fmt.Errorf("jobstage: schedule %s: encode the args: %w", s.Name, err)
	}
	j := fdbq.NewJob{Type: kind, Data: data, Priority: d.Priority, Key: o.Key, MaxAttempts: o.MaxAttempts, Unique: d.Unique}
	if o.Unique != nil {
		j.Unique = o.Unique
	}
	if o.Priority != 0 {
		j.Priority = o.Priority
	}
	fs := fdbq.Schedule{Name: s.Name, Cron: s.Cron, Timezone: s.Timezone, Every: s.Every, Job: j,
		Missed: s.Missed, MissedLimit: s.MissedLimit, Grace: s.Grace}
	if err := fdbq.ValidateSchedule(fs); err != nil {
		return fmt.Errorf("jobstage: %w", err)
	}
	if _, err := d.settings(); err != nil {
		return fmt.Errorf("jobstage: the Defaults of kind %s: %w", kind, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != 0 {
		return errors.New("jobstage: Periodic after Start")
	}
	for _, o := range c.schedules {
		if o.s.Name == s.Name {
			return fmt.Errorf("jobstage: schedule %s registered twice", s.Name)
		}
	}
	c.schedules = append(c.schedules, clientSchedule{s: fs, kind: kind, defaults: d})
	return nil
}

// clientSchedule is a schedule registered with Periodic, and the kind it
// adds, declared at Start if no pipeline of the client declares it.
type clientSchedule struct {
	s        fdbq.Schedule
	kind     string
	defaults Defaults
}
