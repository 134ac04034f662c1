package fdbq

import (
	"bytes"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// Key space tags under the queue's prefix. See doc.go for what each holds.
const (
	tagJob     = 1
	tagPending = 2
	tagWatch   = 3
	tagChange  = 4
	// tagLegacyActive: running jobs by activity deadline, as written
	// before entries were keyed by version (records of format 1); the
	// monitor moves them to tagActive's index.
	tagLegacyActive = 5
	tagFinished     = 6
	tagCount        = 7
	tagType         = 8
	tagClaim        = 9
	tagRegistry     = 10
	// tagSchedule: pending jobs not yet due, by scheduled time.
	tagSchedule = 11
	// tagActive: running jobs by the read version of their last renewal.
	tagActive = 12
	// tagStamp: the versionstamp of a renewing transaction.
	tagStamp = 13
	// tagLayout: the store's layout version (Layout).
	tagLayout = 14
	// tagZones: the index of a type's zones that have ready jobs.
	tagZones = 15
	// tagKeyRunning: running jobs per fairness key, by shard.
	tagKeyRunning = 16
	// tagKeyStarts: a fairness key's starts in its rate window.
	tagKeyStarts = 17
	// tagInterest: how many processes wait on a type's change key;
	// tagInterested: each of them.
	tagInterest   = 18
	tagInterested = 19
	// tagUnique: the unique index, a unique job's digest to its id.
	tagUnique = 20
	// tagSchedules: the schedules of periodic jobs, by name;
	// tagSchedulesChange: the key their changes bump.
	tagSchedules       = 21
	tagSchedulesChange = 22
	// tagWorkflows: workflows, by id: each one's record, its jobs'
	// nodes, its dependency edges and its counter of jobs done.
	tagWorkflows = 23
	// tagEvents: the event log of a type's job changes, by versionstamp;
	// tagEventsHeld: how many of the type's interest entries are held
	// for its event log; tagEventsFloor: the position at and before which
	// the log may miss changes.
	tagEvents      = 24
	tagEventsHeld  = 25
	tagEventsFloor = 26
	// tagHistory: a type's counts of ended attempts, by minute, kind and
	// lane (see History).
	tagHistory = 27
)

// zone is where a pending job of a type waits: its fairness key (Job.Key,
// "" for none) and a shard of that key, a hash of the job's id modulo the
// key's zone count when the job was added (TypeSettings.Zones). Each zone
// has its own range of the ready index, far from the others' once the
// store splits it; acceptors choose among the zones that have ready jobs
// (see Fairness in the package doc).
type zone struct {
	key   string
	shard int
}

// shardOf is the shard of job id among n: a hash of the id (FNV-1a).
func shardOf(id string, n int) int {
	if n <= 1 {
		return 0
	}
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return int(h % uint32(n))
}

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

// typeKeys are one type's counter keys, and the prefixes of its job and
// index keys, to which appendString and appendInt add the rest of the
// tuple. They are shared: never modify them.
type typeKeys struct {
	watch, change []byte
	count         map[State][]byte
	job, pending  []byte
	active, done  []byte
	legacyActive  []byte
	stamp         []byte
	scheduled     []byte
	zones         []byte
	history       []byte
}

func (k keys) of(typ string) *typeKeys {
	if v, ok := k.perType.Load(typ); ok {
		return v.(*typeKeys)
	}
	tk := &typeKeys{
		watch:        k.root.MustPack(tuple.Tuple{tagWatch, typ}),
		change:       k.root.MustPack(tuple.Tuple{tagChange, typ}),
		count:        map[State][]byte{},
		job:          k.root.MustPack(tuple.Tuple{tagJob, typ}),
		pending:      k.root.MustPack(tuple.Tuple{tagPending, typ}),
		active:       k.root.MustPack(tuple.Tuple{tagActive, typ}),
		legacyActive: k.root.MustPack(tuple.Tuple{tagLegacyActive, typ}),
		stamp:        k.root.MustPack(tuple.Tuple{tagStamp, typ}),
		done:         k.root.MustPack(tuple.Tuple{tagFinished, typ}),
	}
	tk.scheduled = k.root.MustPack(tuple.Tuple{tagSchedule, typ})
	tk.zones = k.root.MustPack(tuple.Tuple{tagZones, typ})
	tk.history = k.root.MustPack(tuple.Tuple{tagHistory, typ})
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

// The keys of jobs and their index entries are the packed tuples below,
// built as the type's packed prefix followed by the packed rest: packing
// a tuple is concatenating its elements' encodings. Every state change
// builds several, and packing the whole tuple cost more than the change.

func (k keys) job(typ, id string) []byte {
	p := k.of(typ).job
	return appendString(append(make([]byte, 0, len(p)+len(id)+2), p...), id)
}

// pending is a job's key in the ready index (doc.go), where pending jobs
// that were due when indexed wait in their zone by priority.
func (k keys) pending(typ string, z zone, priority int, schedMs int64, id string) []byte {
	p := k.of(typ).pending
	b := append(make([]byte, 0, len(p)+len(z.key)+len(id)+30), p...)
	b = appendInt(appendString(b, z.key), int64(z.shard))
	return appendString(appendInt(appendInt(b, -int64(priority)), schedMs), id)
}

// scheduled is a job's key in the scheduled index, where pending jobs that
// were not due when indexed wait by scheduled time; the zone the job goes
// to once due follows the time and priority.
func (k keys) scheduled(typ string, z zone, priority int, schedMs int64, id string) []byte {
	p := k.of(typ).scheduled
	b := append(make([]byte, 0, len(p)+len(z.key)+len(id)+30), p...)
	b = appendInt(appendInt(b, schedMs), -int64(priority))
	return appendString(appendInt(appendString(b, z.key), int64(z.shard)), id)
}

// zoneReady is a zone's range of the ready index.
func (k keys) zoneReady(typ string, z zone) tuple.Subspace {
	return k.root.Sub(tagPending, typ, z.key, int64(z.shard))
}

// zoneMark is a zone's key in the index of zones with ready jobs.
func (k keys) zoneMark(typ string, z zone) []byte {
	p := k.of(typ).zones
	b := append(make([]byte, 0, len(p)+len(z.key)+12), p...)
	return appendInt(appendString(b, z.key), int64(z.shard))
}

// zonesType is the index of the type's zones that have ready jobs.
func (k keys) zonesType(typ string) tuple.Subspace { return k.root.Sub(tagZones, typ) }

// parseZoneMark reads the zone of a key of zonesType.
func (k keys) parseZoneMark(typ string, key []byte) (zone, bool) {
	p := k.of(typ).zones
	if !bytes.HasPrefix(key, p) {
		return zone{}, false
	}
	name, b, ok := readString(key[len(p):])
	if !ok {
		return zone{}, false
	}
	shard, b, ok := readInt(b)
	if !ok || len(b) != 0 || shard < 0 || shard >= MaxZones {
		return zone{}, false
	}
	return zone{key: name, shard: int(shard)}, true
}

// keyRunning is the shard of a fairness key's count of running jobs that
// jobs of zone z add to.
func (k keys) keyRunning(typ string, z zone) []byte {
	return k.root.MustPack(tuple.Tuple{tagKeyRunning, typ, z.key, int64(z.shard)})
}

// keyRunningRange is the range whose keys sum to a fairness key's count
// of running jobs.
func (k keys) keyRunningRange(typ, key string) kv.Range {
	return k.root.Sub(tagKeyRunning, typ, key).Range()
}

// keyStarts holds a fairness key's rate window: its start and the jobs
// started in it.
// interest is the count of the processes that hold an interest in a
// type's changes, (P, 18, type), and interested their entries, (P, 19,
// type, holder) = the holder's expiry (see interests).
func (k keys) interest(typ string) []byte {
	return k.root.MustPack(tuple.Tuple{tagInterest, typ})
}

func (k keys) interested(typ string) tuple.Subspace {
	return k.root.Sub(tagInterested, typ)
}

func (k keys) keyStarts(typ, key string) []byte {
	return k.root.MustPack(tuple.Tuple{tagKeyStarts, typ, key})
}

// indexKey is (prefix…, ms, id).
func indexKey(prefix []byte, ms int64, id string) []byte {
	b := append(make([]byte, 0, len(prefix)+len(id)+11), prefix...)
	return appendString(appendInt(b, ms), id)
}

// appendString appends s as a tuple element: 0x02, s with each 0x00
// escaped as 0x00 0xff, and a 0x00 terminator.
func appendString(b []byte, s string) []byte {
	b = append(b, 0x02)
	for i := 0; i < len(s); i++ {
		b = append(b, s[i])
		if s[i] == 0x00 {
			b = append(b, 0xff)
		}
	}
	return append(b, 0x00)
}

// appendInt appends v as a tuple element: 0x14 plus (or, negative, minus)
// its length in bytes, then its magnitude big-endian (negative: the one's
// complement of it).
func appendInt(b []byte, v int64) []byte {
	mag := uint64(v)
	if v < 0 {
		mag = -uint64(v) // exact for every int64, MinInt64 too
	}
	n := (bits.Len64(mag) + 7) / 8
	if v < 0 {
		b = append(b, byte(0x14-n))
		mag = ^mag
	} else {
		b = append(b, byte(0x14+n))
	}
	for i := n - 1; i >= 0; i-- {
		b = append(b, byte(mag>>(8*i)))
	}
	return b
}

// pendingType is a type's ready index, highest priority first.
func (k keys) pendingType(typ string) tuple.Subspace { return k.root.Sub(tagPending, typ) }

// scheduledType is a type's scheduled index, earliest first.
func (k keys) scheduledType(typ string) tuple.Subspace { return k.root.Sub(tagSchedule, typ) }

// pendingBand is a zone's ready entries of one priority.
func (k keys) pendingBand(typ string, z zone, priority int) tuple.Subspace {
	return k.root.Sub(tagPending, typ, z.key, int64(z.shard), -priority)
}

func (k keys) watch(typ string) []byte  { return k.of(typ).watch }
func (k keys) change(typ string) []byte { return k.of(typ).change }

// activityLanes is how many ranges a type's activity index and renewal
// stamps are spread over. Both are keyed by read version, so within one
// range every write lands after the last, on the range's last shard:
// spread over lanes (a hash of the job's id; a random token's residue for
// a stamp), a type's renewals land on activityLanes shards at once.
const activityLanes = 16

// laneOf is the lane of job id's activity entry.
func laneOf(id string) int { return shardOf(id, activityLanes) }

// group is a lane's entries of one activity timeout: the unit the monitor
// reads, in the order of the renewals' read versions.
type group struct {
	lane      int
	timeoutMs int64
}

// active is a running job's activity entry: (P, 12, type, lane, timeout_ms,
// version, id), where version is the read version of the transaction that
// last renewed its activity, timeout_ms the activity timeout it gave and
// lane laneOf(id).
func (k keys) active(typ string, timeoutMs, version int64, id string) []byte {
	p := k.of(typ).active
	b := append(make([]byte, 0, len(p)+len(id)+22), p...)
	return appendString(appendInt(appendInt(appendInt(b, int64(laneOf(id))), timeoutMs), version), id)
}

func (k keys) activeType(typ string) tuple.Subspace { return k.root.Sub(tagActive, typ) }

// stampLane is the lane of the stamp of token.
func stampLane(token int64) int64 { return token % activityLanes }

// stamp holds the versionstamp of one renewing transaction's commit
// (Accept, Heartbeat): keyed by the lane its token names, its read
// version, which keys the activity entries it wrote, and the token, which
// those entries hold, so one accept of many jobs writes one. It is apart
// from the entries so that the index reads as any other (a transaction
// cannot read a versionstamped value it wrote: accessed_unreadable). The
// monitor clears the stamps below its entries' oldest read version.
func (k keys) stamp(typ string, version, token int64) []byte {
	p := k.of(typ).stamp
	return appendInt(appendInt(appendInt(append(make([]byte, 0, len(p)+20), p...), stampLane(token)), version), token)
}

// stampsBelow is, for each lane, the range of the stamps of read versions
// before version.
func (k keys) stampsBelow(typ string, version int64) []kv.Range {
	rs := make([]kv.Range, activityLanes)
	for lane := range rs {
		sub := k.root.Sub(tagStamp, typ, int64(lane))
		rs[lane] = kv.Range{Begin: sub.Range().Begin, End: sub.MustPack(tuple.Tuple{version})}
	}
	return rs
}

func (k keys) stampType(typ string) tuple.Subspace { return k.root.Sub(tagStamp, typ) }

// activeGroup is the activity entries of group g of a type.
func (k keys) activeGroup(typ string, g group) tuple.Subspace {
	return k.root.Sub(tagActive, typ, int64(g.lane), g.timeoutMs)
}

// legacyActive is the activity entry of a running job written before
// entries were keyed by version: (P, 5, type, expires_ms, id).
func (k keys) legacyActive(typ string, expiresMs int64, id string) []byte {
	return indexKey(k.of(typ).legacyActive, expiresMs, id)
}

func (k keys) legacyActiveType(typ string) tuple.Subspace { return k.root.Sub(tagLegacyActive, typ) }

// finished is a finished job's entry: (P, 6, type, lane, finished_ms,
// id), lane being laneOf(id). Keyed by time, one range would take every
// finish of the type on its last shard; in lanes, like the activity
// index, finishes land on activityLanes shards at once.
func (k keys) finished(typ string, finishedMs int64, id string) []byte {
	p := k.of(typ).done
	b := append(make([]byte, 0, len(p)+len(id)+14), p...)
	return appendString(appendInt(appendInt(b, int64(laneOf(id))), finishedMs), id)
}

func (k keys) finishedType(typ string) tuple.Subspace { return k.root.Sub(tagFinished, typ) }

// finishedLane is the finished entries of one lane of a type, by time.
func (k keys) finishedLane(typ string, lane int) tuple.Subspace {
	return k.root.Sub(tagFinished, typ, int64(lane))
}

// count is the key under which a type's count of jobs in state s is
// kept: the count is the sum of the keys of its range (countRange).
func (k keys) count(typ string, s State) []byte {
	if b, ok := k.of(typ).count[s]; ok {
		return b
	}
	return k.root.MustPack(tuple.Tuple{tagCount, typ, string(s)})
}

// countShards is how many keys a type's count of jobs in a state is
// spread over: (P, 7, type, state, shard), the shard a hash of the job's
// id, read by summing. FoundationDB keeps a key on one storage team and
// cannot split it, so a key that every job of a type writes caps the
// type's throughput at one team's, however large the cluster; spread
// over countShards keys, a state change of one job writes 1/countShards
// of the type's counter traffic to each. A store written before shards
// kept the count at (P, 7, type, state) itself, which the sum includes:
// such a store is read as it is.
const countShards = 16

// countShard is the key of job id's shard of the count of typ in state s.
func (k keys) countShard(typ string, s State, id string) []byte {
	base := k.count(typ, s)
	return appendInt(append(make([]byte, 0, len(base)+2), base...), int64(shardOf(id, countShards)))
}

// countRange is the range whose keys sum to the count of typ in state s:
// the key of before shards, and every shard's.
func (k keys) countRange(typ string, s State) kv.Range {
	r, err := kv.PrefixRange(k.count(typ, s))
	if err != nil {
		panic(err) // not reached: a packed tuple never ends in 0xff only
	}
	return r
}

// history is the key of lane's count of kind in minute of typ's history:
// (P, 27, type, hour, lane, minute, kind), hour being the minute's
// (minute/60, rounded down). Within an hour each lane has its own range,
// whose new minutes land at its end: the writes of a busy type's history
// go to 16 ranges, not to the newest minute's one (which a store that
// splits ranges by their past writes would find on one shard). The hour
// first lets a monitor clear whole hours with one range clear, and find
// the oldest with one read.
func (k keys) history(typ string, minute int64, kind historyKind, lane int) []byte {
	p := k.of(typ).history
	b := append(make([]byte, 0, len(p)+36), p...)
	b = appendInt(appendInt(b, floorDiv(minute, 60)), int64(lane))
	return appendInt(appendInt(b, minute), int64(kind))
}

// historyHour is where hour's keys of typ's history begin.
func (k keys) historyHour(typ string, hour int64) []byte {
	p := k.of(typ).history
	return appendInt(append(make([]byte, 0, len(p)+9), p...), hour)
}

// historyType is typ's history.
func (k keys) historyType(typ string) tuple.Subspace { return k.root.Sub(tagHistory, typ) }

// parseHistory reads the minute and kind of a key of typ's history, or
// reports false when the key is not one fdbq writes.
func (k keys) parseHistory(typ string, key []byte) (minute int64, kind historyKind, ok bool) {
	p := k.of(typ).history
	if !bytes.HasPrefix(key, p) {
		return 0, 0, false
	}
	b := key[len(p):]
	var hour, lane, c int64
	if hour, b, ok = readInt(b); !ok {
		return 0, 0, false
	}
	if lane, b, ok = readInt(b); !ok || lane < 0 || lane >= historyLanes {
		return 0, 0, false
	}
	if minute, b, ok = readInt(b); !ok || floorDiv(minute, 60) != hour {
		return 0, 0, false
	}
	if c, b, ok = readInt(b); !ok || len(b) != 0 {
		return 0, 0, false
	}
	// Written by fdbq: its integers in their one encoding, so that the
	// key lies in its hour's range.
	if !bytes.Equal(key, k.history(typ, minute, historyKind(c), int(lane))) {
		return 0, 0, false
	}
	return minute, historyKind(c), true
}

// historyHourOf is the hour of typ's history whose keys' range holds key,
// by key order, as a range clear up to an hour's first key clears: the
// last hour whose keys begin at or before it, or false for a key before
// every hour's.
func (k keys) historyHourOf(typ string, key []byte) (int64, bool) {
	if minute, _, ok := k.parseHistory(typ, key); ok {
		return floorDiv(minute, 60), true
	}
	// Hours as unsigned numbers in their order, searched by key.
	begins := func(u uint64) []byte { return k.historyHour(typ, int64(u^1<<63)) }
	if bytes.Compare(begins(0), key) > 0 {
		return 0, false
	}
	lo, hi := uint64(0), uint64(math.MaxUint64)
	for lo < hi {
		mid := lo + (hi-lo)/2 + 1
		if bytes.Compare(begins(mid), key) <= 0 {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return int64(lo ^ 1<<63), true
}

func (k keys) typ(name string) []byte { return k.root.MustPack(tuple.Tuple{tagType, name}) }

func (k keys) types() tuple.Subspace { return k.root.Sub(tagType) }

func (k keys) events(typ string) tuple.Subspace { return k.root.Sub(tagEvents, typ) }

func (k keys) eventsHeld(typ string) []byte {
	return k.root.MustPack(tuple.Tuple{tagEventsHeld, typ})
}

func (k keys) eventsFloor(typ string) []byte {
	return k.root.MustPack(tuple.Tuple{tagEventsFloor, typ})
}

// registry is bumped whenever a type is registered or its settings change,
// so an idle monitor learns of new types from a watch.
func (k keys) registry() []byte { return k.root.MustPack(tuple.Tuple{tagRegistry}) }

func (k keys) unique(typ string, digest []byte) []byte {
	return k.root.MustPack(tuple.Tuple{tagUnique, typ, digest})
}

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

// parsePending reads the zone, priority (negated), scheduled time and id
// of a ready index entry's key, which starts with the type's ready
// prefix, or reports false when the key is not one fdbq writes.
func (k keys) parsePending(typ string, key []byte) (z zone, negPriority, schedMs int64, id string, ok bool) {
	p := k.of(typ).pending
	if !bytes.HasPrefix(key, p) {
		return zone{}, 0, 0, "", false
	}
	if z, key, ok = readZone(key[len(p):]); !ok {
		return zone{}, 0, 0, "", false
	}
	if negPriority, key, ok = readInt(key); !ok {
		return zone{}, 0, 0, "", false
	}
	if schedMs, key, ok = readInt(key); !ok {
		return zone{}, 0, 0, "", false
	}
	if id, key, ok = readString(key); !ok || len(key) != 0 {
		return zone{}, 0, 0, "", false
	}
	return z, negPriority, schedMs, id, true
}

// parseScheduled reads a scheduled index entry's key as parsePending
// reads a ready index entry's.
func (k keys) parseScheduled(typ string, key []byte) (z zone, negPriority, schedMs int64, id string, ok bool) {
	p := k.of(typ).scheduled
	if !bytes.HasPrefix(key, p) {
		return zone{}, 0, 0, "", false
	}
	key = key[len(p):]
	if schedMs, key, ok = readInt(key); !ok {
		return zone{}, 0, 0, "", false
	}
	if negPriority, key, ok = readInt(key); !ok {
		return zone{}, 0, 0, "", false
	}
	if z, key, ok = readZone(key); !ok {
		return zone{}, 0, 0, "", false
	}
	if id, key, ok = readString(key); !ok || len(key) != 0 {
		return zone{}, 0, 0, "", false
	}
	return z, negPriority, schedMs, id, true
}

// readZone reads a zone's two elements: its key and its shard.
func readZone(b []byte) (zone, []byte, bool) {
	name, b, ok := readString(b)
	if !ok {
		return zone{}, nil, false
	}
	shard, b, ok := readInt(b)
	if !ok || shard < 0 || shard >= MaxZones {
		return zone{}, nil, false
	}
	return zone{key: name, shard: int(shard)}, b, true
}

// readInt reads an integer tuple element that fits an int64.
func readInt(b []byte) (int64, []byte, bool) {
	if len(b) == 0 || b[0] < 0x14-8 || b[0] > 0x14+8 {
		return 0, nil, false
	}
	neg := b[0] < 0x14
	n := int(b[0]) - 0x14
	if neg {
		n = -n
	}
	if len(b) < 1+n {
		return 0, nil, false
	}
	var u uint64
	for _, c := range b[1 : 1+n] {
		u = u<<8 | uint64(c)
	}
	rest := b[1+n:]
	if !neg {
		if u > math.MaxInt64 {
			return 0, nil, false
		}
		return int64(u), rest, true
	}
	// The bytes are the one's complement of the magnitude in n bytes.
	mag := ^u
	if n < 8 {
		mag &= 1<<(8*n) - 1
	}
	if mag > 1<<63 {
		return 0, nil, false
	}
	return -int64(mag), rest, true
}

// readString reads a string tuple element.
func readString(b []byte) (string, []byte, bool) {
	if len(b) == 0 || b[0] != 0x02 {
		return "", nil, false
	}
	b = b[1:]
	end := bytes.IndexByte(b, 0x00)
	if end < 0 {
		return "", nil, false
	}
	if end+1 >= len(b) || b[end+1] != 0xff {
		return string(b[:end]), b[end+1:], true // no escaped 0x00: the common case
	}
	var out []byte
	for i := 0; i < len(b); i++ {
		if b[i] != 0x00 {
			out = append(out, b[i])
			continue
		}
		if i+1 < len(b) && b[i+1] == 0xff {
			out = append(out, 0x00)
			i++
			continue
		}
		return string(out), b[i+1:], true
	}
	return "", nil, false
}
