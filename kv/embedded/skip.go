package embedded

import (
	"bytes"
	"slices"
	"sync"

	"github.com/jobstage/jobstage/kv"
)

// skipCache remembers ranges that hold no live key, so that forward scans
// from the same start key seek past them instead of stepping over their
// deletion tombstones one by one.
//
// A queue consumed from its head is the case it exists for: every job
// taken leaves a tombstone at the head of the pending index, and Pebble's
// iterators skip tombstones one at a time until compaction removes them,
// so without this cache each scan from the head would cost as much as all
// the jobs ever taken since the last compaction, and a queue's throughput
// would fall as it ran. (FoundationDB's B-tree storage removes cleared keys
// at once and has no such cost.)
//
// An entry says: at commit version `version`, no live key lay in
// [begin, first). Readers propose entries after a scan (the first key
// their scan returned, at their read version); the committer validates a
// proposal against the resolver's record of recent writes — any write into
// the range after the reader's version voids it — and, when a batch sets a
// key inside an entry's range, shortens the entry to end there. A reader uses an entry only if its
// read version is at or after the entry's: an older snapshot may still see
// keys that were deleted later.
type skipCache struct {
	mu      sync.RWMutex
	entries map[string]skipEntry
	// proposals go from readers to the committer; when full, proposals are
	// dropped (the cache is an optimisation).
	proposals chan skipProposal
	// sorted is invalidate's copy of a batch's keys, in order.
	sorted []string
}

type skipEntry struct {
	first   []byte
	version uint64
}

type skipProposal struct {
	begin, first []byte
	version      uint64
}

const maxSkipEntries = 4096

func newSkipCache() *skipCache {
	return &skipCache{entries: make(map[string]skipEntry), proposals: make(chan skipProposal, 1024)}
}

// seek returns where a forward scan from begin, at readVersion, may start.
func (c *skipCache) seek(begin []byte, readVersion uint64) ([]byte, bool) {
	c.mu.RLock()
	e, ok := c.entries[string(begin)]
	c.mu.RUnlock()
	if !ok || e.version > readVersion || bytes.Compare(e.first, begin) <= 0 {
		return nil, false
	}
	return e.first, true
}

// propose offers an entry learnt by a scan.
func (c *skipCache) propose(begin, first []byte, version uint64) {
	if bytes.Compare(first, begin) <= 0 {
		return
	}
	select {
	case c.proposals <- skipProposal{begin: bytes.Clone(begin), first: bytes.Clone(first), version: version}:
	default:
	}
}

// admit validates pending proposals against the resolver and adds the
// valid ones. Only the committer calls it.
func (c *skipCache) admit(r *resolver) {
	for {
		var p skipProposal
		select {
		case p = <-c.proposals:
		default:
			return
		}
		if p.version < r.prunedThrough || r.writtenAfter(p.begin, p.first, p.version) {
			continue
		}
		c.mu.Lock()
		if cur, ok := c.entries[string(p.begin)]; !ok || cur.version < p.version {
			if !ok && len(c.entries) >= maxSkipEntries {
				clear(c.entries)
			}
			c.entries[string(p.begin)] = skipEntry{first: p.first, version: p.version}
		}
		c.mu.Unlock()
	}
}

// invalidate updates the entries for a batch's writes: a key set inside
// an entry's range becomes its new end (the keys before it are still dead,
// at the entry's version and after), and a range write over the start of
// an entry drops it. Cleared keys change nothing: they were dead already
// or are dead now. Only the committer calls it, for every batch it writes,
// before the batch is visible.
func (c *skipCache) invalidate(set []string, ranges []kv.Range) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) == 0 || len(set) == 0 && len(ranges) == 0 {
		return
	}
	// Every entry looks for the least key set at or after its begin: with
	// the keys sorted that is one binary search, not a pass over the
	// batch's keys, so a commit costs entries × log(keys) however many
	// entries scans from many begins have left.
	if !slices.IsSorted(set) {
		c.sorted = append(c.sorted[:0], set...)
		slices.Sort(c.sorted)
		set = c.sorted
		defer clear(c.sorted) // the batch's keys are not kept alive
	}
	for b, e := range c.entries {
		first := string(e.first)
		if i, _ := slices.BinarySearch(set, b); i < len(set) && set[i] < first {
			first = set[i]
		}
		for _, rg := range ranges {
			if bytes.Compare(rg.Begin, []byte(first)) < 0 && bytes.Compare([]byte(b), rg.End) < 0 {
				if bytes.Compare(rg.Begin, []byte(b)) <= 0 {
					first = b
				} else {
					first = string(rg.Begin)
				}
			}
		}
		switch {
		case first == b:
			delete(c.entries, b)
		case first != string(e.first):
			c.entries[b] = skipEntry{first: []byte(first), version: e.version}
		}
	}
}
