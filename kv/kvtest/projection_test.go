package kvtest_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/kvtest"
	"github.com/jobstage/jobstage/kv/tuple"
)

// uniform is a window of n keys named prefix + a zero-padded number from
// first on, each written once.
func uniform(prefix string, first, n int) map[string]int64 {
	m := make(map[string]int64, n)
	for i := first; i < first+n; i++ {
		m[fmt.Sprintf("%s%08d", prefix, i)] = 1
	}
	return m
}

func near(got, want float64) bool { return math.Abs(got-want) < 1e-9 }

// checkSums checks what holds of every window whatever the trace: the
// shards' writes add up to the window's, the busiest shard takes at least
// 1/S and at least the busiest key's share, and with one shard it takes
// everything.
func checkSums(t *testing.T, r kvtest.ProjectionReport) {
	t.Helper()
	for i, w := range r.Windows {
		for _, sw := range w.Shards {
			var sum int64
			for _, n := range sw.Writes {
				sum += n
			}
			if sum != w.Writes || len(sw.Writes) != sw.Shards {
				t.Errorf("window %d, %d shards: the shards' writes add up to %d over %d shards, want %d", i, sw.Shards, sum, len(sw.Writes), w.Writes)
			}
			if w.Writes == 0 {
				continue
			}
			if sw.Share < 1/float64(sw.Shards)-1e-9 || sw.Share < w.BusiestKeyShare-1e-9 {
				t.Errorf("window %d, %d shards: busiest shard's share %v is below 1/S or the busiest key's %v", i, sw.Shards, sw.Share, w.BusiestKeyShare)
			}
			if sw.Shards == 1 && (!near(sw.Share, 1) || sw.Begin != nil || sw.End != nil) {
				t.Errorf("window %d: one shard takes %v of the writes, bounded by %q–%q; want all, unbounded", i, sw.Share, sw.Begin, sw.End)
			}
		}
	}
}

func TestProjectionUniformKeysSplitEvenly(t *testing.T) {
	p := kvtest.NewProjection(kvtest.ProjectionOptions{})
	// 512 × 4 keys written alike in every window: every shard count
	// splits them into equal shards, from the first window on.
	for range 3 {
		p.AddCounts(uniform("k", 0, 512*4))
	}
	r := p.Report()
	checkSums(t, r)
	for _, s := range r.Shards {
		if want := 1 / float64(s.Shards); !near(s.Max, want) || !near(s.Median, want) {
			t.Errorf("%d shards: busiest takes %v (median %v), want %v", s.Shards, s.Max, s.Median, want)
		}
	}
	if want := 1.0 / (512 * 4); !near(r.Key.Max, want) {
		t.Errorf("busiest key takes %v, want %v", r.Key.Max, want)
	}
	for _, sw := range r.Windows[0].Shards {
		if sw.Used != sw.Shards {
			t.Errorf("%d shards: %d take writes, want all", sw.Shards, sw.Used)
		}
	}
}

func TestProjectionHotKeyCannotBeSplit(t *testing.T) {
	p := kvtest.NewProjection(kvtest.ProjectionOptions{})
	// One key takes a fifth of the writes, 8,000 others one each.
	for range 2 {
		w := uniform("k", 0, 8000)
		w["k00004000hot"] = 2000
		p.AddCounts(w)
	}
	r := p.Report()
	checkSums(t, r)
	if !near(r.Key.Max, 0.2) || !near(r.Key.Median, 0.2) {
		t.Errorf("busiest key takes %v (median %v), want 0.2", r.Key.Max, r.Key.Median)
	}
	if got := string(r.Windows[1].BusiestKey); got != "k00004000hot" {
		t.Errorf("busiest key %q", got)
	}
	for j, s := range r.Shards {
		// The hot key's shard is the busiest.
		sw := r.Windows[1].Shards[j]
		if string(sw.TopKey) != "k00004000hot" {
			t.Errorf("%d shards: busiest shard's top key %q", s.Shards, sw.TopKey)
		}
	}
	if s := r.Shards[3]; s.Shards != 512 || s.Max < 0.2 || s.Max > 0.2+2.0/512 {
		t.Errorf("512 shards: busiest takes %v, want the hot key's 0.2 and little more", s.Max)
	}
	if sw := r.Windows[1].Shards[3]; sw.Used >= 512 {
		t.Errorf("512 shards all take writes: the hot key's quantiles should leave some empty")
	}
}

func TestProjectionAppendsLandInTheLastShard(t *testing.T) {
	// Keys that sort after everything written before, as an index keyed
	// by the time: the shards split from the window before hold none of
	// them, so the last takes every write. Splitting each window by its
	// own writes (no lag) spreads them evenly.
	for _, immediate := range []bool{false, true} {
		p := kvtest.NewProjection(kvtest.ProjectionOptions{Immediate: immediate})
		for i := range 4 {
			p.AddCounts(uniform("t", i*1024, 1024))
		}
		r := p.Report()
		checkSums(t, r)
		for j, s := range r.Shards {
			ideal := 1 / float64(s.Shards)
			if !near(r.Windows[0].Shards[j].Share, ideal) {
				t.Errorf("immediate %v, %d shards: the first window, split by itself, gives %v, want %v", immediate, s.Shards, r.Windows[0].Shards[j].Share, ideal)
			}
			for i := 1; i < len(r.Windows); i++ {
				sw := r.Windows[i].Shards[j]
				want := 1.0
				if immediate {
					want = ideal
				}
				if !near(sw.Share, want) {
					t.Errorf("immediate %v, %d shards, window %d: busiest takes %v, want %v", immediate, s.Shards, i, sw.Share, want)
				}
				if !immediate && (sw.Busiest != s.Shards-1 || sw.End != nil) {
					t.Errorf("%d shards, window %d: busiest is shard %d ending at %q, want the last", s.Shards, i, sw.Busiest, sw.End)
				}
			}
		}
	}
}

func TestProjectionSplitsFromThePreviousWindow(t *testing.T) {
	p := kvtest.NewProjection(kvtest.ProjectionOptions{Shards: []int{2}})
	p.AddCounts(uniform("k", 0, 100)) // split at k00000050
	p.AddCounts(uniform("k", 0, 50))  // all in the first shard
	p.AddCounts(uniform("k", 0, 50))  // now split at k00000025
	r := p.Report()
	checkSums(t, r)
	got := []float64{r.Windows[0].Shards[0].Share, r.Windows[1].Shards[0].Share, r.Windows[2].Shards[0].Share}
	if !near(got[0], 0.5) || !near(got[1], 1) || !near(got[2], 0.5) {
		t.Errorf("busiest of 2 shards by window: %v, want [0.5 1 0.5]", got)
	}
	if sw := r.Windows[1].Shards[0]; sw.Busiest != 0 || sw.Begin != nil || string(sw.End) != "k00000050" {
		t.Errorf("window 1: busiest is shard %d, [%q, %q); want shard 0 up to k00000050", sw.Busiest, sw.Begin, sw.End)
	}
	if s := r.Shards[0]; !near(s.Max, 1) || s.MaxWindow != 1 || !near(s.Median, 0.5) {
		t.Errorf("spread %+v, want max 1 in window 1, median 0.5", s)
	}
}

func TestProjectionOneKey(t *testing.T) {
	p := kvtest.NewProjection(kvtest.ProjectionOptions{})
	p.AddCounts(map[string]int64{"only": 10})
	p.AddCounts(map[string]int64{"only": 10, "other": 0}) // a zero count is no write
	r := p.Report()
	checkSums(t, r)
	for _, s := range r.Shards {
		if !near(s.Max, 1) || !near(s.Median, 1) {
			t.Errorf("%d shards: one key's shard takes %v, want all", s.Shards, s.Max)
		}
	}
	if r.Windows[1].Keys != 1 {
		t.Errorf("%d keys counted, want 1", r.Windows[1].Keys)
	}
}

func TestProjectionEmptyWindowKeepsTheShards(t *testing.T) {
	p := kvtest.NewProjection(kvtest.ProjectionOptions{Shards: []int{4}})
	p.AddCounts(uniform("k", 0, 400))
	p.AddCounts(nil)
	p.AddCounts(uniform("k", 0, 400))
	r := p.Report()
	checkSums(t, r)
	if w := r.Windows[1]; w.Writes != 0 || w.Shards[0].Share != 0 || w.BusiestKey != nil {
		t.Errorf("empty window: %+v", w)
	}
	if s := r.Windows[2].Shards[0].Share; !near(s, 0.25) {
		t.Errorf("after an empty window the busiest of 4 takes %v, want 0.25", s)
	}
	if m := r.Shards[0].Median; !near(m, 0.25) {
		t.Errorf("median %v, want 0.25", m)
	}
}

func TestProjectionMedianAndMax(t *testing.T) {
	p := kvtest.NewProjection(kvtest.ProjectionOptions{Shards: []int{1}})
	// Busiest key shares 0.1, 0.5, 0.3, 0.2.
	for _, hot := range []int64{1, 5, 3, 2} {
		w := map[string]int64{"hot": hot}
		for i := range 10 - hot {
			w[fmt.Sprint("cold", i)] = 1
		}
		p.AddCounts(w)
	}
	r := p.Report()
	if !near(r.Key.Max, 0.5) || r.Key.MaxWindow != 1 || !near(r.Key.Median, 0.25) {
		t.Errorf("key spread %+v, want max 0.5 in window 1, median 0.25", r.Key)
	}
}

func TestProjectionOfATrace(t *testing.T) {
	// AddWindow counts a trace's writes as AddCounts counts a map, and
	// Weight weighs them.
	txns := []kvtest.Txn{
		{Writes: []kvtest.Write{{Key: []byte("a"), Kind: kvtest.WriteSet, Size: 10}, {Key: []byte("c"), Kind: kvtest.WriteAtomic, Op: kv.MutationAdd, Size: 8}}},
		{Writes: []kvtest.Write{{Key: []byte("c"), Kind: kvtest.WriteAtomic, Op: kv.MutationAdd, Size: 8}, {Key: []byte("skip"), Kind: kvtest.WriteClear}}},
	}
	byCount := kvtest.NewProjection(kvtest.ProjectionOptions{Shards: []int{1, 2}})
	byCount.AddWindow(txns)
	w := byCount.Report().Windows[0]
	if w.Writes != 4 || w.Keys != 3 || string(w.BusiestKey) != "c" || w.BusiestKeyWrites != 2 || !near(w.BusiestKeyShare, 0.5) {
		t.Errorf("counted %+v, want 4 writes to 3 keys, c twice", w)
	}
	once := kvtest.NewProjection(kvtest.ProjectionOptions{Shards: []int{1}, PerTransaction: true})
	once.AddWindow(append(txns, kvtest.Txn{Writes: []kvtest.Write{{Key: []byte("c")}, {Key: []byte("c")}, {Key: []byte("a")}}}))
	w = once.Report().Windows[0]
	if w.Writes != 6 || w.BusiestKeyWrites != 3 || string(w.BusiestKey) != "c" {
		t.Errorf("counted once per transaction %+v, want 6 writes, c's 3", w)
	}
	weighed := kvtest.NewProjection(kvtest.ProjectionOptions{Shards: []int{1}, Weight: func(w kvtest.Write) int64 {
		if string(w.Key) == "skip" {
			return 0
		}
		return kvtest.WriteBytes(w)
	}})
	weighed.AddWindow(txns)
	w = weighed.Report().Windows[0]
	if w.Writes != 11+9+9 || w.Keys != 2 || string(w.BusiestKey) != "c" {
		t.Errorf("weighed %+v, want 29 bytes to a and c", w)
	}
}

func TestProjectionTable(t *testing.T) {
	p := kvtest.NewProjection(kvtest.ProjectionOptions{})
	hot := tuple.Tuple{"jobstage", 4, "email"}.MustPack()
	for range 2 {
		w := uniform("k", 0, 1000)
		w[string(hot)] = 250
		p.AddCounts(w)
	}
	table := p.Report().Table(nil)
	for _, want := range []string{"| 512 |", "20.0%", `("jobstage", 4, "email")`, "2 windows, 2500 writes"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestFormatKey(t *testing.T) {
	for key, want := range map[string]string{
		string(tuple.Tuple{"jobstage", 4, "email"}.MustPack()): `("jobstage", 4, "email")`,
		string(tuple.Tuple{"one"}.MustPack()):                  `("one",)`,
		string(tuple.Tuple{[]byte{0, 1}, -2}.MustPack()):       `(b"\x00\x01", -2)`,
		"\xfejobstage/kv/commit/":                              `"\xfejobstage/kv/commit/"`,
		"":                                                     `""`,
	} {
		if got := kvtest.FormatKey([]byte(key)); got != want {
			t.Errorf("FormatKey(%q) = %s, want %s", key, got, want)
		}
	}
}

func TestProjectionGroupsTheBusiestShard(t *testing.T) {
	p := kvtest.NewProjection(kvtest.ProjectionOptions{Shards: []int{1, 2}, Group: func(k []byte) string { return string(k[:1]) }})
	// a: 10 keys × 1, b: 1 key × 20, c: 10 keys × 1 — split in two at b.
	w := uniform("a", 0, 10)
	w["b"] = 20
	for k, n := range uniform("c", 0, 10) {
		w[k] = n
	}
	p.AddCounts(w)
	r := p.Report()
	checkSums(t, r)
	one := r.Windows[0].Shards[0]
	want := []kvtest.GroupWrites{{"b", 20}, {"a", 10}, {"c", 10}}
	if fmt.Sprint(one.Groups) != fmt.Sprint(want) {
		t.Errorf("one shard's groups %v, want %v", one.Groups, want)
	}
	two := r.Windows[0].Shards[1]
	if !near(two.Share, 0.75) || fmt.Sprint(two.Groups) != fmt.Sprint([]kvtest.GroupWrites{{"b", 20}, {"c", 10}}) {
		t.Errorf("two shards: busiest takes %v with groups %v, want 0.75 of b and c", two.Share, two.Groups)
	}
	if table := r.Table(nil); !strings.Contains(table, "b 66.7%, c 33.3%; top key \"b\" 66.7%") {
		t.Errorf("table does not say what the busiest shard holds:\n%s", table)
	}
}
