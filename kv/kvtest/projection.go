package kvtest

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jobstage/jobstage/kv/tuple"
)

// A Projection says how a workload's writes would spread over a
// FoundationDB cluster, from a trace of them (TracingBackend), without a
// cluster: a store on one machine shows what a workload writes, and the
// projection where a cluster would have to write it.
//
// # What FoundationDB does
//
// FoundationDB keeps the keyspace in shards, contiguous ranges of keys,
// each on one team of storage servers (as many as the replication factor).
// Its data distributor splits and merges shards to keep them within size
// bounds and splits those that take a large share of recent writes (write
// bandwidth over a threshold), and moves shards to balance the bytes
// stored over the teams ("Data Distribution and Movement" and
// design/data-distributor-internals.md in apple/foundationdb). Two things
// follow that no cluster size changes:
//
//   - A split point is a key, so one key is never split: every write to a
//     key goes to the one team that holds its shard. A key written by
//     every job of a type — a counter bumped with an atomic add, which
//     avoids conflicts but not load — caps the type's throughput at what
//     one storage server absorbs, and a write-hot shard that cannot be
//     split makes that server's queue grow until ratekeeper throttles the
//     whole cluster (design/hotshard.md in apple/foundationdb).
//     FoundationDB's guidance on hot keys is that a key modified more than
//     some 10 to 100 times a second calls for another data model.
//   - The distributor reacts to what was written, after the fact: it
//     measures write bandwidth per shard over a recent period, then splits
//     and moves data. Keys that sort after everything written so far (an
//     index keyed by the current time, say) all land in the last shard,
//     whatever the cluster's size, until the next split; and the split
//     that follows only moves the hot spot on.
//
// # The model
//
// The projection cuts the trace into windows (a window is what the caller
// passes to AddWindow: N jobs' worth, say). For each shard count S it asks,
// of every window, which share of the window's writes the busiest of S
// shards took; and of every window, which share the busiest single key
// took. The shards of a window are split by key order at the write-volume
// quantiles (1/S, 2/S, …) of the window before it: the distributor
// splitting as well as any range split can, but late. A split falls
// between two keys, at whichever side of the key that holds a quantile is
// nearer to it, so a key heavier than a shard's share leaves shards with
// no writes: the cluster has the teams, but the key's load cannot be
// shared among them. The first window is split by its own writes, there
// being no earlier one: its figures are the lag-free best.
// Options.Immediate splits every window by its own writes, for
// comparison. The lag of one window stands for the distributor's: the
// shorter the windows, the quicker the distributor they model.
//
// Every write a transaction issues counts. FoundationDB's client may
// combine a transaction's writes to one key before they reach a storage
// server, so a key that one transaction writes many times (a counter
// bumped once per job of a batch) may weigh less on a cluster than here;
// Options.PerTransaction counts such a key once per transaction instead.
//
// The figures are ratios of write counts (or of Options.Weight), not
// rates: a busiest shard's share times the cluster's write rate is what
// its storage team has to absorb, and 1/share bounds the speed-up that S
// teams give over one. With S shards the ideal share is 1/S. The model
// is the distributor at its best: each shard on a team of its own. The
// real one moves shards by bytes stored, not by write traffic, so two hot
// shards can share a server ("Data Distribution and Movement"), and a
// cluster can do worse than projected. Bytes stored are not
// modelled otherwise, nor replication (every team has as many replicas),
// nor reads.
type Projection struct {
	opts    ProjectionOptions
	bounds  [][]string // per shard count: the split keys for the next window
	windows []WindowStats
}

// ProjectionOptions configure a Projection.
type ProjectionOptions struct {
	// Shards are the shard counts to project onto, each at least 1.
	// Default: 1, 8, 64, 512.
	Shards []int
	// Weight is what one write counts for: 1 for every write when nil. A
	// weight of 0 leaves the write out (commit markers, say); WriteBytes
	// weighs writes by the bytes they carry.
	Weight func(Write) int64
	// Immediate splits each window by its own writes instead of the
	// previous window's: data distribution without lag.
	Immediate bool
	// PerTransaction counts a key once per transaction that writes it
	// (with the weight of its first write), as if the client combined a
	// transaction's writes to one key: the other bound of what a cluster
	// sees (see Projection).
	PerTransaction bool
	// Group, when set, names the part of the keyspace a key belongs to
	// (a table, an index, a counter), and each window's busiest shard
	// has its writes broken down by it (ShardWindow.Groups).
	Group func(key []byte) string
}

// DefaultShards are the shard counts a Projection projects onto by
// default.
var DefaultShards = []int{1, 8, 64, 512}

// WriteBytes weighs a write by its key and value bytes, as FoundationDB's
// write bandwidth counts them.
func WriteBytes(w Write) int64 { return int64(len(w.Key)) + int64(w.Size) }

// NewProjection returns an empty projection.
func NewProjection(o ProjectionOptions) *Projection {
	if len(o.Shards) == 0 {
		o.Shards = DefaultShards
	}
	o.Shards = slices.Clone(o.Shards)
	for _, s := range o.Shards {
		if s < 1 {
			panic(fmt.Sprintf("kvtest: projection onto %d shards", s))
		}
	}
	return &Projection{opts: o, bounds: make([][]string, len(o.Shards))}
}

// keyWrites is one key's writes in a window.
type keyWrites struct {
	key string
	n   int64
}

// WindowStats is one window of a projection.
type WindowStats struct {
	Writes int64 // writes in the window (weighed)
	Keys   int   // distinct keys written
	// BusiestKey is the key written most (the first in key order among
	// equals), with its writes and share of the window's.
	BusiestKey       []byte
	BusiestKeyWrites int64
	BusiestKeyShare  float64
	// Shards has one entry per shard count, in the order of
	// ProjectionOptions.Shards.
	Shards []ShardWindow
}

// ShardWindow is one window split over one shard count.
type ShardWindow struct {
	Shards int
	// Writes are the writes of each shard, in key order.
	Writes []int64
	// Busiest is the index of the shard with the most writes (the first
	// among equals), Share its share of the window's writes.
	Busiest int
	Share   float64
	// Begin and End bound the busiest shard's keys: [Begin, End), nil for
	// the start and the end of the keyspace.
	Begin, End []byte
	// TopKey is the key written most within the busiest shard.
	TopKey       []byte
	TopKeyWrites int64
	// Used is how many shards took any writes.
	Used int
	// Groups break the busiest shard's writes down by
	// ProjectionOptions.Group, most written first (nil without Group).
	Groups []GroupWrites
}

// GroupWrites are the writes of one part of the keyspace.
type GroupWrites struct {
	Group  string
	Writes int64
}

// AddWindow adds one window of the trace: the transactions committed in
// it, in commit order (as TracingBackend.Take returns them).
func (p *Projection) AddWindow(txns []Txn) {
	counts := make(map[string]int64)
	var seen map[string]bool
	if p.opts.PerTransaction {
		seen = make(map[string]bool)
	}
	for i := range txns {
		clear(seen)
		for _, w := range txns[i].Writes {
			n := int64(1)
			if p.opts.Weight != nil {
				if n = p.opts.Weight(w); n == 0 {
					continue
				}
			}
			if seen != nil {
				if seen[string(w.Key)] {
					continue
				}
				seen[string(w.Key)] = true
			}
			counts[string(w.Key)] += n
		}
	}
	p.AddCounts(counts)
}

// AddCounts adds one window given as the writes of each key, for callers
// that count writes themselves (and for synthetic distributions).
func (p *Projection) AddCounts(counts map[string]int64) {
	ks := make([]keyWrites, 0, len(counts))
	var total int64
	for k, n := range counts {
		if n <= 0 {
			continue
		}
		ks = append(ks, keyWrites{k, n})
		total += n
	}
	slices.SortFunc(ks, func(a, b keyWrites) int { return strings.Compare(a.key, b.key) })

	ws := WindowStats{Writes: total, Keys: len(ks)}
	for _, kw := range ks {
		if kw.n > ws.BusiestKeyWrites {
			ws.BusiestKey, ws.BusiestKeyWrites = []byte(kw.key), kw.n
		}
	}
	ws.BusiestKeyShare = share(ws.BusiestKeyWrites, total)
	for i, s := range p.opts.Shards {
		if p.bounds[i] == nil || p.opts.Immediate {
			p.bounds[i] = split(ks, total, s)
		}
		ws.Shards = append(ws.Shards, place(ks, total, p.bounds[i], p.opts.Group))
		if total > 0 {
			// An empty window tells the distributor nothing: it keeps
			// the shards it had.
			p.bounds[i] = split(ks, total, s)
		}
	}
	p.windows = append(p.windows, ws)
}

func share(n, total int64) float64 {
	if total == 0 {
		return 0
	}
	return float64(n) / float64(total)
}

// split returns the s-1 keys that begin shards 1 … s-1 when ks (in key
// order, total writes in all) is split at its write quantiles. Shard j
// holds the keys from bounds[j-1] (the keyspace's start for j = 0) up to
// bounds[j]. Equal bounds make empty shards: a key heavier than a shard's
// share cannot be split.
func split(ks []keyWrites, total int64, s int) []string {
	bounds := make([]string, 0, s-1)
	var before int64 // writes of ks[:i]
	i := 0
	S := int64(s)
	for j := int64(1); j < S; j++ {
		target := j * total // quantile j/s, in units of 1/s of a write
		// Pass the keys that end at or before the quantile.
		for i < len(ks) && (before+ks[i].n)*S <= target {
			before += ks[i].n
			i++
		}
		if i == len(ks) {
			// Past every key (only when the quantile is the last
			// write): the shards that remain begin after the last key.
			bounds = append(bounds, after(ks))
			continue
		}
		// ks[i] holds the quantile: cut before it or after it, whichever
		// is nearer.
		if target-before*S > (before+ks[i].n)*S-target {
			before += ks[i].n
			i++
		}
		if i == len(ks) {
			bounds = append(bounds, after(ks))
		} else {
			bounds = append(bounds, ks[i].key)
		}
	}
	return bounds
}

// after returns the least key after every key of ks.
func after(ks []keyWrites) string {
	if len(ks) == 0 {
		return ""
	}
	return ks[len(ks)-1].key + "\x00"
}

// place counts the writes of ks in each shard that bounds make; group,
// when not nil, breaks the busiest shard's down.
func place(ks []keyWrites, total int64, bounds []string, group func([]byte) string) ShardWindow {
	sw := ShardWindow{Shards: len(bounds) + 1, Writes: make([]int64, len(bounds)+1)}
	top := make([]keyWrites, len(bounds)+1)
	// first[j] is the index in ks of shard j's first key.
	first := make([]int, len(bounds)+2)
	shard := 0
	for i, kw := range ks {
		for shard < len(bounds) && bounds[shard] <= kw.key {
			shard++
			first[shard] = i
		}
		sw.Writes[shard] += kw.n
		if kw.n > top[shard].n {
			top[shard] = kw
		}
	}
	for i, n := range sw.Writes {
		if n > sw.Writes[sw.Busiest] {
			sw.Busiest = i
		}
		if n > 0 {
			sw.Used++
		}
	}
	sw.Share = share(sw.Writes[sw.Busiest], total)
	if sw.Busiest > 0 {
		sw.Begin = []byte(bounds[sw.Busiest-1])
	}
	if sw.Busiest < len(bounds) {
		sw.End = []byte(bounds[sw.Busiest])
	}
	if t := top[sw.Busiest]; t.n > 0 {
		sw.TopKey, sw.TopKeyWrites = []byte(t.key), t.n
	}
	for shard < len(bounds) {
		shard++
		first[shard] = len(ks)
	}
	first[len(bounds)+1] = len(ks)
	if group != nil {
		sw.Groups = groups(ks[first[sw.Busiest]:first[sw.Busiest+1]], group)
	}
	return sw
}

// groups sums ks up by group, most written first.
func groups(ks []keyWrites, group func([]byte) string) []GroupWrites {
	by := make(map[string]int64)
	for _, kw := range ks {
		by[group([]byte(kw.key))] += kw.n
	}
	out := make([]GroupWrites, 0, len(by))
	for g, n := range by {
		out = append(out, GroupWrites{g, n})
	}
	slices.SortFunc(out, func(a, b GroupWrites) int {
		if a.Writes != b.Writes {
			return cmp.Compare(b.Writes, a.Writes)
		}
		return strings.Compare(a.Group, b.Group)
	})
	return out
}

// ProjectionReport sums a projection up over its windows.
type ProjectionReport struct {
	Windows []WindowStats
	// Key is the busiest single key's share over the windows.
	Key Spread
	// Shards has the busiest shard's share over the windows for each
	// shard count, in the order of ProjectionOptions.Shards.
	Shards []ShardSpread
}

// Spread is a share over the windows: its largest (in window MaxWindow,
// the first such) and its median.
type Spread struct {
	Max, Median float64
	MaxWindow   int
}

// ShardSpread is the busiest shard's share over the windows for one shard
// count.
type ShardSpread struct {
	Shards int
	Spread
}

// Report sums the windows added so far up.
func (p *Projection) Report() ProjectionReport {
	r := ProjectionReport{Windows: slices.Clone(p.windows)}
	keyShares := make([]float64, len(p.windows))
	for i, w := range p.windows {
		keyShares[i] = w.BusiestKeyShare
	}
	r.Key = spread(keyShares)
	for j, s := range p.opts.Shards {
		shares := make([]float64, len(p.windows))
		for i, w := range p.windows {
			shares[i] = w.Shards[j].Share
		}
		r.Shards = append(r.Shards, ShardSpread{Shards: s, Spread: spread(shares)})
	}
	return r
}

func spread(xs []float64) Spread {
	var s Spread
	if len(xs) == 0 {
		return s
	}
	for i, x := range xs {
		if x > s.Max {
			s.Max, s.MaxWindow = x, i
		}
	}
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	n := len(sorted)
	if n%2 == 1 {
		s.Median = sorted[n/2]
	} else {
		s.Median = (sorted[n/2-1] + sorted[n/2]) / 2
	}
	return s
}

// Table formats the report in Markdown: for each shard count, the busiest
// shard's share (largest over the windows, median, and the ideal 1/S) and
// the busiest key's; then, in the window of the busiest shard's largest
// share, what that shard holds (its groups, when the projection has
// Group, and its top key); and last, the busiest key of the window where
// the busiest key's share was largest. Keys are formatted by formatKey
// (FormatKey when nil).
func (r ProjectionReport) Table(formatKey func([]byte) string) string {
	if formatKey == nil {
		formatKey = FormatKey
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d windows, %d writes\n\n", len(r.Windows), r.writes())
	b.WriteString("| S | busiest shard, max | median | ideal | busiest key, max | median | the busiest shard in the window of its max |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---|\n")
	for j, s := range r.Shards {
		holds := "-"
		if len(r.Windows) > 0 {
			holds = r.Windows[s.MaxWindow].Shards[j].describe(formatKey)
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s |\n", s.Shards, percent(s.Max), percent(s.Median),
			percent(1/float64(s.Shards)), percent(r.Key.Max), percent(r.Key.Median), holds)
	}
	if len(r.Windows) > 0 {
		w := r.Windows[r.Key.MaxWindow]
		if w.BusiestKey != nil {
			fmt.Fprintf(&b, "\nbusiest key: %s, %s of the writes of window %d\n", formatKey(w.BusiestKey), percent(w.BusiestKeyShare), r.Key.MaxWindow)
		}
	}
	return b.String()
}

// describe says what the busiest shard holds: its three largest groups
// and its top key, with their shares of the shard's writes.
func (sw ShardWindow) describe(formatKey func([]byte) string) string {
	n := sw.Writes[sw.Busiest]
	if n == 0 {
		return "-"
	}
	var parts []string
	for i, g := range sw.Groups {
		if i == 3 {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s", g.Group, percent(share(g.Writes, n))))
	}
	top := fmt.Sprintf("top key %s %s", formatKey(sw.TopKey), percent(share(sw.TopKeyWrites, n)))
	if len(parts) == 0 {
		return top
	}
	return strings.Join(parts, ", ") + "; " + top
}

func percent(x float64) string { return strconv.FormatFloat(100*x, 'f', 1, 64) + "%" }

func (r ProjectionReport) writes() int64 {
	var n int64
	for _, w := range r.Windows {
		n += w.Writes
	}
	return n
}

// FormatKey returns key as a tuple, ("jobstage", 4, "email"), when it is
// one, else quoted.
func FormatKey(key []byte) string {
	t, err := tuple.Unpack(key)
	if err != nil || len(key) == 0 {
		return strconv.Quote(string(key))
	}
	return formatTuple(t)
}

func formatTuple(t tuple.Tuple) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, el := range t {
		if i > 0 {
			b.WriteString(", ")
		}
		switch v := el.(type) {
		case string:
			b.WriteString(strconv.Quote(v))
		case []byte:
			b.WriteString("b" + strconv.Quote(string(v)))
		case tuple.Tuple:
			b.WriteString(formatTuple(v))
		case nil:
			b.WriteString("nil")
		default:
			fmt.Fprint(&b, v)
		}
	}
	if len(t) == 1 {
		b.WriteByte(',')
	}
	b.WriteByte(')')
	return b.String()
}
