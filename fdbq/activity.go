package fdbq

import (
	"sort"
	"time"
)

// A versionSample is what one of the monitor's transactions learned: every commit
// with a version at most rv was visible to it, so had happened, before at,
// a time of the monitor's clock read after the transaction obtained rv.
//
// The monitor's staleness rule follows: a running job whose activity entry
// was committed at a version at most a sample's rv, and is still the job's
// entry in a transaction that began at least the job's activity timeout
// after the sample's at, had no activity for that long. Only the monitor's
// own clock measures the time, and only its rate matters; the clocks of
// the workers, and of other monitors, play no part. This is couch_jobs'
// scheme (the type's activity versionstamp noted, compared again one
// timeout later), with the versions of the monitor's own reads instead of
// a key every heartbeat writes.
type versionSample struct {
	rv int64
	at time.Time
}

// samples is a monitor's record of its transactions, in the order of at
// (and so of rv: a sample that another beats on both counts is dropped).
// Samples are kept about spacing apart (and the newest), and
// the list is thinned to at most maxSamples, so its size does not grow
// with the activity timeout beyond that; merging and thinning only make a
// job wait longer, never less.
type samples struct {
	list    []versionSample
	spacing time.Duration
}

const maxSamples = 4096

// note records a sample.
func (s *samples) note(rv int64, at time.Time) {
	n := len(s.list)
	// Where it goes by at; samples with the same at keep their order.
	i := sort.Search(n, func(i int) bool { return s.list[i].at.After(at) })
	// A sample at or before it with a version at least as high beats it.
	if i > 0 && s.list[i-1].rv >= rv {
		return
	}
	// It beats the samples after it with a version at most its own.
	j := i
	for j < n && s.list[j].rv <= rv {
		j++
	}
	s.list = append(s.list[:i], append([]versionSample{{rv, at}}, s.list[j:]...)...)
	// The one before it goes when it is less than spacing after the one
	// before that: the samples kept are spacing apart, but for the
	// newest, and so they age whatever the pace of transactions.
	if i >= 2 && at.Sub(s.list[i-2].at) < s.spacing {
		s.list = append(s.list[:i-1], s.list[i:]...)
	}
	if len(s.list) > maxSamples {
		s.thin()
	}
}

// thin drops every second sample of the older half of the list.
func (s *samples) thin() {
	half := len(s.list) / 2
	out := s.list[:0]
	for i, e := range s.list {
		if i >= half || i%2 == 1 {
			out = append(out, e)
		}
	}
	s.list = out
}

// prune drops the samples before horizon but the latest of them, which the
// jobs of the longest timeout still need.
func (s *samples) prune(horizon time.Time) {
	i := sort.Search(len(s.list), func(i int) bool { return !s.list[i].at.Before(horizon) })
	if i > 1 {
		s.list = append(s.list[:0], s.list[i-1:]...)
	}
}

// before returns the latest sample at or before t.
func (s *samples) before(t time.Time) (versionSample, bool) {
	i := sort.Search(len(s.list), func(i int) bool { return s.list[i].at.After(t) })
	if i == 0 {
		return versionSample{}, false
	}
	return s.list[i-1], true
}

// covering returns the earliest sample whose version is at least v: the
// first that knows of a commit at v.
func (s *samples) covering(v int64) (versionSample, bool) {
	i := sort.Search(len(s.list), func(i int) bool { return s.list[i].rv >= v })
	if i == len(s.list) {
		return versionSample{}, false
	}
	return s.list[i], true
}

// stale reports whether a job whose activity entry committed at version cv
// with the given timeout had no activity since, as of a transaction that
// began after now: a sample at least timeout before now knew of the
// commit.
func (s *samples) stale(cv int64, timeout time.Duration, now time.Time) bool {
	sm, ok := s.before(now.Add(-timeout))
	return ok && cv <= sm.rv
}

// dueAt returns when a job whose activity entry committed at version cv
// with the given timeout becomes stale, if no activity comes: a timeout
// after the first sample that knew of the commit.
func (s *samples) dueAt(cv int64, timeout time.Duration) (time.Time, bool) {
	sm, ok := s.covering(cv)
	if !ok {
		return time.Time{}, false
	}
	return sm.at.Add(timeout), true
}
