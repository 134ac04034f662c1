package fdbq

import (
	"sync"
	"sync/atomic"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// Key space tags under the queue's prefix. See doc.go for what each holds.
const (
	tagJob      = 1
	tagPending  = 2
	tagWatch    = 3
	tagChange   = 4
	tagActive   = 5
	tagFinished = 6
	tagCount    = 7
	tagType     = 8
	tagClaim    = 9
)

// keys builds the queue's keys under one prefix.
type keys struct {
	root tuple.Subspace
	// perType caches each type's counter keys, which every state change
	// writes (a *typeKeys per type name, for up to maxCachedTypes types).
	perType *sync.Map
	cached  *atomic.Int32
}

func newKeys(root tuple.Subspace) keys {
	return keys{root: root, perType: &sync.Map{}, cached: &atomic.Int32{}}
}

// maxCachedTypes bounds the cache of per-type keys: type names come from
// callers, and a caller that makes them up must not grow it without end.
const maxCachedTypes = 1024

// typeKeys are one type's counter keys. They are shared: never modify
// them.
type typeKeys struct {
	watch, change []byte
	count         map[State][]byte
}

func (k keys) of(typ string) *typeKeys {
	if v, ok := k.perType.Load(typ); ok {
		return v.(*typeKeys)
	}
	tk := &typeKeys{
		watch:  k.root.MustPack(tuple.Tuple{tagWatch, typ}),
		change: k.root.MustPack(tuple.Tuple{tagChange, typ}),
		count:  map[State][]byte{},
	}
	for _, s := range []State{Pending, Running, Finished} {
		tk.count[s] = k.root.MustPack(tuple.Tuple{tagCount, typ, string(s)})
	}
	if k.cached.Load() < maxCachedTypes {
		if v, loaded := k.perType.LoadOrStore(typ, tk); loaded {
			return v.(*typeKeys)
		}
		k.cached.Add(1)
	}
	return tk
}

func (k keys) job(typ, id string) []byte { return k.root.MustPack(tuple.Tuple{tagJob, typ, id}) }

func (k keys) pending(typ string, priority int, schedMs int64, id string) []byte {
	return k.root.MustPack(tuple.Tuple{tagPending, typ, -priority, schedMs, id})
}

// pendingType is every pending entry of a type, highest priority first.
func (k keys) pendingType(typ string) tuple.Subspace { return k.root.Sub(tagPending, typ) }

// pendingBand is the pending entries of one priority.
func (k keys) pendingBand(typ string, priority int) tuple.Subspace {
	return k.root.Sub(tagPending, typ, -priority)
}

func (k keys) watch(typ string) []byte  { return k.of(typ).watch }
func (k keys) change(typ string) []byte { return k.of(typ).change }

func (k keys) active(typ string, expiresMs int64, id string) []byte {
	return k.root.MustPack(tuple.Tuple{tagActive, typ, expiresMs, id})
}

func (k keys) activeType(typ string) tuple.Subspace { return k.root.Sub(tagActive, typ) }

func (k keys) finished(typ string, finishedMs int64, id string) []byte {
	return k.root.MustPack(tuple.Tuple{tagFinished, typ, finishedMs, id})
}

func (k keys) finishedType(typ string) tuple.Subspace { return k.root.Sub(tagFinished, typ) }

func (k keys) count(typ string, s State) []byte {
	if b, ok := k.of(typ).count[s]; ok {
		return b
	}
	return k.root.MustPack(tuple.Tuple{tagCount, typ, string(s)})
}

func (k keys) typ(name string) []byte { return k.root.MustPack(tuple.Tuple{tagType, name}) }

func (k keys) types() tuple.Subspace { return k.root.Sub(tagType) }

func (k keys) claim(ms int64, lock string) []byte {
	return k.root.MustPack(tuple.Tuple{tagClaim, ms, lock})
}

func (k keys) claims() tuple.Subspace { return k.root.Sub(tagClaim) }

// rangeUpTo is the range of keys of sub whose next element is an integer
// at most max: (sub, ≤max, …).
func rangeUpTo(sub tuple.Subspace, max int64) kv.Range {
	r := sub.Range()
	return kv.Range{Begin: r.Begin, End: sub.MustPack(tuple.Tuple{max + 1})}
}
