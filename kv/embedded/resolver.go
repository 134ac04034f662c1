package embedded

import (
	"bytes"
	"time"

	"github.com/google/btree"

	"github.com/jobstage/jobstage/kv"
)

// resolver decides whether a transaction may commit: it conflicts when any
// key range it read was written by a transaction that committed after its
// read version. It remembers, for every key written recently, the last
// version that wrote it (FoundationDB's resolvers keep the same map in a
// versioned skip list), and the ranges written by range clears and explicit
// write conflict ranges, which are rare and kept in a list.
//
// Only the committer goroutine uses a resolver, so it has no lock.
type resolver struct {
	points *btree.BTreeG[pointWrite]
	ranges []rangeWrite
	// batches is every commit batch still remembered, oldest first; it says
	// which points to forget when a batch is pruned.
	batches []batchRecord
	// prunedThrough is the newest version whose writes were forgotten. A
	// transaction that read at an older version cannot be checked any more:
	// it is too old.
	prunedThrough uint64
}

type pointWrite struct {
	key     string
	version uint64
}

type rangeWrite struct {
	r       kv.Range
	version uint64
}

type batchRecord struct {
	version uint64
	at      time.Time
	keys    []string
}

func pointLess(a, b pointWrite) bool { return a.key < b.key }

func newResolver() *resolver {
	return &resolver{points: btree.NewG(32, pointLess)}
}

// conflicts reports whether a transaction that read at readVersion the
// given point keys and ranges overlaps a write committed after it.
func (r *resolver) conflicts(readVersion uint64, readKeys []string, readRanges []kv.Range) bool {
	for _, k := range readKeys {
		if p, ok := r.points.Get(pointWrite{key: k}); ok && p.version > readVersion {
			return true
		}
	}
	for _, rr := range readRanges {
		if r.pointWrittenAfter(rr.Begin, rr.End, readVersion) {
			return true
		}
	}
	for _, w := range r.ranges {
		if w.version <= readVersion {
			continue
		}
		for _, k := range readKeys {
			if w.r.Contains([]byte(k)) {
				return true
			}
		}
		for _, rr := range readRanges {
			if w.r.Overlaps(rr) {
				return true
			}
		}
	}
	return false
}

// record remembers the writes of a transaction committed at version.
func (r *resolver) record(version uint64, keys []string, ranges []kv.Range, rec *batchRecord) {
	for _, k := range keys {
		r.points.ReplaceOrInsert(pointWrite{key: k, version: version})
	}
	rec.keys = append(rec.keys, keys...)
	for _, rg := range ranges {
		r.ranges = append(r.ranges, rangeWrite{r: rg, version: version})
	}
}

// prune forgets batches at or below horizon, and batches committed before
// cutoff whatever their version (transactions that old are too old anyway).
func (r *resolver) prune(horizon uint64, cutoff time.Time) {
	n := 0
	for n < len(r.batches) {
		b := r.batches[n]
		if b.version > horizon && !b.at.Before(cutoff) {
			break
		}
		for _, k := range b.keys {
			// One descent when the batch's write is still the latest (the
			// usual case); a later write taken out with it goes back.
			if p, ok := r.points.Delete(pointWrite{key: k}); ok && p.version != b.version {
				r.points.ReplaceOrInsert(p)
			}
		}
		r.prunedThrough = b.version
		n++
	}
	if n == 0 {
		return
	}
	r.batches = append(r.batches[:0:0], r.batches[n:]...)
	kept := r.ranges[:0]
	for _, w := range r.ranges {
		if w.version > r.prunedThrough {
			kept = append(kept, w)
		}
	}
	clear(r.ranges[len(kept):])
	r.ranges = kept
}

// writtenAfter reports whether a key in [begin, end) was written at a
// version after version (as far as the resolver remembers; callers check
// prunedThrough first).
func (r *resolver) writtenAfter(begin, end []byte, version uint64) bool {
	if r.pointWrittenAfter(begin, end, version) {
		return true
	}
	for _, w := range r.ranges {
		if w.version > version && bytes.Compare(w.r.Begin, end) < 0 && bytes.Compare(begin, w.r.End) < 0 {
			return true
		}
	}
	return false
}

// pointWrittenAfter reports whether a point write to a key in [begin, end)
// is remembered at a version after version.
func (r *resolver) pointWrittenAfter(begin, end []byte, version uint64) bool {
	hit := false
	r.points.AscendRange(pointWrite{key: string(begin)}, pointWrite{key: string(end)}, func(p pointWrite) bool {
		if p.version > version {
			hit = true
			return false
		}
		return true
	})
	return hit
}
