package embedded

import (
	"bytes"
	"sync"

	"github.com/jobstage/jobstage/kv"
)

// watchSet holds the registered watches by key. A watch is registered by
// the committer when its transaction commits, with the value that
// transaction saw; after every commit round the committer checks the
// watches on the keys the round changed and fires those whose value now
// differs.
type watchSet struct {
	mu      sync.Mutex
	max     int
	count   int // registered plus reserved by uncommitted transactions
	entries map[string]map[*watchEntry]struct{}
}

type watchEntry struct {
	key    string
	seen   []byte
	exists bool
	// pending: the transaction had written a versionstamped value to the
	// key, so seen is the value after its commit, filled in by the
	// committer.
	pending bool
	w       *kv.ChanWatch
}

func newWatchSet(max int) *watchSet {
	return &watchSet{max: max, entries: make(map[string]map[*watchEntry]struct{})}
}

// reserve counts a watch a transaction created, so the limit holds before
// the transaction commits. It fails with too_many_watches past the limit.
func (ws *watchSet) reserve() error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.count >= ws.max {
		return kv.ErrTooManyWatches.WithDetail("%d watches outstanding", ws.count)
	}
	ws.count++
	return nil
}

// unreserve returns a reservation (the watch failed or was cancelled before
// it was registered).
func (ws *watchSet) unreserve() {
	ws.mu.Lock()
	ws.count--
	ws.mu.Unlock()
}

// register adds a reserved watch, firing it at once when current differs
// from what its transaction saw.
func (ws *watchSet) register(e *watchEntry, current []byte, currentExists bool) {
	if changed(e.seen, e.exists, current, currentExists) {
		if e.w.Fire(nil) {
			ws.unreserve()
		}
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	select {
	case <-e.w.Ready(): // cancelled meanwhile; its cancel already unreserved
		return
	default:
	}
	m := ws.entries[e.key]
	if m == nil {
		m = make(map[*watchEntry]struct{})
		ws.entries[e.key] = m
	}
	m[e] = struct{}{}
}

// remove unregisters a cancelled watch, or returns its reservation if it
// was not registered yet.
func (ws *watchSet) remove(e *watchEntry) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if m := ws.entries[e.key]; m != nil {
		delete(m, e)
		if len(m) == 0 {
			delete(ws.entries, e.key)
		}
	}
	ws.count--
}

// keysIn returns the watched keys in r.
func (ws *watchSet) keysIn(r kv.Range) []string {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	var out []string
	for k := range ws.entries {
		if r.Contains([]byte(k)) {
			out = append(out, k)
		}
	}
	return out
}

// hasAny reports whether any watch is registered.
func (ws *watchSet) hasAny() bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.entries) > 0
}

// notify fires the watches on key whose seen value differs from value.
func (ws *watchSet) notify(key string, value []byte, exists bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	m := ws.entries[key]
	for e := range m {
		if changed(e.seen, e.exists, value, exists) {
			delete(m, e)
			// A watch cancelled concurrently returns its count itself.
			if e.w.Fire(nil) {
				ws.count--
			}
		}
	}
	if m != nil && len(m) == 0 {
		delete(ws.entries, key)
	}
}

// failAll fails every registered watch with err.
func (ws *watchSet) failAll(err error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, m := range ws.entries {
		for e := range m {
			if e.w.Fire(err) {
				ws.count--
			}
		}
	}
	ws.entries = make(map[string]map[*watchEntry]struct{})
}

func changed(a []byte, aok bool, b []byte, bok bool) bool {
	return aok != bok || !bytes.Equal(a, b)
}
