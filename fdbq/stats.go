package fdbq

import (
	"context"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// MaxOldestDueBands bounds the priority bands OldestDue reads: one key
// each.
const MaxOldestDueBands = 64

// OldestDue returns the scheduled time of the type's pending job that has
// been due the longest — the job that has waited most — or the zero time
// when no pending job is due. Metrics report now minus it as the oldest
// pending job's age.
//
// The ready index is ordered by zone, then priority, then scheduled time,
// so the earliest job of each priority band of a zone is that band's
// first entry: OldestDue reads one key per band (without conflicts),
// jumping from band to band,
// and takes the earliest due one, or the scheduled index's first entry
// (the earliest of the jobs indexed before they were due) if that is due
// and earlier. It is exact for up to MaxOldestDueBands distinct priorities
// among the jobs indexed as due; beyond that it reports the earliest among
// the highest MaxOldestDueBands bands and the scheduled index.
// A key of the index that is not one fdbq writes is passed over (and
// counts as a band).
func (q *Queue) OldestDue(ctx context.Context, tr kv.ReadTransactor, typ string) (time.Time, error) {
	if err := checkName("type name", typ); err != nil {
		return time.Time{}, err
	}
	now := q.nowMs()
	ms, err := kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) (int64, error) {
		snap := snapshotOf(tx)
		sub := q.k.pendingType(typ)
		all := sub.Range()
		begin := all.Begin
		oldest := int64(0)
		found := false
		head, err := snap.GetRange(q.k.scheduledType(typ).Range(), kv.RangeOptions{Limit: 1})
		if err != nil {
			return 0, err
		}
		if len(head) == 1 {
			if _, _, sched, _, err := q.parseScheduled(typ, head[0].Key); err == nil && sched <= now {
				oldest, found = sched, true
			}
		}
		for range MaxOldestDueBands {
			first, err := snap.GetRange(kv.Range{Begin: begin, End: all.End}, kv.RangeOptions{Limit: 1})
			if err != nil || len(first) == 0 {
				return oldest, err
			}
			z, neg, sched, _, err := q.parsePending(typ, first[0].Key)
			if err != nil {
				// Not a key fdbq writes: it names no band to jump
				// past, and no job to report.
				begin = kv.KeyAfter(first[0].Key)
				continue
			}
			if sched <= now && (!found || sched < oldest) {
				oldest, found = sched, true
			}
			begin = q.k.pendingBand(typ, z, int(-neg)).Range().End
		}
		return oldest, nil
	})
	if err != nil || ms == 0 {
		return time.Time{}, err
	}
	return time.UnixMilli(ms), nil
}
