package embedded

import (
	"bytes"
	"sort"
	"unsafe"

	"github.com/google/btree"

	"github.com/jobstage/jobstage/kv"
)

// opKind is what a transaction's write buffer holds for one key.
type opKind uint8

const (
	opSet     opKind = iota // value is the new value
	opClear                 // the key is cleared
	opAtomic                // chain of atomics over the committed value, unknown until commit
	opVSValue               // versionstamped value: value holds the placeholder and offset
)

type atomicOp struct {
	op    kv.MutationType
	param []byte
}

// bufEntry is the buffered write of one key. Later writes replace or extend
// it, so the buffer holds the net effect of the transaction on each key.
type bufEntry struct {
	key   string
	kind  opKind
	value []byte
	chain []atomicOp
}

func entryLess(a, b *bufEntry) bool { return a.key < b.key }

// writeBuffer holds a transaction's writes until commit. Its net effect is:
// first clear every range in cleared, then apply every entry, then set the
// versionstamped keys. ClearRange removes the entries it covers, so an entry
// always postdates any cleared range it falls in and the order above matches
// the order the writes were made in.
type writeBuffer struct {
	entries *btree.BTreeG[*bufEntry]
	cleared []kv.Range // sorted, disjoint, not adjacent
	vsKeys  []kv.KeyValue
	// probe is the search key of get, kept so that a lookup allocates
	// nothing (the buffer is used under its transaction's lock).
	probe bufEntry
	// atomics indexes the entries that are chains of atomics by key: a
	// transaction that counts many jobs adds to the same few counters
	// again and again, and a map finds them faster than the tree.
	atomics map[string]*bufEntry
}

func newWriteBuffer() *writeBuffer {
	// The tree is made on the first write: most transactions of the jobs
	// layer write a handful of keys, and btree.NewG preallocates.
	return &writeBuffer{}
}

func (b *writeBuffer) empty() bool {
	return b.len() == 0 && len(b.cleared) == 0 && len(b.vsKeys) == 0
}

func (b *writeBuffer) len() int {
	if b.entries == nil {
		return 0
	}
	return b.entries.Len()
}

func (b *writeBuffer) get(key []byte) *bufEntry {
	if b.entries == nil {
		return nil
	}
	if e, ok := b.atomics[string(key)]; ok {
		return e
	}
	// The probe borrows key's bytes only for the search.
	b.probe.key = unsafe.String(unsafe.SliceData(key), len(key))
	e, ok := b.entries.Get(&b.probe)
	b.probe.key = ""
	if !ok {
		return nil
	}
	return e
}

func (b *writeBuffer) put(e *bufEntry) {
	if b.entries == nil {
		b.entries = btree.NewWithFreeListG(8, entryLess, btree.NewFreeListG[*bufEntry](0))
	}
	b.entries.ReplaceOrInsert(e)
	switch {
	case e.kind == opAtomic:
		if b.atomics == nil {
			b.atomics = make(map[string]*bufEntry)
		}
		b.atomics[e.key] = e
	case b.atomics != nil:
		delete(b.atomics, e.key)
	}
}

// ascend calls fn for every entry in key order.
func (b *writeBuffer) ascend(fn func(e *bufEntry) bool) {
	if b.entries != nil {
		b.entries.Ascend(fn)
	}
}

// isCleared reports whether key lies in a range cleared by the transaction.
func (b *writeBuffer) isCleared(key []byte) bool {
	_, ok := b.clearedRangeOf(key)
	return ok
}

// clearedRangeOf returns the cleared range that holds key.
func (b *writeBuffer) clearedRangeOf(key []byte) (kv.Range, bool) {
	i := sort.Search(len(b.cleared), func(i int) bool { return bytes.Compare(b.cleared[i].End, key) > 0 })
	if i < len(b.cleared) && bytes.Compare(b.cleared[i].Begin, key) <= 0 {
		return b.cleared[i], true
	}
	return kv.Range{}, false
}

// clearRange drops the entries in r and records r as cleared.
func (b *writeBuffer) clearRange(r kv.Range) {
	for _, e := range b.rangeEntries(r, false) {
		b.entries.Delete(e)
		delete(b.atomics, e.key)
	}
	// Merge r into the sorted, disjoint list.
	out := make([]kv.Range, 0, len(b.cleared)+1)
	nr := kv.Range{Begin: r.Begin, End: r.End}
	placed := false
	for _, c := range b.cleared {
		switch {
		case bytes.Compare(c.End, nr.Begin) < 0:
			out = append(out, c)
		case bytes.Compare(nr.End, c.Begin) < 0:
			if !placed {
				out = append(out, nr)
				placed = true
			}
			out = append(out, c)
		default: // overlapping or adjacent: absorb
			if bytes.Compare(c.Begin, nr.Begin) < 0 {
				nr.Begin = c.Begin
			}
			if bytes.Compare(c.End, nr.End) > 0 {
				nr.End = c.End
			}
		}
	}
	if !placed {
		out = append(out, nr)
	}
	b.cleared = out
}

// rangeEntries returns the entries in r in key order (descending when
// reverse).
func (b *writeBuffer) rangeEntries(r kv.Range, reverse bool) []*bufEntry {
	var out []*bufEntry
	if b.entries == nil {
		return nil
	}
	collect := func(e *bufEntry) bool { out = append(out, e); return true }
	if !reverse {
		b.entries.AscendRange(&bufEntry{key: string(r.Begin)}, &bufEntry{key: string(r.End)}, collect)
		return out
	}
	// DescendRange is (lessOrEqual, greaterThan]; the end is exclusive, so
	// start below it.
	b.entries.DescendLessOrEqual(&bufEntry{key: string(r.End)}, func(e *bufEntry) bool {
		if e.key >= string(r.End) {
			return true
		}
		if e.key < string(r.Begin) {
			return false
		}
		out = append(out, e)
		return true
	})
	return out
}

// resolve returns the value of e applied over base.
func (e *bufEntry) resolve(base []byte, exists bool) ([]byte, bool) {
	switch e.kind {
	case opSet:
		return e.value, true
	case opClear:
		return nil, false
	case opAtomic:
		v, ok := base, exists
		for _, a := range e.chain {
			v, ok = kv.ApplyMutation(a.op, v, ok, a.param)
		}
		return v, ok
	}
	return nil, false
}
