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

// filterTime is the time of j that a listing of its state filters by.
func filterTime(j *fdbq.Job) time.Time {
	switch j.State {
	case fdbq.Pending:
		return j.ScheduledAt
	case fdbq.Running:
		return j.StartedAt
	}
	return j.FinishedAt
}

// filterMatches is the oracle of a listing's filters.
func filterMatches(j *fdbq.Job, o fdbq.ListOptions) bool {
	t := filterTime(j)
	return j.State == o.State &&
		(o.Key == "" || j.Key == o.Key) &&
		strings.HasPrefix(j.ID, o.IDPrefix) &&
		(o.Since.IsZero() || !t.Before(o.Since)) &&
		(o.Until.IsZero() || t.Before(o.Until))
}

// listAll follows a listing's pages from o to its end, checking that no
// page holds more than its limit and that it ends, and returns the ids
// listed in order and the pages' sizes.
func listAll(t *testing.T, q *fdbq.Queue, tr kv.ReadTransactor, o fdbq.ListOptions) ([]string, []int) {
	t.Helper()
	var ids []string
	var sizes []int
	for {
		p, err := q.List(context.Background(), tr, "email", o)
		if err != nil {
			t.Fatalf("list %+v: %v", o, err)
		}
		if len(p.Unreadable) > 0 {
			t.Fatalf("list %+v: unreadable %v", o, p.Unreadable)
		}
		if n := len(p.Jobs); o.Limit > 0 && n > o.Limit {
			t.Fatalf("list %+v: a page of %d", o, n)
		}
		for _, j := range p.Jobs {
			ids = append(ids, j.ID)
		}
		sizes = append(sizes, len(p.Jobs))
		if p.Next == "" {
			return ids, sizes
		}
		if len(sizes) > 5000 {
			t.Fatalf("list %+v: the listing does not end", o)
		}
		o.Cursor = p.Next
	}
}

// TestListFilters: jobs of several keys, id prefixes and times, in every
// state (pending ones both due and scheduled for later), listed with
// random filters a few at a time, with the bound on a page's examined
// entries small or not: the pages together list exactly the jobs that
// match, once each, in the order of the unfiltered listing. Seeded
// (JOBSTAGE_SEED).
func TestListFilters(t *testing.T) {
	for _, seed := range modelSeedList(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d (rerun with JOBSTAGE_SEED=%d)", seed, seed)
			rng := rand.New(rand.NewPCG(seed, 12))
			q, c := newQueue(t)
			ctx := context.Background()
			keys := []string{"", "", "k1", "k2", "tenant-3"}
			prefixes := []string{"a", "ab", "b", "é", "x/"}
			n := 120 + rng.IntN(80)
			ids := make([]string, n)
			for i := range n {
				ids[i] = fmt.Sprintf("%s%03d", prefixes[rng.IntN(len(prefixes))], rng.IntN(1000)*1000+i)
				addJob(t, q, fdbq.NewJob{ID: ids[i], Key: keys[rng.IntN(len(keys))], Priority: rng.IntN(3) - 1,
					ScheduledAt: c.Now().Add(time.Duration(rng.IntN(3000)-1000) * time.Millisecond)})
				c.Advance(time.Duration(rng.IntN(3)) * time.Millisecond)
			}
			// Accepts at different times; of what they took, some
			// finish, fail (back to pending a second later, or
			// finished failed) or are canceled, at different times.
			for range 10 + rng.IntN(20) {
				for _, l := range acceptNoWait(t, q, fdbq.AcceptOptions{Max: 1 + rng.IntN(8)}) {
					var err error
					switch rng.IntN(5) {
					case 0:
						err = q.Finish(ctx, q.DB(), l, nil)
					case 1:
						err = q.Fail(ctx, q.DB(), l, "no")
					case 2:
						err = q.Cancel(ctx, q.DB(), "email", l.ID)
					}
					if err != nil {
						t.Fatal(err)
					}
					c.Advance(time.Duration(rng.IntN(4)) * time.Millisecond)
				}
				c.Advance(time.Duration(1+rng.IntN(40)) * time.Millisecond)
			}
			jobs := map[string]*fdbq.Job{}
			byState := map[fdbq.State][]*fdbq.Job{}
			for _, id := range ids {
				j, err := q.Get(ctx, q.DB(), "email", id)
				if err != nil {
					t.Fatal(err)
				}
				jobs[id] = j
				byState[j.State] = append(byState[j.State], j)
			}
			t.Logf("%d pending, %d running, %d finished", len(byState[fdbq.Pending]), len(byState[fdbq.Running]), len(byState[fdbq.Finished]))
			for _, state := range []fdbq.State{fdbq.Pending, fdbq.Running, fdbq.Finished} {
				all, _ := listAll(t, q, q.DB(), fdbq.ListOptions{State: state, Limit: 1000})
				if len(all) != len(byState[state]) {
					t.Fatalf("%s: the unfiltered listing has %d jobs, the store %d", state, len(all), len(byState[state]))
				}
				times := make([]time.Time, 0, len(all))
				for _, id := range all {
					if jobs[id].State != state {
						t.Fatalf("%s: listed %s, which is %s", state, id, jobs[id].State)
					}
					times = append(times, filterTime(jobs[id]))
				}
				slices.SortFunc(times, time.Time.Compare)
				pick := func() time.Time {
					if len(times) == 0 || rng.IntN(4) == 0 {
						return time.Time{}
					}
					tm := times[rng.IntN(len(times))]
					switch rng.IntN(4) {
					case 0:
						tm = tm.Add(time.Duration(rng.IntN(2_000_000)) - time.Millisecond) // within a millisecond either side
					case 1:
						tm = tm.Add(time.Duration(rng.IntN(11)-5) * time.Millisecond)
					}
					return tm
				}
				for combo := range 16 {
					o := fdbq.ListOptions{State: state, Limit: []int{1, 2, 3, 5, 8, 50}[rng.IntN(6)]}
					if rng.IntN(2) == 0 {
						o.Key = []string{"k1", "k2", "tenant-3", "none"}[rng.IntN(4)]
					}
					if rng.IntN(2) == 0 {
						o.IDPrefix = []string{"a", "ab", "b", "é", "x/", "a1", "zzz"}[rng.IntN(7)]
					}
					o.Since, o.Until = pick(), pick()
					if !o.Since.IsZero() && !o.Until.IsZero() && o.Since.After(o.Until) {
						o.Since, o.Until = o.Until, o.Since
					}
					scan := []int{18, 19, 40, 1000}[rng.IntN(4)]
					restore := fdbq.SetListScan(scan)
					got, sizes := listAll(t, q, q.DB(), o)
					restore()
					var want []string
					for _, id := range all {
						if filterMatches(jobs[id], o) {
							want = append(want, id)
						}
					}
					if !slices.Equal(got, want) {
						t.Fatalf("%s combo %d, scan %d, %+v:\n got %v\nwant %v\npages %v", state, combo, scan, o, got, want, sizes)
					}
				}
			}
		})
	}
}

// TestListFilterBound: a filter that matches none of many jobs gives
// pages that are empty, each with Next set until the last, each reading
// at most the bound of index entries and records; and a filter the
// index's order answers (a key of pending jobs due, a time range of
// finished jobs) reads nothing of the jobs it leaves out.
func TestListFilterBound(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	cdb, counts := countingDB(q.DB())
	// pages lists with o to the end through cdb, and checks every page
	// is empty and reads at most keys index entries and gets records.
	pages := func(o fdbq.ListOptions, keys, gets int64) int {
		t.Helper()
		o.Limit = 10
		n := 0
		for {
			g0, _, k0 := counts.snapshot()
			p, err := q.List(ctx, cdb, "email", o)
			if err != nil {
				t.Fatal(err)
			}
			g1, _, k1 := counts.snapshot()
			n++
			if len(p.Jobs)+len(p.Unreadable) != 0 {
				t.Fatalf("%+v: page %d lists %d jobs", o, n, len(p.Jobs))
			}
			if k1-k0 > keys || g1-g0 > gets {
				t.Fatalf("%+v: page %d read %d index entries and %d records; the bound is %d and %d", o, n, k1-k0, g1-g0, keys, gets)
			}
			if p.Next == "" {
				return n
			}
			if n > 10_000 {
				t.Fatalf("%+v: the listing does not end", o)
			}
			o.Cursor = p.Next
		}
	}

	// 2,500 pending jobs, due, of key k1: at the real bound, an id
	// prefix that none has reads at most 1,001 entries a page, and no
	// record (the entry's key has the id).
	const n = 2500
	for b := 0; b < n; b += 500 {
		batch := make([]fdbq.NewJob, 500)
		for i := range batch {
			batch[i] = fdbq.NewJob{Type: "email", ID: fmt.Sprintf("j%05d", b+i), Key: "k1"}
		}
		if _, err := q.AddBatch(ctx, q.DB(), batch); err != nil {
			t.Fatal(err)
		}
	}
	if got := pages(fdbq.ListOptions{State: fdbq.Pending, IDPrefix: "zzz"}, 1001, 0); got != 3 {
		t.Fatalf("%d pages over %d jobs at 1,001 entries a page, want 3", got, n)
	}
	// A scheduled time that none has: 1,001 entries a page, no record.
	if got := pages(fdbq.ListOptions{State: fdbq.Pending, Until: c.Now().Add(-time.Hour)}, 1001, 0); got != 3 {
		t.Fatalf("%d pages by time, want 3", got)
	}
	// Another key: the key's zones are empty, and the scheduled index
	// too (every job is due). One page, nothing read.
	if got := pages(fdbq.ListOptions{State: fdbq.Pending, Key: "k2"}, 0, 0); got != 1 {
		t.Fatalf("%d pages for another key, want 1", got)
	}

	// Running and finished with a bound of 90 entries a page (5 of each
	// of the finished index's 18 ranges).
	defer fdbq.SetListScan(90)()
	const m = 400
	var leases []*fdbq.Lease
	for len(leases) < m {
		leases = append(leases, acceptNoWait(t, q, fdbq.AcceptOptions{Max: min(100, m-len(leases))})...)
		c.Advance(time.Millisecond)
	}
	// A start before every job's: the key and the start are in the
	// record, read for each entry examined.
	if got := pages(fdbq.ListOptions{State: fdbq.Running, Until: c.Now().Add(-time.Hour)}, 91, 91); got < m/91 || got > m/91+2 {
		t.Fatalf("%d pages of running jobs, want about %d", got, m/91+1)
	}
	if got := pages(fdbq.ListOptions{State: fdbq.Running, Key: "k2"}, 91, 91); got < m/91 || got > m/91+2 {
		t.Fatalf("%d pages of running jobs, want about %d", got, m/91+1)
	}
	for _, l := range leases {
		if err := q.Finish(ctx, q.DB(), l, nil); err != nil {
			t.Fatal(err)
		}
	}
	c.Advance(time.Millisecond)
	// A key none has: at most 90 entries and records a page, and each
	// page moves on by at least the 5 of one range.
	if got := pages(fdbq.ListOptions{State: fdbq.Finished, Key: "k2"}, 90, 90); got > m/5+1 {
		t.Fatalf("%d pages of finished jobs, want at most %d", got, m/5+1)
	}
	// A finish time none has: each lane's range is cut to it, empty.
	if got := pages(fdbq.ListOptions{State: fdbq.Finished, Since: c.Now()}, 0, 0); got != 1 {
		t.Fatalf("%d pages by finish time, want 1", got)
	}
}

// TestListFiltersRefused: filters that are no good, and cursors of
// another listing, are refused with ErrInvalidJob naming the problem,
// before anything is read; cursors that are not one are refused too.
func TestListFiltersRefused(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	for i := range 4 {
		addJob(t, q, fdbq.NewJob{ID: fmt.Sprintf("a%d", i), Key: "k1"})
	}
	now := c.Now()
	first := func(o fdbq.ListOptions) string {
		t.Helper()
		o.Limit = 1
		p, err := q.List(ctx, q.DB(), "email", o)
		if err != nil || p.Next == "" {
			t.Fatalf("list %+v: %v, next %q", o, err, p.Next)
		}
		return p.Next
	}
	plain := first(fdbq.ListOptions{State: fdbq.Pending})
	byKey := first(fdbq.ListOptions{State: fdbq.Pending, Key: "k1"})
	byPrefix := first(fdbq.ListOptions{State: fdbq.Pending, IDPrefix: "a"})
	_, digest, _ := strings.Cut(byKey, ".")
	for _, tc := range []struct {
		name string
		o    fdbq.ListOptions
		want string
	}{
		{"a prefix with a control character", fdbq.ListOptions{State: fdbq.Pending, IDPrefix: "a\nb"}, "list: id prefix filter: id prefix \"a\\nb\" has a control character at byte 1"},
		{"a prefix not UTF-8", fdbq.ListOptions{State: fdbq.Pending, IDPrefix: "a\xff"}, "id prefix \"a\\xff\" is not valid UTF-8 at byte 1"},
		{"a prefix too long", fdbq.ListOptions{State: fdbq.Pending, IDPrefix: strings.Repeat("a", fdbq.MaxIDSize+1)}, "id prefix of 257 bytes is longer than 256"},
		{"a key with a control character", fdbq.ListOptions{State: fdbq.Pending, Key: "k\x00"}, "list: key filter: fairness key"},
		{"a key too long", fdbq.ListOptions{State: fdbq.Pending, Key: strings.Repeat("k", fdbq.MaxKeySize+1)}, "fairness key of 129 bytes is longer than 128"},
		{"since after until", fdbq.ListOptions{State: fdbq.Finished, Since: now, Until: now.Add(-time.Nanosecond)}, "list: since " + now.Format(time.RFC3339Nano) + " is after until"},
		{"an unfiltered cursor with a filter", fdbq.ListOptions{State: fdbq.Pending, Key: "k1", Cursor: plain}, "the cursor is from a listing without filters"},
		{"a filtered cursor without filters", fdbq.ListOptions{State: fdbq.Pending, Cursor: byKey}, "the cursor is from a listing with filters"},
		{"a key's cursor with a prefix", fdbq.ListOptions{State: fdbq.Pending, IDPrefix: "a", Cursor: byKey}, "the cursor is from a listing with other filters"},
		{"a prefix's cursor with another prefix", fdbq.ListOptions{State: fdbq.Pending, IDPrefix: "a0", Cursor: byPrefix}, "the cursor is from a listing with other filters"},
		{"a key's cursor with another key", fdbq.ListOptions{State: fdbq.Pending, Key: "k2", Cursor: byKey}, "the cursor is from a listing with other filters"},
		{"a key's cursor with a time", fdbq.ListOptions{State: fdbq.Pending, Key: "k1", Since: now, Cursor: byKey}, "the cursor is from a listing with other filters"},
		{"a key's cursor of another state", fdbq.ListOptions{State: fdbq.Finished, Key: "k1", Cursor: byKey}, "or of another type or state"},
		{"a forged position", fdbq.ListOptions{State: fdbq.Pending, Key: "k1", Cursor: "AAAA." + digest}, "list: bad cursor"},
		{"not base64", fdbq.ListOptions{State: fdbq.Pending, Key: "k1", Cursor: "%%." + digest}, "list: bad cursor"},
		{"dots", fdbq.ListOptions{State: fdbq.Pending, Key: "k1", Cursor: "..."}, "other filters"},
		{"a dot", fdbq.ListOptions{State: fdbq.Running, Cursor: "."}, "the cursor is from a listing with filters"},
	} {
		_, err := q.List(ctx, q.DB(), "email", tc.o)
		if !errors.Is(err, fdbq.ErrInvalidJob) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidJob saying %q", tc.name, err, tc.want)
		}
	}
	// A cursor goes on with the same filters, whatever the limit; a time
	// is the same filter when it is in the same millisecond of the
	// store's (rounded up).
	p, err := q.List(ctx, q.DB(), "email", fdbq.ListOptions{State: fdbq.Pending, Key: "k1", Limit: 3, Cursor: byKey})
	if err != nil || len(p.Jobs) != 3 || p.Next != "" {
		t.Fatalf("the key's second page: %v, %+v", err, p)
	}
	since := first(fdbq.ListOptions{State: fdbq.Pending, Since: now.Add(-time.Hour)})
	if _, err := q.List(ctx, q.DB(), "email", fdbq.ListOptions{State: fdbq.Pending, Since: now.Add(-time.Hour + time.Microsecond), Cursor: since}); !errors.Is(err, fdbq.ErrInvalidJob) {
		t.Fatalf("a cursor of another millisecond: %v", err)
	}
	if _, err := q.List(ctx, q.DB(), "email", fdbq.ListOptions{State: fdbq.Pending, Since: now.Add(-time.Hour - time.Microsecond), Cursor: since}); err != nil {
		t.Fatalf("the cursor of the same filter: %v", err)
	}
	// Since equal to Until lists nothing.
	if ids, _ := listAll(t, q, q.DB(), fdbq.ListOptions{State: fdbq.Pending, Since: now, Until: now}); len(ids) != 0 {
		t.Fatalf("an empty time range lists %v", ids)
	}
	for _, p := range []string{"a", "é", "x/y", strings.Repeat("a", fdbq.MaxIDSize)} {
		if err := fdbq.ValidateIDPrefix(p); err != nil {
			t.Errorf("ValidateIDPrefix(%q): %v", p, err)
		}
	}
	if err := fdbq.ValidateIDPrefix(""); !errors.Is(err, fdbq.ErrInvalidJob) {
		t.Errorf("ValidateIDPrefix of nothing: %v", err)
	}
}

// TestListFiltersUnreadable: a filtered listing reports the entries whose
// job it cannot read unless what it can read of them leaves them out: a
// record that does not decode is left out by its id (in the entry's key)
// and, pending, by the key in its entry; a running or finished job's key
// is in its record, so a key filter reports it. A malformed key is
// reported where the listing reads it.
func TestListFiltersUnreadable(t *testing.T) {
	malformed := map[fdbq.State][]byte{
		fdbq.Pending:  unRoot.MustPack(tuple.Tuple{11, "email", nil}),
		fdbq.Running:  unRoot.MustPack(tuple.Tuple{5, "email", int64(1)}),
		fdbq.Finished: unRoot.MustPack(tuple.Tuple{6, "email", int64(2), "id", "extra"}),
	}
	for _, state := range []fdbq.State{fdbq.Pending, fdbq.Running, fdbq.Finished} {
		x := newTrQ(t)
		for _, j := range []fdbq.NewJob{{ID: "ok1", Key: "k"}, {ID: "bad1", Key: "k"}, {ID: "bad2"}} {
			if state == fdbq.Pending {
				j.ScheduledAt = x.c.Now().Add(time.Hour) // in the scheduled index, which a key does not narrow
			}
			x.add(j)
			if state != fdbq.Pending {
				l := x.acceptOne(j.ID)
				if state == fdbq.Finished {
					trMust(t, "finish", x.q.Finish(x.ctx, x.q.DB(), l, nil))
				}
			}
		}
		unPlant(t, x.q.DB(),
			unRoot.MustPack(tuple.Tuple{1, "email", "bad1"}), []byte{0x7f},
			unRoot.MustPack(tuple.Tuple{1, "email", "bad2"}), []byte{0x7f},
			malformed[state], nil)
		for _, tc := range []struct {
			o         fdbq.ListOptions
			jobs, bad []string // bad: the unreadable entries' ids, "" for the malformed key
		}{
			{fdbq.ListOptions{IDPrefix: "bad"}, nil, []string{"", "bad1", "bad2"}},
			{fdbq.ListOptions{IDPrefix: "ok"}, []string{"ok1"}, []string{""}},
			{fdbq.ListOptions{Key: "k"}, []string{"ok1"}, map[fdbq.State][]string{
				fdbq.Pending: {"", "bad1"}, fdbq.Running: {"", "bad1", "bad2"}, fdbq.Finished: {"", "bad1", "bad2"}}[state]},
		} {
			o := tc.o
			o.State, o.Limit = state, 1
			var jobs, bad []string
			for pages := 0; ; pages++ {
				p, err := x.q.List(x.ctx, x.q.DB(), "email", o)
				if err != nil || pages > 20 {
					t.Fatalf("%s %+v: %v (page %d)", state, o, err, pages)
				}
				if len(p.Jobs)+len(p.Unreadable) > 1 {
					t.Fatalf("%s %+v: a page of limit 1 holds %d jobs and %d unreadable", state, o, len(p.Jobs), len(p.Unreadable))
				}
				for _, j := range p.Jobs {
					jobs = append(jobs, j.ID)
				}
				for _, u := range p.Unreadable {
					if !errors.Is(u.Err, fdbq.ErrCorrupt) {
						t.Fatalf("%s %+v: unreadable %+v", state, o, u)
					}
					bad = append(bad, u.ID)
				}
				if o.Cursor = p.Next; o.Cursor == "" {
					break
				}
			}
			slices.Sort(bad)
			if !slices.Equal(jobs, tc.jobs) || !slices.Equal(bad, tc.bad) {
				t.Errorf("%s %+v: jobs %q and unreadable %q, want %q and %q", state, o, jobs, bad, tc.jobs, tc.bad)
			}
		}
	}
}
