package fdbq_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// keysModel is what a test did to the jobs of type email: each job's key
// and state, and the lease of each running one.
type keysModel struct {
	s      fdbq.TypeSettings
	key    map[string]string // id → key
	state  map[string]fdbq.State
	leases map[string]*fdbq.Lease
	zones  map[string]int // id → its zone's shard, for a pending job
}

func newKeysModel(s fdbq.TypeSettings) *keysModel {
	return &keysModel{s: s, key: map[string]string{}, state: map[string]fdbq.State{},
		leases: map[string]*fdbq.Lease{}, zones: map[string]int{}}
}

// zonesOf is how many zones the jobs of key are spread over, as
// TypeSettings documents it.
func zonesOf(s fdbq.TypeSettings, key string) int {
	p := s.KeyDefault
	if np, ok := s.Keys[key]; ok && key != "" {
		p = np
	}
	switch {
	case p.Zones > 0:
		return p.Zones
	case s.Zones > 0:
		return s.Zones
	}
	return fdbq.DefaultZones
}

func (m *keysModel) add(t *testing.T, q *fdbq.Queue, ids []string, key string) {
	t.Helper()
	var jobs []fdbq.NewJob
	for _, id := range ids {
		jobs = append(jobs, fdbq.NewJob{Type: "email", ID: id, Key: key})
		m.key[id], m.state[id] = key, fdbq.Pending
		m.zones[id] = fdbq.ShardOf(id, zonesOf(m.s, key))
	}
	if _, err := q.AddBatch(context.Background(), q.DB(), jobs); err != nil {
		t.Fatal(err)
	}
}

// accept takes up to n jobs of keys.
func (m *keysModel) accept(t *testing.T, q *fdbq.Queue, keys []string, n int) []*fdbq.Lease {
	t.Helper()
	ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: n, Keys: keys})
	for _, l := range ls {
		if m.state[l.ID] != fdbq.Pending || !slices.Contains(keys, m.key[l.ID]) {
			t.Fatalf("accepted %s (key %q, %s) from keys %q", l.ID, m.key[l.ID], m.state[l.ID], keys)
		}
		m.state[l.ID], m.leases[l.ID] = fdbq.Running, l
	}
	return ls
}

func (m *keysModel) finish(t *testing.T, q *fdbq.Queue, id string) {
	t.Helper()
	if err := q.Finish(context.Background(), q.DB(), m.leases[id], nil); err != nil {
		t.Fatal(err)
	}
	m.state[id] = fdbq.Finished
	delete(m.leases, id)
}

// running is how many jobs of key run.
func (m *keysModel) running(key string) int64 {
	n := int64(0)
	for id, st := range m.state {
		if st == fdbq.Running && m.key[id] == key {
			n++
		}
	}
	return n
}

// readyShards is how many zones of key hold pending jobs.
func (m *keysModel) readyShards(key string) int {
	shards := map[int]bool{}
	for id, st := range m.state {
		if st == fdbq.Pending && m.key[id] == key {
			shards[m.zones[id]] = true
		}
	}
	return len(shards)
}

var keysRoot = tuple.FromBytes(fdbq.DefaultPrefix)

// keysOracle is what Keys lists, made from whole reads of the store's
// zone marks and running counts: every key, in order, with its marks,
// its summed counts and its rate window.
func keysOracle(t *testing.T, q *fdbq.Queue, s fdbq.TypeSettings) []fdbq.KeyInfo {
	t.Helper()
	ctx := context.Background()
	marks, counts := map[string]int{}, map[string]int64{}
	var windows map[string][]byte
	err := q.DB().ReadTransact(ctx, func(tx kv.ReadTx) error {
		clear(marks)
		clear(counts)
		windows = map[string][]byte{}
		sub := keysRoot.Sub(15, "email")
		kvs, err := tx.GetRange(sub.Range(), kv.RangeOptions{})
		if err != nil {
			return err
		}
		for _, e := range kvs {
			tp, err := sub.Unpack(e.Key)
			if err != nil {
				return err
			}
			marks[tp[0].(string)]++
		}
		sub = keysRoot.Sub(16, "email")
		if kvs, err = tx.GetRange(sub.Range(), kv.RangeOptions{}); err != nil {
			return err
		}
		for _, e := range kvs {
			tp, err := sub.Unpack(e.Key)
			if err != nil {
				return err
			}
			counts[tp[0].(string)] += kv.DecodeInt64(e.Value)
		}
		sub = keysRoot.Sub(17, "email")
		if kvs, err = tx.GetRange(sub.Range(), kv.RangeOptions{}); err != nil {
			return err
		}
		for _, e := range kvs {
			tp, err := sub.Unpack(e.Key)
			if err != nil {
				return err
			}
			windows[tp[0].(string)] = e.Value
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]bool{}
	for k := range marks {
		all[k] = true
	}
	for k := range counts {
		all[k] = true
	}
	for k := range s.Keys {
		all[k] = true
	}
	var keys []string
	for k := range all {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []fdbq.KeyInfo
	for _, k := range keys {
		_, named := s.Keys[k]
		p := s.KeyDefault
		if named {
			p = s.Keys[k]
		}
		if k == "" {
			p = fdbq.KeyPolicy{Weight: s.KeyDefault.Weight}
		}
		p.Weight = max(p.Weight, 1)
		p.Zones = zonesOf(s, k)
		info := fdbq.KeyInfo{Key: k, Named: named, Policy: p, ReadyZones: marks[k], Running: counts[k]}
		if b, ok := windows[k]; ok && p.MaxStarts > 0 && k != "" {
			start := int64(binary.LittleEndian.Uint64(b))
			now := q.Now().UnixMilli()
			info.Window = &fdbq.RateWindow{Start: time.UnixMilli(start), End: time.UnixMilli(start + p.Per.Milliseconds()),
				Started: int64(binary.LittleEndian.Uint64(b[8:])), Current: now < start+p.Per.Milliseconds() && now >= start-p.Per.Milliseconds()}
		}
		out = append(out, info)
	}
	return out
}

// allKeyPages pages through the type's keys, limit a page, checking each
// page's shape, and returns the keys and the unreadable entries.
func allKeyPages(t *testing.T, q *fdbq.Queue, tr kv.ReadTransactor, limit int) ([]fdbq.KeyInfo, []fdbq.Unreadable) {
	t.Helper()
	var keys []fdbq.KeyInfo
	var bad []fdbq.Unreadable
	after := ""
	for pages := 0; ; pages++ {
		if pages > 10_000 {
			t.Fatal("Keys pages without end")
		}
		page, err := q.Keys(context.Background(), tr, "email", fdbq.KeysOptions{Limit: limit, After: after})
		if err != nil {
			t.Fatalf("keys after %q: %v", after, err)
		}
		n := 0
		for i, k := range page.Keys {
			if k.Key == "" {
				if i != 0 || after != "" {
					t.Fatalf("the jobs without a key at place %d of the page after %q", i, after)
				}
				continue
			}
			n++
		}
		if n > limit {
			t.Fatalf("a page of %d keys, limit %d", n, limit)
		}
		if page.Next != "" && (n != limit || page.Next != page.Keys[len(page.Keys)-1].Key) {
			t.Fatalf("page after %q: %d keys, next %q", after, n, page.Next)
		}
		keys = append(keys, page.Keys...)
		bad = append(bad, page.Unreadable...)
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	for i := 1; i < len(keys); i++ {
		if keys[i-1].Key >= keys[i].Key {
			t.Fatalf("keys out of order: %q then %q", keys[i-1].Key, keys[i].Key)
		}
	}
	return keys, bad
}

// checkKeys compares Keys, paged by limit, with the oracle and with what
// the model says: running counts exactly, and a zone marked for each
// zone with ready jobs.
func checkKeys(t *testing.T, q *fdbq.Queue, m *keysModel, limit int) []fdbq.KeyInfo {
	t.Helper()
	got, bad := allKeyPages(t, q, q.DB(), limit)
	if len(bad) > 0 {
		t.Fatalf("unreadable entries in a store fdbq wrote: %v", bad[0].Err)
	}
	want := keysOracle(t, q, m.s)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("limit %d: keys\n%s\nwant\n%s", limit, keysText(got), keysText(want))
	}
	for _, k := range got {
		if r := m.running(k.Key); k.Key != "" && k.Running != r {
			t.Fatalf("key %q: running %d, %d jobs run", k.Key, k.Running, r)
		}
		if r := m.readyShards(k.Key); k.ReadyZones < r || k.ReadyZones > zonesOf(m.s, k.Key) {
			t.Fatalf("key %q: %d zones marked, %d hold ready jobs, of %d", k.Key, k.ReadyZones, r, zonesOf(m.s, k.Key))
		}
	}
	return got
}

func keysText(ks []fdbq.KeyInfo) string {
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, "  %q named=%v %+v ready=%d running=%d window=%+v\n", k.Key, k.Named, k.Policy, k.ReadyZones, k.Running, k.Window)
	}
	return b.String()
}

func keyInfo(t *testing.T, ks []fdbq.KeyInfo, key string) fdbq.KeyInfo {
	t.Helper()
	for _, k := range ks {
		if k.Key == key {
			return k
		}
	}
	t.Fatalf("key %q not listed", key)
	return fdbq.KeyInfo{}
}

// keysSettings: named policies, two of them for keys that never get a
// job, one with a rate and one of many zones.
func keysSettings() fdbq.TypeSettings {
	s := fdbq.DefaultTypeSettings()
	s.Zones = 4
	s.KeyDefault = fdbq.KeyPolicy{MaxRunning: 50, Weight: 2}
	s.Keys = map[string]fdbq.KeyPolicy{
		"big":    {Weight: 3, Zones: 16},
		"idle-a": {Weight: 5},
		"idle-z": {MaxRunning: 2, Zones: 1},
		"rated":  {MaxStarts: 5, Per: time.Minute, Zones: 2},
		"seq":    {MaxRunning: 1, Zones: 1},
	}
	return s
}

// Keys lists the union of the keys with ready jobs, running jobs and
// named policies, paged with small limits, each with its running count,
// its marked zones, its policy and its rate window; finishes lower the
// counts; a rate window ends with time.
func TestKeys(t *testing.T) {
	s := keysSettings()
	q, c := limitedQueue(t, s)
	m := newKeysModel(s)
	ids := func(key string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s/%02d", key, i))
		}
		return out
	}
	// t00–t29: ready only (t00–t09), running only (t10–t19, every job
	// taken), both (t20–t29); big in 16 zones; the jobs without a key.
	for i := range 30 {
		m.add(t, q, ids(fmt.Sprintf("t%02d", i), 6), fmt.Sprintf("t%02d", i))
	}
	m.add(t, q, ids("big", 40), "big")
	m.add(t, q, ids("rated", 8), "rated")
	m.add(t, q, ids("seq", 3), "seq")
	m.add(t, q, ids("none", 5), "")
	for i := 10; i < 30; i++ {
		key := fmt.Sprintf("t%02d", i)
		n := 2
		if i < 20 {
			n = 6
		}
		if got := m.accept(t, q, []string{key}, n); len(got) != n {
			t.Fatalf("accepted %d of %s, want %d", len(got), key, n)
		}
	}
	m.accept(t, q, []string{"big"}, 7)
	m.accept(t, q, []string{"seq"}, 3) // one: a sequence
	if got := m.accept(t, q, []string{"rated"}, 3); len(got) != 3 {
		t.Fatalf("accepted %d of rated, want 3", len(got))
	}

	for _, limit := range []int{1, 2, 3, 7, 50, fdbq.MaxKeysLimit} {
		checkKeys(t, q, m, limit)
	}
	got := checkKeys(t, q, m, 4)
	if len(got) != 30+5+1 {
		t.Fatalf("%d keys listed, want 36:\n%s", len(got), keysText(got))
	}
	none := keyInfo(t, got, "")
	if none.Named || none.Running != 0 || none.ReadyZones == 0 || none.Policy != (fdbq.KeyPolicy{Weight: 2, Zones: 4}) {
		t.Fatalf("the jobs without a key: %+v", none)
	}
	for key, want := range map[string]fdbq.KeyInfo{
		"t05":    {Key: "t05", Policy: fdbq.KeyPolicy{Weight: 2, MaxRunning: 50, Zones: 4}, Running: 0},
		"t15":    {Key: "t15", Policy: fdbq.KeyPolicy{Weight: 2, MaxRunning: 50, Zones: 4}, Running: 6},
		"t25":    {Key: "t25", Policy: fdbq.KeyPolicy{Weight: 2, MaxRunning: 50, Zones: 4}, Running: 2},
		"big":    {Key: "big", Named: true, Policy: fdbq.KeyPolicy{Weight: 3, Zones: 16}, Running: 7},
		"idle-a": {Key: "idle-a", Named: true, Policy: fdbq.KeyPolicy{Weight: 5, Zones: 4}},
		"idle-z": {Key: "idle-z", Named: true, Policy: fdbq.KeyPolicy{Weight: 1, MaxRunning: 2, Zones: 1}},
		"seq":    {Key: "seq", Named: true, Policy: fdbq.KeyPolicy{Weight: 1, MaxRunning: 1, Zones: 1}, Running: 1, ReadyZones: 1},
	} {
		k := keyInfo(t, got, key)
		if k.Key != want.Key || k.Named != want.Named || k.Policy != want.Policy || k.Running != want.Running || (want.ReadyZones != 0 && k.ReadyZones != want.ReadyZones) {
			t.Fatalf("key %s: %+v, want %+v", key, k, want)
		}
	}
	if k := keyInfo(t, got, "t15"); k.ReadyZones != 0 {
		t.Fatalf("t15, every job taken: %d zones marked", k.ReadyZones)
	}
	if k := keyInfo(t, got, "big"); k.ReadyZones < 10 {
		t.Fatalf("big, 33 ready jobs in 16 zones: %d zones marked", k.ReadyZones)
	}
	rated := keyInfo(t, got, "rated")
	if w := rated.Window; w == nil || !w.Start.Equal(c.Now()) || !w.End.Equal(c.Now().Add(time.Minute)) || w.Started != 3 || !w.Current {
		t.Fatalf("rated's window: %+v (now %v)", w, c.Now())
	}
	if k := keyInfo(t, got, "t25"); k.Window != nil {
		t.Fatalf("a key without a rate has a window: %+v", k.Window)
	}

	// Finishes lower the counts; the keys whose jobs all ended stay,
	// at 0. The rate window ends with the clock.
	for id, st := range m.state {
		if st == fdbq.Running && (strings.HasPrefix(id, "t1") || strings.HasPrefix(id, "big")) {
			m.finish(t, q, id)
		}
	}
	c.Advance(2 * time.Minute)
	got = checkKeys(t, q, m, 3)
	if k := keyInfo(t, got, "t15"); k.Running != 0 {
		t.Fatalf("t15 after its jobs finished: running %d", k.Running)
	}
	if k := keyInfo(t, got, "big"); k.Running != 0 {
		t.Fatalf("big after its jobs finished: running %d", k.Running)
	}
	if k := keyInfo(t, got, "t25"); k.Running != 2 {
		t.Fatalf("t25, two running: running %d", k.Running)
	}
	if w := keyInfo(t, got, "rated").Window; w == nil || w.Current || w.Started != 3 {
		t.Fatalf("rated's window two minutes later: %+v", w)
	}
	// A page read inside a caller's transaction takes no conflicts: a
	// change of what it read, committed before the caller's commit, does
	// not fail it.
	attempts := 0
	err := q.DB().Transact(context.Background(), func(tx kv.Tx) error {
		attempts++
		if _, err := q.Keys(context.Background(), tx, "email", fdbq.KeysOptions{}); err != nil {
			return err
		}
		if attempts == 1 {
			m.finish(t, q, firstRunning(m, "t25"))
			m.add(t, q, []string{"late"}, "t99")
		}
		tx.Set(keysRoot.MustPack(tuple.Tuple{"keys-test"}), nil)
		return nil
	})
	if err != nil || attempts != 1 {
		t.Fatalf("a transaction that read the keys: %v after %d attempts", err, attempts)
	}
}

func firstRunning(m *keysModel, key string) string {
	var ids []string
	for id, st := range m.state {
		if st == fdbq.Running && m.key[id] == key {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids[0]
}

// A seeded random history of adds over many keys, accepts of some of
// them, finishes, cancels and removes, with Keys paged by random limits
// checked against the oracle after each step.
func TestKeysRandom(t *testing.T) {
	for _, seed := range modelSeedList(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d (rerun with JOBSTAGE_SEED=%d)", seed, seed)
			rng := rand.New(rand.NewPCG(seed, 17))
			s := fdbq.DefaultTypeSettings()
			s.Zones = []int{0, 1, 2, 5}[rng.IntN(4)]
			s.KeyDefault = fdbq.KeyPolicy{Weight: rng.IntN(3), Zones: rng.IntN(3)}
			keys := []string{""}
			for i := range 5 + rng.IntN(40) {
				keys = append(keys, fmt.Sprintf("k%03d", rng.IntN(1000)*10+i%10))
			}
			s.Keys = map[string]fdbq.KeyPolicy{}
			for range rng.IntN(8) {
				k := fmt.Sprintf("k%03d", rng.IntN(1000)*10+rng.IntN(10))
				p := fdbq.KeyPolicy{Weight: rng.IntN(4), Zones: rng.IntN(6)}
				if rng.IntN(3) == 0 {
					p.MaxStarts, p.Per = 1000, time.Hour
				}
				s.Keys[k] = p
			}
			q, c := limitedQueue(t, s)
			m := newKeysModel(s)
			n := 0
			for step := range 30 {
				switch op := rng.IntN(10); {
				case op < 4:
					key := keys[rng.IntN(len(keys))]
					var ids []string
					for range 1 + rng.IntN(10) {
						ids = append(ids, fmt.Sprintf("j%05d", n))
						n++
					}
					m.add(t, q, ids, key)
				case op < 7:
					var ks []string
					for range 1 + rng.IntN(3) {
						ks = append(ks, keys[rng.IntN(len(keys))])
					}
					m.accept(t, q, ks, 1+rng.IntN(8))
				case op < 9:
					for id := range m.leases {
						if rng.IntN(2) == 0 {
							m.finish(t, q, id)
						}
					}
				default:
					c.Advance(time.Duration(rng.IntN(90)) * time.Minute)
				}
				checkKeys(t, q, m, 1+rng.IntN(7))
				_ = step
			}
		})
	}
}

// The reads of a page are bounded by its limit, whatever the number of
// keys, zones and jobs around it: 120 keys of 16 zones each, some running
// in every zone, read a page at a time with each limit, count at most
// 2·(1+limit) range reads, the settings and a rate window per listed key,
// and no more entries than the page's keys hold and a read ahead in each
// subspace.
func TestKeysBounded(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.Zones = 16
	s.Keys = map[string]fdbq.KeyPolicy{"k0050": {MaxStarts: 1000, Per: time.Hour}}
	q, c := limitedQueue(t, s)
	ctx := context.Background()
	var jobs []fdbq.NewJob
	for k := range 120 {
		key := fmt.Sprintf("k%04d", k*10)
		for shard := range 16 {
			for i := 0; ; i++ {
				id := fmt.Sprintf("%s-%d", key, i)
				if fdbq.ShardOf(id, 16) == shard {
					jobs = append(jobs, fdbq.NewJob{Type: "email", ID: id, Key: key})
					jobs = append(jobs, fdbq.NewJob{Type: "email", ID: id + "b", Key: key})
					break
				}
			}
		}
	}
	for from := 0; from < len(jobs); from += 500 {
		if _, err := q.AddBatch(ctx, q.DB(), jobs[from:min(from+500, len(jobs))]); err != nil {
			t.Fatal(err)
		}
	}
	// Running jobs in every zone of a tenth of the keys.
	for k := 0; k < 120; k += 10 {
		key := fmt.Sprintf("k%04d", k*10)
		if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Keys: []string{key}, Max: 16, Window: 16}); len(ls) == 0 {
			t.Fatalf("nothing accepted of %s", key)
		}
	}
	cdb, counts := countingDB(q.DB())
	cq := fdbq.New(cdb, fdbq.Options{Now: c.Now})
	for _, limit := range []int{1, 5, 20} {
		after := ""
		pages := 0
		for {
			g0, r0, k0 := counts.snapshot()
			page, err := cq.Keys(ctx, cdb, "email", fdbq.KeysOptions{Limit: limit, After: after})
			if err != nil {
				t.Fatal(err)
			}
			g1, r1, k1 := counts.snapshot()
			gets, ranges, keys := g1-g0, r1-r0, k1-k0
			windows := int64(0)
			for _, k := range page.Keys {
				if k.Policy.MaxStarts > 0 {
					windows++
				}
			}
			if ranges > int64(2*(1+limit)) || gets > 1+windows || keys > int64(2*(limit*16+257)) {
				t.Fatalf("limit %d, page after %q: %d range reads (at most %d), %d gets (at most %d), %d entries read (at most %d)",
					limit, after, ranges, 2*(1+limit), gets, 1+windows, keys, 2*(limit*16+257))
			}
			pages++
			if page.Next == "" {
				break
			}
			after = page.Next
		}
		if want := (120 + limit - 1) / limit; pages != want {
			t.Fatalf("limit %d: %d pages, want %d", limit, pages, want)
		}
	}
}

// Inputs Keys refuses, each saying what is wrong, before reading; an
// unknown type.
func TestKeysRefused(t *testing.T) {
	q, _ := limitedQueue(t, fdbq.DefaultTypeSettings())
	ctx := context.Background()
	for _, c := range []struct {
		typ  string
		o    fdbq.KeysOptions
		want string
	}{
		{"", fdbq.KeysOptions{}, "empty type name"},
		{"bad/type", fdbq.KeysOptions{}, "type name"},
		{"email", fdbq.KeysOptions{Limit: -1}, "limit -1 is out of range"},
		{"email", fdbq.KeysOptions{Limit: fdbq.MaxKeysLimit + 1}, "limit 201 is out of range (1 to 200"},
		{"email", fdbq.KeysOptions{After: "a\x01b"}, "after: fairness key \"a\\x01b\" has a control character at byte 1"},
		{"email", fdbq.KeysOptions{After: "a\xffb"}, "after: fairness key \"a\\xffb\" is not valid UTF-8 at byte 1"},
		{"email", fdbq.KeysOptions{After: strings.Repeat("k", fdbq.MaxKeySize+1)}, "after: fairness key of 129 bytes is longer than 128"},
	} {
		_, err := q.Keys(ctx, q.DB(), c.typ, c.o)
		if !errors.Is(err, fdbq.ErrInvalidJob) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Keys(%q, %+v): %v, want ErrInvalidJob saying %q", c.typ, c.o, err, c.want)
		}
	}
	if _, err := q.Keys(ctx, q.DB(), "sms", fdbq.KeysOptions{}); !errors.Is(err, fdbq.ErrUnknownType) {
		t.Errorf("Keys of an unknown type: %v", err)
	}
	if page, err := q.Keys(ctx, q.DB(), "email", fdbq.KeysOptions{Limit: fdbq.MaxKeysLimit, After: strings.Repeat("k", fdbq.MaxKeySize)}); err != nil || len(page.Keys) != 0 {
		t.Errorf("Keys at the bounds: %v %v", page, err)
	}
}

// What Keys cannot read does not stop it: values that do not decode and
// keys that name no fairness key, in each subspace, are reported with
// the place they were found, and the keys around them listed with what
// could be read. Settings that do not decode are ErrCorrupt.
func TestKeysUnreadable(t *testing.T) {
	s := keysSettings()
	q, _ := limitedQueue(t, s)
	m := newKeysModel(s)
	m.add(t, q, []string{"a1", "a2"}, "a")
	m.add(t, q, []string{"c1"}, "c")
	m.add(t, q, []string{"r1", "r2"}, "rated")
	m.accept(t, q, []string{"a"}, 2)
	m.accept(t, q, []string{"rated"}, 1)
	ctx := context.Background()
	runningA := keysRoot.MustPack(tuple.Tuple{16, "email", "a", int64(200)})
	malformedMark := keysRoot.MustPack(tuple.Tuple{15, "email", "c", "x"})
	badKeyMark := keysRoot.MustPack(tuple.Tuple{15, "email", "b\x01", int64(0)})
	cutString := append(keysRoot.MustPack(tuple.Tuple{16, "email"}), 0x02, 'b', 'z')
	window := keysRoot.MustPack(tuple.Tuple{17, "email", "rated"})
	var many [][]byte
	for i := range fdbq.MaxZones + 5 {
		many = append(many, keysRoot.MustPack(tuple.Tuple{16, "email", "many", int64(i)}))
	}
	err := q.DB().Transact(ctx, func(tx kv.Tx) error {
		tx.Set(runningA, []byte{1, 2, 3})
		tx.Set(malformedMark, []byte("t"))
		tx.Set(badKeyMark, []byte("t"))
		tx.Set(cutString, []byte("t"))
		tx.Set(window, []byte{1, 2, 3, 4, 5})
		for _, k := range many {
			tx.Add(k, 1)
		}
		// Outside the strings: names no key, and is not read.
		tx.Set(keysRoot.MustPack(tuple.Tuple{15, "email", int64(7)}), nil)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{1, 2, 10} {
		got, bad := allKeyPages(t, q, q.DB(), limit)
		var listed []string
		for _, k := range got {
			listed = append(listed, k.Key)
		}
		if want := []string{"a", "big", "c", "idle-a", "idle-z", "many", "rated", "seq"}; !slices.Equal(listed, want) {
			t.Fatalf("limit %d: listed %q, want %q", limit, listed, want)
		}
		if k := keyInfo(t, got, "a"); k.Running != 2 {
			t.Fatalf("a: running %d, want the 2 readable", k.Running)
		}
		if k := keyInfo(t, got, "c"); k.ReadyZones != 1 {
			t.Fatalf("c: %d ready zones, want the 1 readable", k.ReadyZones)
		}
		if k := keyInfo(t, got, "rated"); k.Window != nil || k.Running != 1 {
			t.Fatalf("rated: %+v", k)
		}
		if k := keyInfo(t, got, "many"); k.Running != fdbq.MaxZones {
			t.Fatalf("many: running %d, want the first %d shards", k.Running, fdbq.MaxZones)
		}
		wantBad := map[string][]byte{
			`running count of fairness key "a": a value of 3 bytes, not 8`: runningA,
			`malformed zone mark`:                                             malformedMark,
			`zone mark of a fairness key that is not valid`:                   badKeyMark,
			`malformed running count key`:                                     cutString,
			`rate window of fairness key "rated": a value of 5 bytes, not 16`: window,
			`fairness key "many" has more than 256 running counts`:            many[fdbq.MaxZones],
		}
		if len(bad) != len(wantBad) {
			for _, u := range bad {
				t.Log(u.Err)
			}
			t.Fatalf("limit %d: %d unreadable, want %d", limit, len(bad), len(wantBad))
		}
		for _, u := range bad {
			found := false
			for msg, key := range wantBad {
				if strings.Contains(u.Err.Error(), msg) && string(u.Key) == string(key) && errors.Is(u.Err, fdbq.ErrCorrupt) {
					found = true
				}
			}
			if !found {
				t.Fatalf("limit %d: unexpected unreadable %q: %v", limit, u.Key, u.Err)
			}
		}
	}
	if err := q.DB().Transact(ctx, func(tx kv.Tx) error {
		tx.Set(keysRoot.MustPack(tuple.Tuple{8, "email"}), []byte("{"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Keys(ctx, q.DB(), "email", fdbq.KeysOptions{}); !errors.Is(err, fdbq.ErrCorrupt) {
		t.Fatalf("Keys of a type whose settings do not decode: %v", err)
	}
}
