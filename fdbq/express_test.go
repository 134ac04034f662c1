package fdbq_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

func readyZones(t *testing.T, q *fdbq.Queue) *fdbq.ReadyZones {
	t.Helper()
	rz, err := q.ReadyZones(context.Background(), "email")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rz.Watch.Cancel)
	return rz
}

func freshIs(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: fresh keys %q, want %q", what, got, want)
	}
}

// TestReadyZonesFresh: two reads of the zone index tell the keys whose
// zones were marked between them, by the marks' tokens: a key added to a
// zone already marked is not fresh, nor is a key worked all along, but a
// zone that was emptied, found empty and marked again in between is,
// though it was marked at both reads.
func TestReadyZonesFresh(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.Zones = 1
	q, _ := openTestQueue(t, nil, s)

	r0 := readyZones(t, q)
	if len(r0.Keys()) != 0 || r0.Partial() {
		t.Fatalf("empty type: keys %q, partial %v", r0.Keys(), r0.Partial())
	}
	freshIs(t, "first read", r0.Fresh(nil))

	addJob(t, q, fdbq.NewJob{ID: "a1", Key: "a"})
	recvWithin(t, r0.Watch.Ready(), "the watch of the read before the first mark")
	r1 := readyZones(t, q)
	freshIs(t, "a marked", r1.Fresh(r0), "a")
	freshIs(t, "no earlier read", r1.Fresh(nil))

	addJob(t, q, fdbq.NewJob{ID: "a2", Key: "a"})
	r2 := readyZones(t, q)
	freshIs(t, "a added to its marked zone", r2.Fresh(r1))

	addJob(t, q, fdbq.NewJob{ID: "b1", Key: "b"})
	r3 := readyZones(t, q)
	freshIs(t, "b marked", r3.Fresh(r2), "b")
	keys := r3.Keys()
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"a", "b"}) {
		t.Fatalf("keys %q, want a and b", keys)
	}

	// a's jobs are taken; its zone stays marked until an accept finds it
	// empty.
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10, Keys: []string{"a"}}); len(ls) != 2 {
		t.Fatalf("accepted %q, want a's two jobs", leaseIDsOf(ls))
	}
	r4 := readyZones(t, q)
	freshIs(t, "a worked", r4.Fresh(r3))
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10, Keys: []string{"a"}}); len(ls) != 0 {
		t.Fatalf("accepted %q from an empty key", leaseIDsOf(ls))
	}
	addJob(t, q, fdbq.NewJob{ID: "a3", Key: "a"})
	r5 := readyZones(t, q)
	freshIs(t, "a emptied and marked again between two reads that both saw it marked", r5.Fresh(r4), "a")
	freshIs(t, "since the read before a was worked", r5.Fresh(r3), "a")

	// A part of an index too large for one read tells nothing.
	defer fdbq.SetMaxZoneScan(1)()
	addJob(t, q, fdbq.NewJob{ID: "c1", Key: "c"})
	r6 := readyZones(t, q)
	if !r6.Partial() {
		t.Fatal("an index of three zones read one at a time is not partial")
	}
	freshIs(t, "a partial read", r6.Fresh(r5))
}

// TestReadyZonesFreshKeepsABackloggedKey: a key with jobs in two zones,
// one of which an accept empties and an add marks again, is not fresh: its
// other zone kept its mark, so it has a backlog the accepts work, and a
// key fed one job at a time while it is worked is not served as new. A
// key all of whose marked zones are new is.
func TestReadyZonesFreshKeepsABackloggedKey(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.Zones = 2
	q, _ := openTestQueue(t, nil, s)
	// Two ids of key "a" in each of its two zones.
	var in [2][]string
	for i := 0; len(in[0]) < 2 || len(in[1]) < 2; i++ {
		id := fmt.Sprint("a", i)
		if z := fdbq.ShardOf(id, 2); len(in[z]) < 2 {
			in[z] = append(in[z], id)
		}
	}
	// Zone 0 holds one job, the first by priority; zone 1 two.
	addJob(t, q, fdbq.NewJob{ID: in[0][0], Key: "a", Priority: 9})
	addJob(t, q, fdbq.NewJob{ID: in[1][0], Key: "a", Priority: 5})
	addJob(t, q, fdbq.NewJob{ID: in[1][1], Key: "a", Priority: 1})
	r0 := readyZones(t, q)
	// The first accept takes zone 0's job; the second, zone 1's first,
	// and finds zone 0 empty: it clears zone 0's mark. Zone 1 keeps its.
	for _, want := range []string{in[0][0], in[1][0]} {
		ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 1, Keys: []string{"a"}})
		if ids := leaseIDsOf(ls); len(ids) != 1 || ids[0] != want {
			t.Fatalf("accepted %q, want %s", ids, want)
		}
	}
	addJob(t, q, fdbq.NewJob{ID: in[0][1], Key: "a"}) // marks zone 0 anew
	r1 := readyZones(t, q)
	freshIs(t, "a's zone 0 marked again while zone 1 kept its mark", r1.Fresh(r0))

	addJob(t, q, fdbq.NewJob{ID: "b1", Key: "b"})
	r2 := readyZones(t, q)
	freshIs(t, "b marked, a as before", r2.Fresh(r1), "b")
}

// TestAcceptKeys: an accept restricted to named keys takes only their
// jobs, in order, and leaves the scheduled index's due jobs to others.
func TestAcceptKeys(t *testing.T) {
	q, clk := openTestQueue(t, nil, fdbq.DefaultTypeSettings())
	for _, j := range []fdbq.NewJob{
		{ID: "a-low", Key: "a", Priority: 1},
		{ID: "a-high", Key: "a", Priority: 9},
		{ID: "a-mid", Key: "a", Priority: 5},
		{ID: "b1", Key: "b"},
		{ID: "b2", Key: "b"},
		{ID: "none"},
		{ID: "later", Key: "a", ScheduledAt: clk.Now().Add(time.Minute)},
	} {
		addJob(t, q, j)
	}
	clk.Advance(2 * time.Minute) // "later" is due, in the scheduled index

	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10, Keys: []string{}}); len(ls) != 0 {
		t.Fatalf("no keys named: accepted %q", leaseIDsOf(ls))
	}
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10, Keys: []string{"b"}}); !slices.Equal(leaseIDsOf(ls), []string{"b1", "b2"}) {
		t.Fatalf("key b: accepted %q", leaseIDsOf(ls))
	}
	var got []string
	for range 3 {
		ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 1, Window: 1, Keys: []string{"a", "nobody"}})
		got = append(got, leaseIDsOf(ls)...)
	}
	if !slices.Equal(got, []string{"a-high", "a-mid", "a-low"}) {
		t.Fatalf("key a one at a time: %q, want priority order", got)
	}
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10, Keys: []string{"a"}}); len(ls) != 0 {
		t.Fatalf("key a: accepted %q, a job due in the scheduled index", leaseIDsOf(ls))
	}
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10, Keys: []string{""}}); !slices.Equal(leaseIDsOf(ls), []string{"none"}) {
		t.Fatalf("the jobs without a key: accepted %q", leaseIDsOf(ls))
	}
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 10}); !slices.Equal(leaseIDsOf(ls), []string{"later"}) {
		t.Fatalf("any key: accepted %q, want the due job left", leaseIDsOf(ls))
	}
}

// TestAcceptGroupParked: a group tells when one of its accepts waits for
// jobs to become ready, and when it stops.
func TestAcceptGroupParked(t *testing.T) {
	q, _ := newQueue(t)
	g := &fdbq.AcceptGroup{}
	parked, changed := g.Parked()
	if parked {
		t.Fatal("a new group is parked")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := acceptInBackground(ctx, q, "email", fdbq.AcceptOptions{Timeout: -1, Group: g})
	recvWithin(t, changed, "the accept's wait")
	if parked, changed = g.Parked(); !parked {
		t.Fatal("not parked while an accept waits")
	}
	addJob(t, q, fdbq.NewJob{ID: "j"})
	if out := recvWithin(t, done, "the accept"); out.err != nil || len(out.leases) != 1 {
		t.Fatalf("accept: %v, %d jobs", out.err, len(out.leases))
	}
	recvWithin(t, changed, "the end of the wait")
	if parked, _ = g.Parked(); parked {
		t.Fatal("parked after the accept returned")
	}
}

// TestAcceptClearsTheMarkOfAZoneItEmpties: an accept that takes every
// entry of a zone it read whole clears the zone's mark (so the zone's
// next job marks it anew), and one that leaves an entry, or took a due
// job of the zone from the scheduled index instead, leaves it.
func TestAcceptClearsTheMarkOfAZoneItEmpties(t *testing.T) {
	s := fdbq.DefaultTypeSettings()
	s.Zones = 1
	q, clk := openTestQueue(t, nil, s)
	marked := func(key string) bool {
		return slices.Contains(readyZones(t, q).Keys(), key)
	}
	addJob(t, q, fdbq.NewJob{ID: "a1", Key: "a"})
	addJob(t, q, fdbq.NewJob{ID: "a2", Key: "a"})
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 1, Window: 1}); len(ls) != 1 || !marked("a") {
		t.Fatalf("one of two taken: %q, a marked %v", leaseIDsOf(ls), marked("a"))
	}
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 1}); len(ls) != 1 || marked("a") {
		t.Fatalf("the last taken: %q, a still marked %v", leaseIDsOf(ls), marked("a"))
	}

	// A due job in the scheduled index, of higher priority, is taken
	// instead of the zone's one ready job: the zone keeps its mark.
	addJob(t, q, fdbq.NewJob{ID: "later", Key: "b", Priority: 9, ScheduledAt: clk.Now().Add(time.Minute)})
	clk.Advance(2 * time.Minute)
	addJob(t, q, fdbq.NewJob{ID: "ready", Key: "b"})
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 1}); !slices.Equal(leaseIDsOf(ls), []string{"later"}) || !marked("b") {
		t.Fatalf("took %q, b marked %v; want later taken and b's ready job's zone marked", leaseIDsOf(ls), marked("b"))
	}
	if ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 1}); !slices.Equal(leaseIDsOf(ls), []string{"ready"}) {
		t.Fatalf("took %q, want ready", leaseIDsOf(ls))
	}
}
