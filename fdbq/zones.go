package fdbq

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// maxZoneScan bounds the zone marks one read of a type's zone index takes.
// A type with more zones with ready jobs is read a part at a time, each
// read beginning where the last ended (typeZones.cursor). A variable for
// tests.
var maxZoneScan = 4096

// maxZoneTries bounds the zones one accept transaction reads.
const maxZoneTries = 8

// maxLimitWatches bounds the watches of running counts that an idle accept
// held back by limits sets; beyond it, it looks again after
// limitRecheck.
const (
	maxLimitWatches = 16
	limitRecheck    = 100 * time.Millisecond
)

// zoneRefreshGap is how soon a type's zone index is read again when an
// accept that has jobs in view sees the watch key move: while the cached
// zones give jobs, a burst of zone activations costs one read of the
// index per gap, not one per accept. An accept that finds nothing reads
// the index again at once.
const zoneRefreshGap = 2 * time.Millisecond

// typeZones is what an accept knows of a type's zones with ready jobs: a
// read of the type's zone index, and the value the type's watch key had
// then. Every mark of a zone bumps the watch key, so while it has that
// value, no zone was marked since (zones may have been emptied: an accept
// that finds one so drops it). Shared by the Queue's accepts; never
// modified once made.
type typeZones struct {
	ver  []byte
	at   time.Time
	keys []string         // the fairness keys with marked zones
	cum  []int            // cumulative weights of keys
	of   map[string][]int // the marked shards of each key
	// tokens are the marks' tokens (newMarkToken), as of.
	tokens map[string][]uint64
	// partial: the index held more marks than one read takes, and this
	// is a part of it: the next read takes the next part, from after
	// cursor (nil: from the beginning again), and no part is current.
	partial bool
	cursor  []byte
}

// zoneCache holds each type's typeZones.
type zoneCache struct {
	mu    sync.Mutex
	types map[string]*typeZones
}

func (c *zoneCache) get(typ string) *typeZones {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.types[typ]
}

func (c *zoneCache) set(typ string, z *typeZones) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.types == nil {
		c.types = map[string]*typeZones{}
	}
	if len(c.types) >= maxCachedTypes {
		clear(c.types)
	}
	c.types[typ] = z
}

// forget drops what is known of typ's zones: an accept found one empty
// and clears its mark, which a transaction that fails leaves as it was,
// so the next accept reads the index again.
func (c *zoneCache) forget(typ string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.types, typ)
}

func last(cum []int) int {
	if len(cum) == 0 {
		return 0
	}
	return cum[len(cum)-1]
}

// zonesOf returns what the accept knows of typ's zones with ready jobs,
// and whether it is current: the whole index, read at the watch key's
// value in snap. It reads the zone index again (without conflicts) when
// the watch key moved since the cached read, unless that read has zones
// to offer, is younger than zoneRefreshGap and fresh does not ask for a
// read; and it reads the next part of an index too large for one read.
func (q *Queue) zonesOf(snap kv.ReadTx, typ string, s TypeSettings, fresh bool) (*typeZones, bool, error) {
	ver, err := snap.Get(q.k.watch(typ))
	if err != nil {
		return nil, false, err
	}
	tz := q.zones.get(typ)
	if tz != nil && bytes.Equal(tz.ver, ver) && !tz.partial {
		return tz, true, nil
	}
	if tz != nil && !fresh && len(tz.keys) > 0 && q.now().Sub(tz.at) < zoneRefreshGap {
		return tz, false, nil
	}
	r := q.k.zonesType(typ).Range()
	fromStart := true
	if tz != nil && tz.partial && tz.cursor != nil {
		r.Begin, fromStart = kv.KeyAfter(tz.cursor), false
	}
	kvs, err := snap.GetRange(r, kv.RangeOptions{Limit: maxZoneScan})
	if err != nil {
		return nil, false, err
	}
	n := &typeZones{ver: append([]byte(nil), ver...), at: q.now(), of: map[string][]int{}, tokens: map[string][]uint64{}}
	for _, e := range kvs {
		z, ok := q.k.parseZoneMark(typ, e.Key)
		if !ok {
			continue // not a key fdbq writes: no zone to read
		}
		if _, seen := n.of[z.key]; !seen {
			n.keys = append(n.keys, z.key)
			n.cum = append(n.cum, last(n.cum)+s.policy(z.key).weight())
		}
		n.of[z.key] = append(n.of[z.key], z.shard)
		n.tokens[z.key] = append(n.tokens[z.key], markToken(e.Value))
	}
	if len(kvs) == maxZoneScan {
		n.partial, n.cursor = true, kvs[len(kvs)-1].Key
	} else if !fromStart {
		n.partial = true // the last part: the next read begins again
	}
	q.zones.set(typ, n)
	return n, !n.partial, nil
}

// choose picks a zone of tz at random: a key with probability in
// proportion to its weight, then one of its marked shards, passing over
// the keys skipKey names and the zones in skipZones. It reports false
// when none is left.
func (tz *typeZones) choose(intn func(int) int, skipKey func(string) bool, skipZones map[zone]bool) (zone, bool) {
	total := last(tz.cum)
	for range 4 {
		if total == 0 {
			break
		}
		x := intn(total)
		i := 0
		for tz.cum[i] <= x {
			i++
		}
		if z, ok := tz.shardOf(intn, tz.keys[i], skipKey, skipZones); ok {
			return z, true
		}
	}
	// Most are passed over: go through them all, from a random place.
	if len(tz.keys) == 0 {
		return zone{}, false
	}
	start := intn(len(tz.keys))
	for j := range tz.keys {
		if z, ok := tz.shardOf(intn, tz.keys[(start+j)%len(tz.keys)], skipKey, skipZones); ok {
			return z, true
		}
	}
	return zone{}, false
}

// shardOf picks one of key's marked shards not in skipZones.
func (tz *typeZones) shardOf(intn func(int) int, key string, skipKey func(string) bool, skipZones map[zone]bool) (zone, bool) {
	if skipKey(key) {
		return zone{}, false
	}
	shards := tz.of[key]
	if len(shards) == 0 {
		return zone{}, false
	}
	start := intn(len(shards))
	for j := range shards {
		z := zone{key: key, shard: shards[(start+j)%len(shards)]}
		if !skipZones[z] {
			return z, true
		}
	}
	return zone{}, false
}

// keyAllowance is how many more jobs of one fairness key an accept may
// start, read in the accept's transaction with conflicts, so that two
// accepts that together would pass a bound cannot both commit.
type keyAllowance struct {
	left int
	// window and started are the key's rate window as read (MaxStarts).
	window, started int64
	// watch: the running counts to watch when the key is held back by
	// MaxRunning; until is when its rate window ends, when that holds it.
	watch [][]byte
	until int64
	rated bool
}

// allowance reads what the key's policy p leaves of its bounds at now.
func (q *Queue) allowance(tx kv.Tx, typ, key string, p KeyPolicy, now int64) (*keyAllowance, error) {
	a := &keyAllowance{left: maxCount}
	if p.MaxRunning > 0 {
		running, nonzero, err := sumRange(tx, q.k.keyRunningRange(typ, key))
		if err != nil {
			return nil, err
		}
		a.left = min(a.left, p.MaxRunning-int(running))
		if a.left <= 0 {
			a.watch = nonzero
		}
	}
	if p.MaxStarts > 0 {
		b, err := tx.Get(q.k.keyStarts(typ, key))
		if err != nil {
			return nil, err
		}
		if start, started, ok := decodeStarts(b); ok {
			a.window, a.started = start, started
		}
		a.rated = true
		per := p.Per.Milliseconds()
		if windowEnded(a.window, per, now) {
			// The window ended (or was opened by a clock far ahead of
			// this one, see windowEnded): a new one opens with this
			// accept.
			a.window, a.started = now, 0
		}
		a.left = min(a.left, p.MaxStarts-int(a.started))
		if p.MaxStarts-int(a.started) <= 0 {
			a.until = a.window + per
		}
	}
	a.left = max(a.left, 0)
	return a, nil
}

// started records n starts of the key in its rate window.
func (q *Queue) started(tx kv.Tx, typ, key string, a *keyAllowance, n int) {
	a.left -= n
	if n == 0 || !a.rated {
		return
	}
	a.started += int64(n)
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], uint64(a.window))
	binary.LittleEndian.PutUint64(b[8:], uint64(a.started))
	tx.Set(q.k.keyStarts(typ, key), b[:])
}

// sumRange sums the int64 counters of r, read with a conflict, and returns
// the keys of those not zero.
func sumRange(tx kv.ReadTx, r kv.Range) (int64, [][]byte, error) {
	kvs, err := tx.GetRange(r, kv.RangeOptions{})
	if err != nil {
		return 0, nil, err
	}
	var sum int64
	var nonzero [][]byte
	for _, e := range kvs {
		if v := kv.DecodeInt64(e.Value); v != 0 {
			sum += v
			nonzero = append(nonzero, e.Key)
		}
	}
	return sum, nonzero, nil
}

// allowed returns the candidates of cands that the bounds of their keys
// let the accept start, in index order: of a key held to n more starts,
// its first n. A key held back altogether joins skipKeys, and res learns
// what would free it (limitWatch, next). allow keeps what each key's
// bounds leave, read once per transaction.
func (q *Queue) allowed(tx kv.Tx, typ string, s TypeSettings, cands []candidate, allow map[string]*keyAllowance,
	skipKeys map[string]bool, now int64, res *acceptResult) ([]candidate, error) {
	// out stays cands until a candidate is left out: most accepts leave
	// none, and then copy nothing.
	out, copied := cands, false
	var taken map[string]int
	for i, c := range cands {
		keep := true
		if p := s.policy(c.zone.key); c.zone.key != "" && p.limited() {
			a := allow[c.zone.key]
			if a == nil {
				var err error
				if a, err = q.allowance(tx, typ, c.zone.key, p, now); err != nil {
					return nil, err
				}
				allow[c.zone.key] = a
				if a.left == 0 {
					q.heldBack(c.zone.key, a, skipKeys, res)
				}
			}
			if taken == nil {
				taken = map[string]int{}
			}
			if keep = taken[c.zone.key] < a.left; keep {
				taken[c.zone.key]++
			}
		}
		switch {
		case !keep && !copied:
			out, copied = append(make([]candidate, 0, len(cands)), cands[:i]...), true
		case keep && copied:
			out = append(out, c)
		}
	}
	return out, nil
}

// countStarts counts the leases just taken against their keys' bounds.
func (q *Queue) countStarts(tx kv.Tx, typ string, leases []*Lease, allow map[string]*keyAllowance, skipKeys map[string]bool) {
	n := map[string]int{}
	for _, l := range leases {
		if allow[l.Job.Key] != nil {
			n[l.Job.Key]++
		}
	}
	for key, c := range n {
		a := allow[key]
		q.started(tx, typ, key, a, c)
		if a.left <= 0 {
			skipKeys[key] = true
		}
	}
}

// keyZones are the zones of one fairness key that an accept reads
// together: of a key spread over more than one zone, every zone marked in
// the accept's snapshot, whose first entries it merges (acceptWindow), so
// that priority and order hold across the key's zones as within one.
type keyZones struct {
	key    string
	shards []int
}

// zones lists the zones of kz.
func (kz keyZones) zones() []zone {
	out := make([]zone, len(kz.shards))
	for i, sh := range kz.shards {
		out[i] = zone{key: kz.key, shard: sh}
	}
	return out
}

// markedShards reads, in the accept's snapshot, the shards of key whose
// zones are marked, passing over those in skipZones. Marks change with
// the zones' entries in the same transactions (markZone, acceptFrom), so
// these are the key's zones with ready entries at the snapshot, whatever
// the Queue's cached view of the zone index says.
func (q *Queue) markedShards(snap kv.ReadTx, typ, key string, skipZones map[zone]bool) ([]int, error) {
	kvs, err := snap.GetRange(q.k.zonesType(typ).Sub(key).Range(), kv.RangeOptions{Limit: MaxZones + 1})
	if err != nil {
		return nil, err
	}
	var shards []int
	for _, e := range kvs {
		z, ok := q.k.parseZoneMark(typ, e.Key)
		if !ok || z.key != key || skipZones[z] {
			continue // not a key fdbq writes, or passed over
		}
		shards = append(shards, z.shard)
	}
	return shards, nil
}

// ReadyZones is a read of the zone index of a type, the zones with
// ready jobs (see Fairness), and a watch of the type's watch key set in
// the same transaction, which fires when a zone is marked after the read
// (or the type's settings change, or a job is scheduled for later).
type ReadyZones struct {
	tz    *typeZones
	Watch kv.Watch
}

// Keys are the fairness keys with marked zones, of the index's first
// part when it holds more marks than one read takes (Partial).
func (r *ReadyZones) Keys() []string { return slices.Clone(r.tz.keys) }

// Partial reports an index larger than one read.
func (r *ReadyZones) Partial() bool { return r.tz.partial }

// Fresh returns the keys every zone of which that is marked in r was not
// marked in prev, or was marked again since (its mark's token differs):
// the keys whose jobs became ready between the two reads and found their
// zones empty. A zone's mark stays while its jobs are taken, until an
// accept finds it empty, so a key worked all along, with a backlog, is
// not among them, even while jobs added to it one at a time mark again
// the zones the accepts empty: its other zones keep their marks. With prev
// nil, or either read partial, it returns none.
func (r *ReadyZones) Fresh(prev *ReadyZones) []string {
	if prev == nil || r.tz == prev.tz || r.tz.partial || prev.tz.partial {
		return nil
	}
	var out []string
	for _, key := range r.tz.keys {
		// Both lists of shards are in index order, ascending.
		was, wasTok := prev.tz.of[key], prev.tz.tokens[key]
		j, fresh := 0, true
		for i, sh := range r.tz.of[key] {
			for j < len(was) && was[j] < sh {
				j++
			}
			if j < len(was) && was[j] == sh && wasTok[j] == r.tz.tokens[key][i] {
				fresh = false // marked in both reads, by the same marking
				break
			}
		}
		if fresh {
			out = append(out, key)
		}
	}
	return out
}

// ReadyZones reads the zone index of typ and watches for a zone marked
// after. It shares the Queue's read of the index with its accepts: it
// reads the index only when a zone was marked since the last read, and
// an accept after it then reads none.
func (q *Queue) ReadyZones(ctx context.Context, typ string) (*ReadyZones, error) {
	if err := checkName("type name", typ); err != nil {
		return nil, err
	}
	return kv.Transact(ctx, q.db, func(tx kv.Tx) (*ReadyZones, error) {
		s, err := q.settings(tx, typ)
		if err != nil {
			return nil, err
		}
		tz, _, err := q.zonesOf(tx.Snapshot(), typ, s, true)
		if err != nil {
			return nil, err
		}
		return &ReadyZones{tz: tz, Watch: tx.Watch(q.k.watch(typ))}, nil
	})
}

// decodeStarts reads a key's rate window (P, 17, type, key): when it
// opened (ms) and the jobs started in it; ok false for a value that is
// not one.
func decodeStarts(b []byte) (start, started int64, ok bool) {
	if len(b) != 16 {
		return 0, 0, false
	}
	return int64(binary.LittleEndian.Uint64(b)), int64(binary.LittleEndian.Uint64(b[8:])), true
}

// windowEnded reports whether a rate window of per ms opened at start no
// longer holds at now: it ended, or a clock further ahead of this one than
// windowSkew(per) opened it. A window opened by a clock ahead by less holds
// until it ends by this clock, its starts counted: were it taken for ended
// as soon as this clock is a window behind, two processes whose clocks
// disagree by more than per would each open a new window after the
// other's, and the bound would not hold at all.
func windowEnded(start, per, now int64) bool {
	return now >= start+per || now < start-windowSkew(per)
}

// windowSkew is how far ahead of this one a clock that opened a rate window
// of per ms may be for the window to hold: per, and at least a minute. A
// window opened by a clock further ahead is taken for the work of a clock
// gone wrong, and a new one opens rather than hold the key back until this
// clock reaches it.
func windowSkew(per int64) int64 { return max(per, time.Minute.Milliseconds()) }
