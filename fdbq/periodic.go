package fdbq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// ErrInvalidSchedule: a schedule's definition is wrong (the detail says
// what).
var ErrInvalidSchedule = errors.New("fdbq: invalid schedule")

// ErrUnknownSchedule: no schedule of that name is declared.
var ErrUnknownSchedule = errors.New("fdbq: unknown schedule")

// Missed is what a schedule does with the ticks it missed: ticks whose
// time passed more than the schedule's Grace before a scheduler could
// handle them (every scheduler was down, or the schedule's type could not
// take jobs).
type Missed int

const (
	// MissedOnce (the default) enqueues one job for the latest missed
	// tick and skips the others.
	MissedOnce Missed = iota
	// MissedSkip enqueues no job for a missed tick.
	MissedSkip
	// MissedEach enqueues a job for each missed tick, the latest
	// Schedule.MissedLimit of them; earlier ones are skipped.
	MissedEach
)

var missedNames = []string{"once", "skip", "each"}

func (m Missed) String() string { return enumName(missedNames, m, "Missed") }

// ParseMissed reads "once", "skip" or "each" ("" is once).
func ParseMissed(s string) (Missed, error) {
	return parseEnum[Missed](missedNames, s, ErrInvalidSchedule, "missed-tick policy")
}

// Limits and defaults of schedules.
const (
	// MaxScheduleNameSize bounds schedule names, which follow the rules of
	// type names (ValidateScheduleName).
	MaxScheduleNameSize = 100
	// DefaultGrace is a schedule's Grace when it gives none.
	DefaultGrace = time.Minute
	// MaxGrace bounds Grace.
	MaxGrace = 24 * time.Hour
	// DefaultMissedLimit is MissedEach's bound when MissedLimit is 0.
	DefaultMissedLimit = 100
	// MaxMissedLimit bounds MissedLimit.
	MaxMissedLimit = 10_000
	// maxTickJobs bounds the jobs one tick transaction adds; a scheduler
	// that has more to add runs the next transaction at once.
	maxTickJobs = 100
	// maxTickBytes bounds the data one tick transaction adds, well under
	// FoundationDB's 10 MB a transaction.
	maxTickBytes = 4 << 20
	// maxTickScan bounds how many ticks one tick transaction enumerates
	// to count the ticks a long outage skipped; past it the count is a
	// lower bound (ScheduleInfo.Skipped).
	maxTickScan = 100_000
)

// Schedule is a periodic job: when it ticks, the job each tick enqueues,
// and what is done with ticks missed while no scheduler could run it.
//
// A tick's job has the id NAME@TIME (TIME the tick's instant in UTC,
// RFC 3339 with milliseconds: nightly@2026-03-08T07:00:00.000Z) and its
// ScheduledAt is the tick's instant. It is added in the transaction that
// records the tick as done in the schedule's state, so however many
// schedulers run, each tick has one job.
type Schedule struct {
	// Name is the schedule's name: ASCII letters, digits, '_', '-' and
	// '.', starting with a letter or a digit, at most
	// MaxScheduleNameSize bytes.
	Name string
	// Cron is a cron expression: five fields (minute hour day-of-month
	// month day-of-week), six with seconds first, or one of @yearly,
	// @monthly, @weekly, @daily, @hourly. It is read on the wall clock of
	// Timezone (see Periodic jobs in the package doc for clock changes).
	Cron string
	// Timezone is an IANA zone name for Cron ("Europe/Paris"); default
	// UTC.
	Timezone string
	// Every is a fixed interval instead of Cron: ticks fall at the
	// multiples of Every since the Unix epoch, at least 1s, in whole
	// milliseconds.
	Every time.Duration
	// Job is the job each tick adds. Its ID and ScheduledAt must be
	// empty: the tick gives them.
	Job NewJob
	// Missed is the policy for missed ticks; MissedLimit bounds
	// MissedEach (0: DefaultMissedLimit).
	Missed      Missed
	MissedLimit int
	// Grace is how late a tick may be handled and still count as on time
	// rather than missed; 0: DefaultGrace.
	Grace time.Duration
}

// ValidateScheduleName reports what is wrong with a schedule's name; nil
// when nothing is.
func ValidateScheduleName(name string) error {
	return validateName(ErrInvalidSchedule, "schedule name", name, MaxScheduleNameSize)
}

// prepared is a checked schedule with its timing.
type preparedSchedule struct {
	Schedule
	timing timing
	perTx  int // jobs a tick transaction adds at most
	// job is Job prepared (its data canonical, its unique digest made):
	// each tick copies it and gives it its id and time.
	job NewJob
}

// ValidateSchedule reports what is wrong with a schedule, as an
// ErrInvalidSchedule that says what; nil when nothing is. The type of its
// job need not be registered.
func ValidateSchedule(s Schedule) error {
	_, err := prepareSchedule(s)
	return err
}

func prepareSchedule(s Schedule) (*preparedSchedule, error) {
	if err := ValidateScheduleName(s.Name); err != nil {
		return nil, err
	}
	t, err := parseTiming(s.Cron, s.Timezone, s.Every)
	if err != nil {
		return nil, withSchedule(s.Name, err)
	}
	if s.Job.ID != "" || !s.Job.ScheduledAt.IsZero() {
		return nil, errorf(ErrInvalidSchedule, "schedule %s: its job has an id or a scheduled time; each tick gives them", s.Name)
	}
	j := s.Job
	j.ID = "x"
	if err := prepareJob(&j); err != nil {
		return nil, withSchedule(s.Name, err)
	}
	s.Job.Data = j.Data
	switch {
	case s.Missed < MissedOnce || s.Missed > MissedEach:
		return nil, errorf(ErrInvalidSchedule, "schedule %s: unknown missed-tick policy %d", s.Name, s.Missed)
	case s.MissedLimit < 0 || s.MissedLimit > MaxMissedLimit:
		return nil, errorf(ErrInvalidSchedule, "schedule %s: missed limit %d is out of range (0 to %d)", s.Name, s.MissedLimit, MaxMissedLimit)
	case s.Grace < 0 || s.Grace > MaxGrace:
		return nil, errorf(ErrInvalidSchedule, "schedule %s: grace %s is out of range (0 to %s)", s.Name, s.Grace, MaxGrace)
	}
	if s.Grace == 0 {
		s.Grace = DefaultGrace
	}
	if s.MissedLimit == 0 {
		s.MissedLimit = DefaultMissedLimit
	}
	perTx := min(maxTickJobs, max(1, maxTickBytes/(len(s.Job.Data)+1024)))
	return &preparedSchedule{Schedule: s, timing: t, perTx: perTx, job: j}, nil
}

func withSchedule(name string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return &Error{Err: ErrInvalidSchedule, Detail: fmt.Sprintf("schedule %s: %s", name, e.Detail), Cause: e.Err}
	}
	return fmt.Errorf("schedule %s: %w", name, err)
}

// TickID is the id of the job a schedule's tick at t adds.
func TickID(schedule string, t time.Time) string {
	return schedule + "@" + t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// scheduleRecord is what the store holds for a schedule: its definition
// and its state, JSON (schedules are few and read rarely).
type scheduleRecord struct {
	Def    storedSchedule `json:"def"`
	Paused bool           `json:"paused,omitempty"`
	// Last: every tick at or before it (ms) is handled, by a job or
	// skipped.
	Last int64 `json:"last"`
	// LastJob is the id of the latest tick's job, LastFired its tick.
	LastJob   string `json:"last_job,omitempty"`
	LastFired int64  `json:"last_fired,omitempty"`
	Fired     int64  `json:"fired"`
	Skipped   int64  `json:"skipped"`
}

type storedSchedule struct {
	Cron        string          `json:"cron,omitempty"`
	Timezone    string          `json:"timezone,omitempty"`
	Every       time.Duration   `json:"every,omitempty"`
	Type        string          `json:"type"`
	Data        json.RawMessage `json:"data,omitempty"`
	Priority    int             `json:"priority,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	Retry       *RetryPolicy    `json:"retry,omitempty"`
	Key         string          `json:"key,omitempty"`
	Unique      *Unique         `json:"unique,omitempty"`
	Missed      Missed          `json:"missed"`
	MissedLimit int             `json:"missed_limit"`
	Grace       time.Duration   `json:"grace"`
}

func storeSchedule(s *preparedSchedule) storedSchedule {
	return storedSchedule{Cron: s.Cron, Timezone: s.Timezone, Every: s.Every, Type: s.Job.Type, Data: s.Job.Data,
		Priority: s.Job.Priority, MaxAttempts: s.Job.MaxAttempts, Retry: s.Job.Retry, Key: s.Job.Key, Unique: s.Job.Unique,
		Missed: s.Missed, MissedLimit: s.MissedLimit, Grace: s.Grace}
}

func (d storedSchedule) schedule(name string) Schedule {
	return Schedule{Name: name, Cron: d.Cron, Timezone: d.Timezone, Every: d.Every,
		Job:    NewJob{Type: d.Type, Data: d.Data, Priority: d.Priority, MaxAttempts: d.MaxAttempts, Retry: d.Retry, Key: d.Key, Unique: d.Unique},
		Missed: d.Missed, MissedLimit: d.MissedLimit, Grace: d.Grace}
}

// loadSchedule reads a schedule's record and prepares its definition.
// A record that does not decode, or whose definition this version refuses,
// is an ErrCorrupt that names the schedule.
func (q *Queue) loadSchedule(tx kv.ReadTx, name string) (*scheduleRecord, *preparedSchedule, error) {
	b, err := tx.Get(q.k.schedule(name))
	if err != nil || b == nil {
		return nil, nil, err
	}
	return q.decodeSchedule(name, b)
}

func (q *Queue) decodeSchedule(name string, b []byte) (*scheduleRecord, *preparedSchedule, error) {
	var r scheduleRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, nil, &Error{Err: ErrCorrupt, Detail: fmt.Sprintf("schedule %s: %v", name, err), Cause: err}
	}
	p, err := prepareSchedule(r.Def.schedule(name))
	if err != nil {
		return &r, nil, &Error{Err: ErrCorrupt, Detail: fmt.Sprintf("schedule %s: stored definition: %v", name, err)}
	}
	return &r, p, nil
}

func (q *Queue) putSchedule(tx kv.Tx, name string, r *scheduleRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tx.Set(q.k.schedule(name), b)
	return nil
}

// DeclareSchedule stores schedule s, or changes the stored one of that
// name to s. A schedule that exists keeps its state: its pause, its
// counts and its last tick, unless its timing (Cron, Timezone, Every)
// changed, which starts it afresh from now (ticks of the old timing are
// not caught up). A new schedule's first tick is its first after now.
// The type of s.Job need not be registered yet; a tick of a type that is
// not registered fails, and is retried, until it is.
func (q *Queue) DeclareSchedule(ctx context.Context, tr kv.Transactor, s Schedule) error {
	p, err := prepareSchedule(s)
	if err != nil {
		return err
	}
	return tr.Transact(ctx, func(tx kv.Tx) error {
		old, _, err := q.loadSchedule(tx, s.Name)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return err
		}
		now := q.nowMs()
		r := &scheduleRecord{Def: storeSchedule(p), Last: now}
		if old != nil {
			r.Paused, r.LastJob, r.LastFired, r.Fired, r.Skipped = old.Paused, old.LastJob, old.LastFired, old.Fired, old.Skipped
			// A change of timing starts the schedule afresh from now.
			if old.Def.Cron == r.Def.Cron && old.Def.Timezone == r.Def.Timezone && old.Def.Every == r.Def.Every {
				r.Last = old.Last
			}
			a, _ := json.Marshal(old)
			b, _ := json.Marshal(r)
			if string(a) == string(b) {
				return nil // a restart declaring what is stored writes nothing
			}
		}
		if err := q.putSchedule(tx, s.Name, r); err != nil {
			return err
		}
		tx.Add(q.k.schedulesChange(), 1)
		return nil
	})
}

// DeleteSchedule removes a schedule: no tick of it is handled after the
// transaction commits. Jobs its ticks added stay.
func (q *Queue) DeleteSchedule(ctx context.Context, tr kv.Transactor, name string) error {
	if err := ValidateScheduleName(name); err != nil {
		return err
	}
	return tr.Transact(ctx, func(tx kv.Tx) error {
		b, err := tx.Get(q.k.schedule(name))
		if err != nil {
			return err
		}
		if b == nil {
			return errorf(ErrUnknownSchedule, "%s", name)
		}
		tx.Clear(q.k.schedule(name))
		tx.Add(q.k.schedulesChange(), 1)
		return nil
	})
}

// PauseSchedule stops a schedule's ticks until ResumeSchedule; a pause
// lasts across restarts and DeclareSchedule.
func (q *Queue) PauseSchedule(ctx context.Context, tr kv.Transactor, name string) error {
	return q.pauseSchedule(ctx, tr, name, true)
}

// ResumeSchedule lets a paused schedule tick again, from now: the ticks
// that fell while it was paused get no job.
func (q *Queue) ResumeSchedule(ctx context.Context, tr kv.Transactor, name string) error {
	return q.pauseSchedule(ctx, tr, name, false)
}

func (q *Queue) pauseSchedule(ctx context.Context, tr kv.Transactor, name string, paused bool) error {
	if err := ValidateScheduleName(name); err != nil {
		return err
	}
	return tr.Transact(ctx, func(tx kv.Tx) error {
		r, _, err := q.loadSchedule(tx, name)
		if err != nil {
			return err
		}
		if r == nil {
			return errorf(ErrUnknownSchedule, "%s", name)
		}
		if r.Paused == paused {
			return nil
		}
		r.Paused = paused
		if !paused {
			r.Last = max(r.Last, q.nowMs())
		}
		if err := q.putSchedule(tx, name, r); err != nil {
			return err
		}
		tx.Add(q.k.schedulesChange(), 1)
		return nil
	})
}

// ScheduleInfo is a schedule as stored: its definition and state.
type ScheduleInfo struct {
	Schedule
	Paused bool
	// Next is the next tick to handle (zero when paused, or when the
	// timing has no more ticks).
	Next time.Time
	// Last: every tick at or before it is handled.
	Last time.Time
	// LastJob is the id of the latest tick's job, LastFired its tick.
	LastJob   string
	LastFired time.Time
	// Fired counts the ticks that added a job; Skipped those that did not
	// (missed ticks the policy skipped; a long outage of a frequent
	// schedule counts at most maxTickScan per catch-up).
	Fired, Skipped int64
	// Err is set when the stored schedule cannot be read (ErrCorrupt);
	// then only Name is.
	Err error
}

func scheduleInfo(name string, r *scheduleRecord, p *preparedSchedule, err error) *ScheduleInfo {
	if err != nil {
		return &ScheduleInfo{Schedule: Schedule{Name: name}, Err: err}
	}
	in := &ScheduleInfo{Schedule: p.Schedule, Paused: r.Paused, Last: time.UnixMilli(r.Last).UTC(), LastJob: r.LastJob,
		Fired: r.Fired, Skipped: r.Skipped}
	if r.LastFired != 0 {
		in.LastFired = time.UnixMilli(r.LastFired).UTC()
	}
	if !r.Paused {
		in.Next = p.timing.next(time.UnixMilli(r.Last))
	}
	return in
}

// GetSchedule returns a schedule, or ErrUnknownSchedule.
func (q *Queue) GetSchedule(ctx context.Context, tr kv.ReadTransactor, name string) (*ScheduleInfo, error) {
	if err := ValidateScheduleName(name); err != nil {
		return nil, err
	}
	return kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) (*ScheduleInfo, error) {
		b, err := tx.Get(q.k.schedule(name))
		if err != nil {
			return nil, err
		}
		if b == nil {
			return nil, errorf(ErrUnknownSchedule, "%s", name)
		}
		r, p, err := q.decodeSchedule(name, b)
		return scheduleInfo(name, r, p, err), nil
	})
}

// Schedules lists the declared schedules by name. One whose record cannot
// be read is listed with its Err set.
func (q *Queue) Schedules(ctx context.Context, tr kv.ReadTransactor) ([]*ScheduleInfo, error) {
	return kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) ([]*ScheduleInfo, error) {
		sub := q.k.schedules()
		kvs, err := tx.GetRange(sub.Range(), kv.RangeOptions{})
		if err != nil {
			return nil, err
		}
		out := make([]*ScheduleInfo, 0, len(kvs))
		for _, e := range kvs {
			t, err := sub.Unpack(e.Key)
			name, ok := "", false
			if err == nil && len(t) == 1 {
				name, ok = t[0].(string)
			}
			if !ok {
				q.logger().Warn("fdbq: skipping a malformed schedule key", "key", fmt.Sprintf("%q", e.Key))
				continue
			}
			r, p, err := q.decodeSchedule(name, e.Value)
			out = append(out, scheduleInfo(name, r, p, err))
		}
		return out, nil
	})
}

// Tick is what a tick transaction did for a schedule.
type Tick struct {
	Schedule string
	// Jobs are the ids of the jobs added (or found: a job of that id
	// already existed and was left as it was), oldest tick first.
	Jobs []string
	// Ticks are the ticks of Jobs.
	Ticks []time.Time
	// Skipped counts the missed ticks the policy gave no job.
	Skipped int64
	// More: ticks are still due, for the next transaction.
	More bool
}

// TickSchedule handles the due ticks of one schedule at the queue's now,
// in one transaction: it adds their jobs and records them as handled, so
// that a tick is handled once however many schedulers run it at once. It
// does nothing for a paused or deleted schedule, or when no tick is due.
func (q *Queue) TickSchedule(ctx context.Context, tr kv.Transactor, name string) (*Tick, error) {
	token := newToken()
	return kv.Transact(ctx, tr, func(tx kv.Tx) (*Tick, error) {
		return q.tick(tx, name, q.now(), token)
	})
}

func (q *Queue) tick(tx kv.Tx, name string, now time.Time, token string) (*Tick, error) {
	out := &Tick{Schedule: name}
	r, p, err := q.loadSchedule(tx, name)
	if err != nil || r == nil || r.Paused {
		return out, err
	}
	last := time.UnixMilli(r.Last)
	if !now.After(last) {
		return out, nil
	}
	// Late: handled MORE than Grace after its time; a tick at exactly
	// now-Grace is on time.
	lateEnd := now.Add(-p.Grace - time.Nanosecond)
	k := 0
	switch p.Missed {
	case MissedOnce:
		k = 1
	case MissedEach:
		k = p.MissedLimit
	}
	late, lastLate, lateCount := latestTicks(p.timing, last, lateEnd, k)
	from := last
	if lateEnd.After(from) {
		from = lateEnd
	}
	onTime := enumerate(p.timing, from, now, p.perTx+1)
	fire := append(late, onTime...)
	newLast := lastLate
	if len(onTime) > 0 {
		newLast = onTime[len(onTime)-1]
	}
	if len(fire) > p.perTx {
		fire = fire[:p.perTx]
		newLast = fire[len(fire)-1]
		out.More = true
	}
	if newLast.IsZero() {
		return out, nil // no tick in (last, now]
	}
	skipped := int64(lateCount - len(late))
	settings, err := q.settings(tx, p.Job.Type)
	if err != nil {
		return nil, fmt.Errorf("schedule %s: %w", name, err)
	}
	marked := &zoneMarks{}
	written := map[[2]string]bool{}
	for _, t := range fire {
		// TickID is a valid id: a schedule name and a fixed-size time.
		j := p.job
		j.ID = TickID(name, t)
		j.ScheduledAt = time.UnixMilli(t.UnixMilli())
		old, err := q.load(tx, j.Type, j.ID)
		if err != nil {
			return nil, fmt.Errorf("schedule %s: %w", name, err)
		}
		id := j.ID
		if old == nil {
			// A tick's job that exists is left as it is: re-adding it would
			// resubmit it, and a finished one would run again.
			var job *Job
			if j.Unique != nil {
				job, err = q.addUnique(tx, j, &settings, marked, now.UnixMilli(), token, written)
			} else {
				job, err = q.add(tx, j, &settings, marked, now.UnixMilli(), token, false)
			}
			var dup *DuplicateError
			switch {
			case errors.As(err, &dup):
				id = dup.ID // the tick is handled: its unique job exists
			case err != nil:
				return nil, fmt.Errorf("schedule %s: %w", name, err)
			default:
				id = job.ID
			}
		}
		out.Jobs = append(out.Jobs, id)
		out.Ticks = append(out.Ticks, t)
	}
	out.Skipped = skipped
	r.Last = newLast.UnixMilli()
	r.Fired += int64(len(fire))
	r.Skipped += skipped
	if len(fire) > 0 {
		r.LastJob, r.LastFired = out.Jobs[len(out.Jobs)-1], fire[len(fire)-1].UnixMilli()
	}
	return out, q.putSchedule(tx, name, r)
}

// enumName is v's name in names, the names of an enum of type typ.
func enumName[E ~int](names []string, v E, typ string) string {
	if v >= 0 && int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, int(v))
}

// parseEnum reads one of names ("" is the first), or fails with an error
// of sentinel naming what and the names.
func parseEnum[E ~int](names []string, s string, sentinel error, what string) (E, error) {
	if s == "" {
		return 0, nil
	}
	if i := slices.Index(names, s); i >= 0 {
		return E(i), nil
	}
	return 0, errorf(sentinel, "%s %q: use %s or %s", what, s, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}

// enumerate returns the ticks in (from, to], at most n of them.
func enumerate(t timing, from, to time.Time, n int) []time.Time {
	var out []time.Time
	for at := from; len(out) < n; {
		c := t.next(at)
		if c.IsZero() || c.After(to) {
			break
		}
		out = append(out, c)
		at = c
	}
	return out
}

// latestTicks returns the latest k ticks in (from, to], oldest first, the
// latest tick there, and how many ticks there are (at least maxTickScan
// when there are more).
func latestTicks(t timing, from, to time.Time, k int) ([]time.Time, time.Time, int) {
	if !to.After(from) {
		return nil, time.Time{}, 0
	}
	all := enumerate(t, from, to, maxTickScan)
	if len(all) < maxTickScan {
		if len(all) == 0 {
			return nil, time.Time{}, 0
		}
		return slices.Clone(all[max(0, len(all)-k):]), all[len(all)-1], len(all)
	}
	// Too many to enumerate: look back from the end for the latest ones,
	// in windows growing fourfold.
	count := len(all)
	if t.spec == nil {
		ms := t.every.Milliseconds()
		count = int(min(floorDiv(to.UnixMilli(), ms)-floorDiv(from.UnixMilli(), ms), 1<<31))
	}
	for w := time.Minute; ; w *= 4 {
		start := to.Add(-w)
		if !start.After(from) {
			start = from
		}
		ts := enumerate(t, start, to, maxTickScan)
		if len(ts) > k || !start.After(from) || len(ts) == maxTickScan {
			if len(ts) == 0 {
				return nil, time.Time{}, count
			}
			return slices.Clone(ts[max(0, len(ts)-k):]), ts[len(ts)-1], count
		}
	}
}

// schedules is the subspace of schedule records: (P, 21, name).
func (k keys) schedules() tuple.Subspace { return k.root.Sub(tagSchedules) }

func (k keys) schedule(name string) []byte { return k.root.MustPack(tuple.Tuple{tagSchedules, name}) }

// schedulesChange is bumped by every change of a schedule's definition or
// pause; schedulers watch it.
func (k keys) schedulesChange() []byte { return k.root.MustPack(tuple.Tuple{tagSchedulesChange}) }
