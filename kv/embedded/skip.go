package embedded

import (
	"bytes"
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
// the range after the reader's version voids it — and drops an entry as
// soon as a batch writes into its range. A reader uses an entry only if its
// read version is at or after the entry's: an older snapshot may still see
// keys that were deleted later.
type skipCache struct {
	mu      sync.RWMutex
	entries map[string]skipEntry
	// proposals go from readers to the committer; when full, proposals are
	// dropped (the cache is an optimisation).
	proposals chan skipProposal
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

// invalidate drops the entries whose range holds one of keys or overlaps
// one of ranges. Only the committer calls it, for every batch it writes.
func (c *skipCache) invalidate(keys []string, ranges []kv.Range) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) == 0 {
		return
	}
	for b, e := range c.entries {
		begin := []byte(b)
		hit := false
		for _, k := range keys {
			if k >= b && k < string(e.first) {
				hit = true
				break
			}
		}
		for _, rg := range ranges {
			if hit {
				break
			}
			hit = bytes.Compare(rg.Begin, e.first) < 0 && bytes.Compare(begin, rg.End) < 0
		}
		if hit {
			delete(c.entries, b)
		}
	}
}
