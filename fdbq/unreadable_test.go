package fdbq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// What the store can hold that no version of fdbq writes, planted by the
// tests below as a damaged or foreign store would hold it.
var (
	// unreadableRecords are job records that do not decode, or decode
	// to what no version stores.
	unreadableRecords = map[string][]byte{
		"unknown format": {0x7f, 1, 0, 0},
		"bad state":      {0x01, 0x09, 0x00, 0x00},
		"not json":       []byte("{not json"),
		"json state":     []byte(`{"s":"lost","ta":1,"ts":1}`),
		"empty":          {},
	}
	unRoot = tuple.FromBytes(fdbq.DefaultPrefix)
)

// unPlant writes key=value as a damaged store would hold it.
func unPlant(t *testing.T, db *kv.DB, kvs ...[]byte) {
	t.Helper()
	if err := db.Transact(context.Background(), func(tx kv.Tx) error {
		for i := 0; i+1 < len(kvs); i += 2 {
			tx.Set(kvs[i], kvs[i+1])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// unInState adds job id and moves it to state. A pending job is scheduled
// a long way ahead, so that accepting the others does not take it.
func (x *trQ) unInState(id string, state fdbq.State) {
	x.t.Helper()
	if state == fdbq.Pending {
		x.add(fdbq.NewJob{ID: id, ScheduledAt: x.c.Now().Add(100 * time.Hour)})
		return
	}
	x.add(fdbq.NewJob{ID: id})
	l := x.acceptOne(id)
	if state == fdbq.Finished {
		trMust(x.t, "finish", x.q.Finish(x.ctx, x.q.DB(), l, nil))
	}
}

// unListAll lists every page of state, limit at a time, and returns the
// ids of the jobs and of the unreadable entries (a key without an id as
// "key:…").
func unListAll(t *testing.T, q *fdbq.Queue, state fdbq.State, limit int) (jobs, bad []string) {
	t.Helper()
	cursor := ""
	for range 1000 {
		p, err := q.List(context.Background(), q.DB(), "email", fdbq.ListOptions{State: state, Limit: limit, Cursor: cursor})
		if err != nil {
			t.Fatalf("list %s, limit %d, after %q: %v", state, limit, cursor, err)
		}
		if len(p.Jobs)+len(p.Unreadable) > limit {
			t.Fatalf("a page of limit %d holds %d jobs and %d unreadable entries", limit, len(p.Jobs), len(p.Unreadable))
		}
		for _, j := range p.Jobs {
			jobs = append(jobs, j.ID)
		}
		for _, u := range p.Unreadable {
			if !errors.Is(u.Err, fdbq.ErrCorrupt) || len(u.Key) == 0 {
				t.Fatalf("unreadable entry %+v: want a key and ErrCorrupt", u)
			}
			if u.ID == "" {
				bad = append(bad, "key:"+u.Err.Error())
				continue
			}
			if !strings.Contains(u.Err.Error(), "email/"+u.ID) {
				t.Fatalf("the error of %s does not name the job: %v", u.ID, u.Err)
			}
			bad = append(bad, u.ID)
		}
		if p.Next == "" {
			return jobs, bad
		}
		cursor = p.Next
	}
	t.Fatal("listing does not end")
	return nil, nil
}

// A listing reports the entries whose job it cannot read, a record that
// does not decode or a key fdbq does not write, and lists the other jobs,
// whatever the page size.
func TestUnreadableListGoesOn(t *testing.T) {
	malformed := map[fdbq.State][][]byte{
		fdbq.Pending: {
			unRoot.MustPack(tuple.Tuple{2, "email", nil}),
			unRoot.MustPack(tuple.Tuple{2, "email", int64(0), "no time"}),
			unRoot.MustPack(tuple.Tuple{2, "email", int64(-1), int64(5), "id", "extra"}),
		},
		fdbq.Running: {
			unRoot.MustPack(tuple.Tuple{5, "email", []byte("not a time")}),
			unRoot.MustPack(tuple.Tuple{5, "email", int64(1)}),
		},
		fdbq.Finished: {
			unRoot.MustPack(tuple.Tuple{6, "email", int64(2), "id", "extra"}),
			append(unRoot.MustPack(tuple.Tuple{6, "email"}), 0x15, 0x01, 0xfe), // not a tuple
		},
	}
	for _, state := range []fdbq.State{fdbq.Pending, fdbq.Running, fdbq.Finished} {
		t.Run(string(state), func(t *testing.T) {
			x := newTrQ(t)
			var want, wantBad []string
			i := 0
			for name, b := range unreadableRecords {
				good, bad := fmt.Sprintf("good%d", i), fmt.Sprintf("bad%d-%s", i, name)
				i++
				x.unInState(good, state)
				x.unInState(bad, state)
				x.c.Advance(time.Second)
				unPlant(t, x.q.DB(), trJobKey("email", bad), b)
				want, wantBad = append(want, good), append(wantBad, bad)
			}
			for _, k := range malformed[state] {
				unPlant(t, x.q.DB(), k, nil)
			}
			slices.Sort(want)
			slices.Sort(wantBad)
			for _, limit := range []int{1, 2, 3, 1000} {
				jobs, bad := unListAll(t, x.q, state, limit)
				slices.Sort(jobs)
				var ids []string
				keys := 0
				for _, b := range bad {
					if strings.HasPrefix(b, "key:") {
						keys++
						if !strings.Contains(b, "malformed "+string(state)+" index entry") {
							t.Fatalf("limit %d: %s", limit, b)
						}
						continue
					}
					ids = append(ids, b)
				}
				slices.Sort(ids)
				if !slices.Equal(jobs, want) || !slices.Equal(ids, wantBad) || keys != len(malformed[state]) {
					t.Fatalf("limit %d: listed %v, unreadable %v and %d keys; want %v, %v and %d",
						limit, jobs, ids, keys, want, wantBad, len(malformed[state]))
				}
			}
		})
	}
}

// unWantEntries checks how many entries the type's three indexes hold,
// and that none names id.
func (x *trQ) unWantEntries(id string, n int) {
	x.t.Helper()
	got := 0
	for _, tag := range []int{2, 5, 6, 11, 12} {
		kvs, err := kv.ReadTransact(x.ctx, x.q.DB(), func(tx kv.ReadTx) ([]kv.KeyValue, error) {
			return tx.GetRange(unRoot.Sub(tag, "email").Range(), kv.RangeOptions{})
		})
		trMust(x.t, "read index", err)
		for _, e := range kvs {
			if tu, err := unRoot.Unpack(e.Key); err == nil && tu[len(tu)-1] == id {
				x.t.Fatalf("%s still has its index entry %v", id, tu)
			}
		}
		got += len(kvs)
	}
	if got != n {
		x.t.Fatalf("the indexes hold %d entries, want %d", got, n)
	}
}

// Remove deletes a job whose record does not decode, in every state, with
// its index entry and count: made from the record's times when they can
// be read, found through the indexes when not (past many other jobs, in
// the caller's transaction too). Cancel and Requeue say what is wrong.
func TestUnreadableRemove(t *testing.T) {
	records := map[string]func(good []byte) []byte{
		"times readable": func(good []byte) []byte { return append(good[:len(good)-1:len(good)-1], 0x7f, 0x7f) },
		"cut short":      func(good []byte) []byte { return good[:5] },
		"unknown format": func([]byte) []byte { return unreadableRecords["unknown format"] },
		"not json":       func([]byte) []byte { return unreadableRecords["not json"] },
		"json state":     func([]byte) []byte { return unreadableRecords["json state"] },
	}
	for _, state := range []fdbq.State{fdbq.Pending, fdbq.Running, fdbq.Finished} {
		for name, spoil := range records {
			for _, inTx := range []bool{false, true} {
				t.Run(fmt.Sprint(state, "/", name, "/in a transaction=", inTx), func(t *testing.T) {
					x := newTrQ(t)
					batch := 3
					if name == "times readable" {
						batch = -1 // a search fails: the entry must be made from the times
					}
					restore := fdbq.SetLocateBatch(batch)
					defer restore()
					// Others of each state before and after it, more than a
					// search reads at a time.
					for i := range 4 {
						for _, s := range []fdbq.State{fdbq.Pending, fdbq.Running, fdbq.Finished} {
							x.unInState(fmt.Sprintf("%s-%d", s, i), s)
						}
						if i == 1 {
							x.unInState("bad", state)
						}
						x.c.Advance(time.Second)
					}
					before := x.counts()
					unPlant(t, x.q.DB(), trJobKey("email", "bad"), spoil(x.raw(trJobKey("email", "bad"))))

					for _, op := range []struct {
						name string
						do   func(context.Context, kv.Transactor, string, string) error
					}{{"cancel", x.q.Cancel}, {"requeue", x.q.Requeue}} {
						err := op.do(x.ctx, x.q.DB(), "email", "bad")
						if !errors.Is(err, fdbq.ErrCorrupt) || !strings.Contains(err.Error(), "email/bad") ||
							!strings.Contains(err.Error(), "cannot "+op.name) {
							t.Fatalf("%s: %v; want ErrCorrupt naming the job and the operation", op.name, err)
						}
					}
					if _, err := x.q.Get(x.ctx, x.q.DB(), "email", "bad"); !errors.Is(err, fdbq.ErrCorrupt) {
						t.Fatalf("get: %v; want ErrCorrupt", err)
					}

					if inTx {
						trMust(t, "remove", x.q.DB().Transact(x.ctx, func(tx kv.Tx) error {
							return x.q.Remove(x.ctx, tx, "email", "bad")
						}))
					} else {
						trMust(t, "remove", x.q.Remove(x.ctx, x.q.DB(), "email", "bad"))
					}
					trWantErr(t, "get after remove", func() error { _, err := x.q.Get(x.ctx, x.q.DB(), "email", "bad"); return err }(), fdbq.ErrNotFound)
					x.unWantEntries("bad", 12)
					want := before
					want[slices.Index([]fdbq.State{fdbq.Pending, fdbq.Running, fdbq.Finished}, state)]--
					if got := x.counts(); got != want {
						t.Fatalf("counts %v, want %v", got, want)
					}
					trWantErr(t, "remove again", x.q.Remove(x.ctx, x.q.DB(), "email", "bad"), fdbq.ErrNotFound)
					// A pending entry left behind would carry a copy of the
					// record, which Accept would take.
					x.c.Advance(200 * time.Hour)
					ls := x.accept(fdbq.AcceptOptions{Max: 100})
					if slices.Contains(trLeaseIDs(ls), "bad") {
						t.Fatalf("a removed job was accepted: %v", trLeaseIDs(ls))
					}
				})
			}
		}
	}
}

// A record that no index entry points at is removed alone.
func TestUnreadableRemoveWithoutEntry(t *testing.T) {
	x := newTrQ(t)
	x.unInState("a", fdbq.Pending)
	unPlant(t, x.q.DB(), trJobKey("email", "bad"), unreadableRecords["unknown format"])
	trMust(t, "remove", x.q.Remove(x.ctx, x.q.DB(), "email", "bad"))
	trWantErr(t, "get after remove", func() error { _, err := x.q.Get(x.ctx, x.q.DB(), "email", "bad"); return err }(), fdbq.ErrNotFound)
	x.wantCounts(1, 0, 0)
	x.is("a", fdbq.Pending, "", 0)
}

// Types lists every type, a type whose settings do not decode and a key
// that names no type with their error; GetType of such a type says what is
// wrong.
func TestUnreadableTypes(t *testing.T) {
	x := newTrQ(t)
	for _, name := range []string{"aaa", "bbb", "ccc"} {
		trMust(t, "set type", x.q.SetType(x.ctx, x.q.DB(), name, fdbq.DefaultTypeSettings()))
	}
	x.add(fdbq.NewJob{Type: "bbb", ID: "j"})
	unPlant(t, x.q.DB(),
		unRoot.MustPack(tuple.Tuple{8, "bbb"}), []byte("garbage"),
		unRoot.MustPack(tuple.Tuple{8, int64(7)}), []byte("{}"),
	)
	types, err := x.q.Types(x.ctx, x.q.DB())
	trMust(t, "types", err)
	var names []string
	for _, ti := range types {
		switch ti.Name {
		case "bbb":
			if !errors.Is(ti.Err, fdbq.ErrCorrupt) || !strings.Contains(ti.Err.Error(), `"bbb"`) || ti.Pending != 1 {
				t.Fatalf("bbb: %+v; want ErrCorrupt naming it, and its counts", ti)
			}
		case "":
			if !errors.Is(ti.Err, fdbq.ErrCorrupt) || !strings.Contains(ti.Err.Error(), "malformed type key") {
				t.Fatalf("a key that names no type: %+v", ti)
			}
		default:
			if ti.Err != nil || !ti.Settings.Equal(fdbq.DefaultTypeSettings()) {
				t.Fatalf("%s: %+v", ti.Name, ti)
			}
		}
		names = append(names, ti.Name)
	}
	if !slices.Equal(names, []string{"aaa", "bbb", "ccc", "email", ""}) {
		t.Fatalf("types %q", names)
	}
	_, err = x.q.GetType(x.ctx, x.q.DB(), "bbb")
	if !errors.Is(err, fdbq.ErrCorrupt) || !strings.Contains(err.Error(), `type "bbb": corrupt settings`) {
		t.Fatalf("get type: %v; want ErrCorrupt naming the type", err)
	}
	if _, err := x.q.GetType(x.ctx, x.q.DB(), "aaa"); err != nil {
		t.Fatal(err)
	}
	// Registering it again replaces what cannot be read.
	trMust(t, "set type", x.q.SetType(x.ctx, x.q.DB(), "bbb", fdbq.DefaultTypeSettings()))
	if _, err := x.q.GetType(x.ctx, x.q.DB(), "bbb"); err != nil {
		t.Fatal(err)
	}
}

// A declared type whose stored settings do not decode gets the declared
// ones, rather than keeping the program from starting.
func TestUnreadableDeclaredTypeRepaired(t *testing.T) {
	x := newTrQ(t)
	unPlant(t, x.q.DB(), unRoot.MustPack(tuple.Tuple{8, "send-email"}), []byte("garbage"))
	s := fdbq.DefaultTypeSettings()
	s.Retention = time.Minute
	trMust(t, "declare", x.q.DeclareType(x.ctx, x.q.DB(), "send-email", s))
	info, err := x.q.GetType(x.ctx, x.q.DB(), "send-email")
	if err != nil || !info.Settings.Equal(s) {
		t.Fatalf("after declaring: %+v, %v; want the declared settings", info, err)
	}
}

// A key of the pending index that fdbq does not write does not keep
// OldestDue from the jobs after it.
func TestUnreadableOldestDue(t *testing.T) {
	x := newTrQ(t)
	now := x.c.Now()
	x.add(fdbq.NewJob{ID: "a", Priority: -5, ScheduledAt: now.Add(-time.Hour)})
	for _, k := range [][]byte{
		unRoot.MustPack(tuple.Tuple{2, "email", nil}),
		unRoot.MustPack(tuple.Tuple{2, "email", int64(-9)}),
		unRoot.MustPack(tuple.Tuple{2, "email", int64(-8), "x", "y"}),
		append(unRoot.MustPack(tuple.Tuple{2, "email", int64(-7)}), 0x15, 0x01, 0xfe),
	} {
		unPlant(t, x.q.DB(), k, nil)
	}
	got, err := x.q.OldestDue(x.ctx, x.q.DB(), "email")
	if err != nil || !got.Equal(now.Add(-time.Hour)) {
		t.Fatalf("oldest due %v, %v; want %v", got, err, now.Add(-time.Hour))
	}
}

// What cannot be read is an *fdbq.Error of ErrCorrupt: its Detail names
// the job and what is wrong, without the sentinel's text, and an
// operation that cannot be done on it says so in the Detail too.
func TestUnreadableErrorFields(t *testing.T) {
	x := newTrQ(t)
	unPlant(t, x.q.DB(), trJobKey("email", "bad"), unreadableRecords["unknown format"])
	_, err := x.q.Get(x.ctx, x.q.DB(), "email", "bad")
	var fe *fdbq.Error
	if !errors.As(err, &fe) || fe.Err != fdbq.ErrCorrupt || fe.Detail != "job email/bad: corrupt record: unknown format 0x7f" ||
		err.Error() != "fdbq: unreadable data in the store: "+fe.Detail || fe.Cause == nil {
		t.Fatalf("get: %#v (%v)", fe, err)
	}
	err = x.q.Cancel(x.ctx, x.q.DB(), "email", "bad")
	if !errors.As(err, &fe) || fe.Err != fdbq.ErrCorrupt ||
		fe.Detail != "job email/bad: corrupt record: unknown format 0x7f (cannot cancel it; removing the job is all that can be done with it)" {
		t.Fatalf("cancel: %#v (%v)", fe, err)
	}
}

// Finished jobs are listed in finish order, then id, across the finished
// index's lanes, with keys that are no entry (malformed, in the wrong
// lane, outside every lane) sprinkled among them: whatever the page size,
// every job is listed once, in that order, every such key is reported
// once, and no page holds more than its limit. Seeded (JOBSTAGE_SEED).
func TestListFinishedAcrossLanes(t *testing.T) {
	for _, seed := range modelSeedList(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d (rerun with JOBSTAGE_SEED=%d)", seed, seed)
			rng := rand.New(rand.NewPCG(seed, 7))
			x := newTrQ(t)
			type fin struct {
				at time.Time
				id string
			}
			var want []fin
			for i := range 40 + rng.IntN(40) {
				id := fmt.Sprintf("f%03d", i)
				x.unInState(id, fdbq.Finished)
				want = append(want, fin{x.get(id).FinishedAt, id})
				if rng.IntN(3) > 0 {
					x.c.Advance(time.Duration(1+rng.IntN(3)) * time.Millisecond) // ties too
				}
			}
			slices.SortFunc(want, func(a, b fin) int {
				if c := a.at.Compare(b.at); c != 0 {
					return c
				}
				return strings.Compare(a.id, b.id)
			})
			var wantIDs []string
			for _, f := range want {
				wantIDs = append(wantIDs, f.id)
			}
			sub := unRoot.Sub(6, "email")
			var keys [][]byte
			for range 5 + rng.IntN(15) {
				lane := int64(rng.IntN(16))
				var k []byte
				switch rng.IntN(5) {
				case 0: // an entry in a lane not its id's
					id := fmt.Sprintf("w%d", rng.IntN(1000))
					if int64(fdbq.LaneOf(id)) == lane {
						lane = (lane + 1) % 16
					}
					k = sub.MustPack(tuple.Tuple{lane, want[rng.IntN(len(want))].at.UnixMilli(), id})
				case 1: // one element too many
					k = sub.MustPack(tuple.Tuple{lane, int64(rng.IntN(1 << 20)), "id", "extra"})
				case 2: // not a tuple after the lane
					k = append(sub.MustPack(tuple.Tuple{lane}), 0xfe, byte(rng.IntN(256)))
				case 3: // before the first lane
					k = sub.MustPack(tuple.Tuple{int64(-1 - rng.IntN(5)), "x"})
				default: // after the last lane
					k = sub.MustPack(tuple.Tuple{"after", int64(rng.IntN(100))})
				}
				if !slices.ContainsFunc(keys, func(o []byte) bool { return string(o) == string(k) }) {
					keys = append(keys, k)
				}
				unPlant(t, x.q.DB(), k, nil)
			}
			for _, limit := range []int{1, 2, 3, 7, 64, 1000} {
				var ids []string
				reported := map[string]int{}
				cursor := ""
				for pages := 0; ; pages++ {
					if pages > 1000 {
						t.Fatalf("limit %d: the listing does not end", limit)
					}
					p, err := x.q.List(x.ctx, x.q.DB(), "email", fdbq.ListOptions{State: fdbq.Finished, Limit: limit, Cursor: cursor})
					if err != nil {
						t.Fatalf("limit %d: %v", limit, err)
					}
					if n := len(p.Jobs) + len(p.Unreadable); n > limit {
						t.Fatalf("limit %d: a page of %d", limit, n)
					}
					for _, j := range p.Jobs {
						ids = append(ids, j.ID)
					}
					for _, u := range p.Unreadable {
						reported[string(u.Key)]++
					}
					if cursor = p.Next; cursor == "" {
						break
					}
				}
				if !slices.Equal(ids, wantIDs) {
					t.Fatalf("limit %d: listed %v, want %v", limit, ids, wantIDs)
				}
				for _, k := range keys {
					if reported[string(k)] != 1 {
						t.Fatalf("limit %d: key % x reported %d times, want once", limit, k, reported[string(k)])
					}
				}
				if len(reported) != len(keys) {
					t.Fatalf("limit %d: %d keys reported, %d planted", limit, len(reported), len(keys))
				}
			}
		})
	}
}
