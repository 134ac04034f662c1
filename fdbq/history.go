package fdbq

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// A type's history counts, per minute, how its jobs' attempts ended: the
// jobs that finished (by outcome), the failed attempts after which a job
// runs again, and the attempts the activity monitor took back. The
// counters are written in the transaction of each change, so they are as
// exact as the jobs: an operation that commits counts once, one that
// does not commits no count, and one retried after a commit whose result
// was unknown finds its change made and writes no second count.
//
// Each minute is counted on historyLanes keys per kind, by the job's
// lane, so that no key takes every finish of a busy type (see
// countShards), and the lanes of an hour are ranges apart (see
// keys.history). The minute is the writer's clock's (Options.Now): two
// processes whose clocks disagree count one minute's changes in the
// minutes each believes it is. The monitor clears the hours that ended
// Options.HistoryRetention ago: a minute is kept at least that long, and
// less than an hour longer.

// DefaultHistoryRetention is Options.HistoryRetention when it is zero.
const DefaultHistoryRetention = 24 * time.Hour

// MaxHistoryMinutes bounds the minutes one History call reads.
const MaxHistoryMinutes = 24 * 60

// historyLanes is how many keys share a minute's count of one kind: a
// job counts on the key of its lane (laneOf).
const historyLanes = activityLanes

// historyKind is what a history counter counts; the codes are stored.
type historyKind int64

const (
	histSucceeded historyKind = 1
	histFailed    historyKind = 2
	histCanceled  historyKind = 3
	histRetried   historyKind = 4
	histRecycled  historyKind = 5
)

// Minute is one minute of a type's history: how many of its jobs
// finished in it, by outcome, and how many attempts failed in it with the
// job to run again. Each of these counts once, in one field. Attempts
// that do not count as attempts (snoozed, released) count nothing, and
// neither does an attempt that succeeded or was canceled while its job
// was added again (the job runs again, as the add asked).
type Minute struct {
	// At is the minute's start (UTC).
	At time.Time
	// Succeeded, Failed and Canceled count the jobs that finished so in
	// the minute (a job finished again after a requeue counts again).
	Succeeded, Failed, Canceled int64
	// Retried counts attempts that failed with attempts left: the job
	// runs again. Recycled counts attempts the activity monitor took back
	// (the worker stopped renewing them) with attempts left; one taken
	// back out of attempts counts as Failed.
	Recycled, Retried int64
}

// History is a type's history over a span of minutes.
type History struct {
	// Minutes are the span's minutes in order, every one, those with no
	// counts too.
	Minutes []Minute
	// Unreadable counts the keys in the span's range that are not
	// counters fdbq writes; they are passed over.
	Unreadable int
}

// historyKindOf is the kind a change of a job from old to rec counts as,
// and the time it counts at, or false for a change that counts nothing.
func historyKindOf(old, rec *record) (historyKind, int64, bool) {
	if rec.State == Finished {
		if old != nil && old.State == Finished {
			return 0, 0, false
		}
		switch rec.Outcome {
		case Succeeded:
			return histSucceeded, rec.FinishedAt, true
		case Failed:
			return histFailed, rec.FinishedAt, true
		case Canceled:
			return histCanceled, rec.FinishedAt, true
		}
		return 0, 0, false
	}
	if rec.attemptEnd != 0 && rec.State == Pending && old != nil && old.State == Running {
		return rec.attemptEnd, rec.attemptEndAt, true
	}
	return 0, 0, false
}

// countHistory adds the change of job id from old to rec to its minute's
// counter, if it counts (historyKindOf).
func (q *Queue) countHistory(tx kv.Tx, typ, id string, old, rec *record) {
	kind, at, ok := historyKindOf(old, rec)
	if !ok {
		return
	}
	tx.Add(q.k.history(typ, floorDiv(at, 60_000), kind, laneOf(id)), 1)
}

// History reads typ's counts for every minute from the minute of from to
// the minute of to, both included: at most MaxHistoryMinutes of them.
// The minutes are read an hour of the clock at a time, each in its own
// transaction without conflicts: the counts of a minute still going on
// are those of one moment.
func (q *Queue) History(ctx context.Context, tr kv.ReadTransactor, typ string, from, to time.Time) (*History, error) {
	if err := checkName("type name", typ); err != nil {
		return nil, err
	}
	first, last := floorDiv(from.UnixMilli(), 60_000), floorDiv(to.UnixMilli(), 60_000)
	if last < first {
		return nil, errorf(ErrInvalidJob, "history: %s is before %s", to.UTC().Format(time.RFC3339), from.UTC().Format(time.RFC3339))
	}
	if last-first >= MaxHistoryMinutes {
		return nil, errorf(ErrInvalidJob, "history: %d minutes asked, at most %d are read at once", last-first+1, MaxHistoryMinutes)
	}
	h := &History{Minutes: make([]Minute, last-first+1)}
	for i := range h.Minutes {
		h.Minutes[i].At = time.UnixMilli((first + int64(i)) * 60_000).UTC()
	}
	for begin := first; begin <= last; {
		hour := floorDiv(begin, 60)
		end := min((hour+1)*60, last+1)
		bad, err := kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) (int, error) {
			if begin == first {
				// A type whose settings do not decode still has its
				// history read.
				if _, err := q.settings(tx, typ); err != nil && !errors.Is(err, ErrCorrupt) {
					return 0, err
				}
			}
			for i := begin; i < end; i++ {
				h.Minutes[i-first] = Minute{At: h.Minutes[i-first].At}
			}
			return q.readHistory(snapshotOf(tx), typ, hour, begin, h.Minutes[begin-first:end-first])
		})
		if err != nil {
			return nil, err
		}
		h.Unreadable += bad
		begin = end
	}
	return h, nil
}

// historyPage is how many keys readHistory reads at once.
const historyPage = 1000

// readHistory reads hour's counters, adds those of minutes begin to
// begin+len(out)-1 (of the hour) to out, and returns how many keys of
// the hour's range are not counters.
func (q *Queue) readHistory(tx kv.ReadTx, typ string, hour, begin int64, out []Minute) (int, error) {
	r := kv.Range{Begin: q.k.historyHour(typ, hour), End: q.k.historyHour(typ, hour+1)}
	bad := 0
	for {
		kvs, err := tx.GetRange(r, kv.RangeOptions{Limit: historyPage})
		if err != nil {
			return 0, err
		}
		for _, e := range kvs {
			minute, kind, ok := q.k.parseHistory(typ, e.Key)
			if !ok || len(e.Value) != 8 || kind < histSucceeded || kind > histRecycled {
				bad++
				continue
			}
			if minute < begin || minute >= begin+int64(len(out)) {
				continue // of the hour, not asked for
			}
			n := kv.DecodeInt64(e.Value)
			m := &out[minute-begin]
			switch kind {
			case histSucceeded:
				m.Succeeded += n
			case histFailed:
				m.Failed += n
			case histCanceled:
				m.Canceled += n
			case histRetried:
				m.Retried += n
			case histRecycled:
				m.Recycled += n
			}
		}
		if len(kvs) < historyPage {
			return bad, nil
		}
		r.Begin = kv.KeyAfter(kvs[len(kvs)-1].Key)
	}
}

// The monitor clears a type's history an hour of the clock at a time:
// the hours that ended the retention ago or earlier (so a minute is kept
// at least the retention, and less than an hour longer), and whatever
// else lies before them in the type's range.

// historyCut is the first hour of history the retention keeps at now.
func (q *Queue) historyCut(now int64) int64 {
	return floorDiv(now-q.historyRetention.Milliseconds(), 3_600_000)
}

// oldHistory reports whether typ has history keys before the hours the
// retention keeps: the monitor's to clear.
func (q *Queue) oldHistory(tx kv.ReadTx, typ string, now int64) (bool, error) {
	return anyIn(tx, kv.Range{Begin: q.k.historyType(typ).Range().Begin, End: q.k.historyHour(typ, q.historyCut(now))})
}

// historyDue returns when the hour of typ's history that its first key
// lies in is past the retention (ms), or false when it has no key. The
// hour is the key's by key order, as trimHistory clears: a key that is
// no counter is due with the hour whose keys it sorts among, or at once
// if it sorts before every hour's. An hour so far off that its deadline
// does not fit in an int64 is due at the int64's end.
func (q *Queue) historyDue(tx kv.ReadTx, typ string) (int64, bool, error) {
	kvs, err := tx.GetRange(q.k.historyType(typ).Range(), kv.RangeOptions{Limit: 1})
	if err != nil || len(kvs) == 0 {
		return 0, false, err
	}
	hour, ok := q.k.historyHourOf(typ, kvs[0].Key)
	if !ok || hour < math.MinInt64/3_600_000 {
		return math.MinInt64, true, nil
	}
	if hour >= math.MaxInt64/3_600_000-1 {
		return math.MaxInt64, true, nil
	}
	end, ret := (hour+1)*3_600_000, q.historyRetention.Milliseconds()
	if ret > 0 && end > math.MaxInt64-ret {
		return math.MaxInt64, true, nil
	}
	return end + ret, true, nil
}

// trimHistory clears typ's hours of history past the retention, and
// whatever else lies before them in the range.
func (q *Queue) trimHistory(ctx context.Context, typ string) error {
	return q.db.Transact(ctx, func(tx kv.Tx) error {
		// Looked at again: another monitor may have cleared them since.
		r := kv.Range{Begin: q.k.historyType(typ).Range().Begin, End: q.k.historyHour(typ, q.historyCut(q.nowMs()))}
		if some, err := anyIn(tx.Snapshot(), r); err != nil || !some {
			return err
		}
		tx.ClearRange(r)
		return nil
	})
}
