package fdbq_test

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
)

// listPages lists every job of "email" in state, limit at a time,
// following the cursors, and returns the pages' sizes and the jobs in the
// order listed.
func listPages(t *testing.T, q *fdbq.Queue, state fdbq.State, limit int) ([]int, []*fdbq.Job) {
	t.Helper()
	var sizes []int
	var jobs []*fdbq.Job
	cursor := ""
	for {
		page, err := q.List(context.Background(), q.DB(), "email", fdbq.ListOptions{State: state, Limit: limit, Cursor: cursor})
		if err != nil {
			t.Fatalf("list %s after %q: %v", state, cursor, err)
		}
		sizes = append(sizes, len(page.Jobs))
		jobs = append(jobs, page.Jobs...)
		if page.Next == "" {
			return sizes, jobs
		}
		if len(sizes) > 1000 {
			t.Fatal("listing does not end")
		}
		cursor = page.Next
	}
}

// checkListing checks that jobs are exactly want (by id, in order), each
// in state, once.
func checkListing(t *testing.T, what string, jobs []*fdbq.Job, state fdbq.State, want []string) {
	t.Helper()
	got := make([]string, len(jobs))
	seen := map[string]bool{}
	for i, j := range jobs {
		if seen[j.ID] {
			t.Fatalf("%s: %s listed twice", what, j.ID)
		}
		seen[j.ID] = true
		if j.State != state || j.Type != "email" {
			t.Fatalf("%s: %s is %s/%s", what, j.ID, j.Type, j.State)
		}
		got[i] = j.ID
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s:\n got %v\nwant %v", what, got, want)
	}
}

func sortedIDs(jobs []*fdbq.Job, less func(a, b *fdbq.Job) int) []string {
	s := slices.Clone(jobs)
	slices.SortFunc(s, func(a, b *fdbq.Job) int {
		if c := less(a, b); c != 0 {
			return c
		}
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	ids := make([]string, len(s))
	for i, j := range s {
		ids[i] = j.ID
	}
	return ids
}

func TestListPaginationAllStates(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	const n = 250
	now := c.Now()
	jobs := make([]fdbq.NewJob, n)
	for i := range jobs {
		jobs[i] = fdbq.NewJob{
			Type:        "email",
			ID:          fmt.Sprintf("j%03d", (i*37)%n), // ids not in insertion order
			Priority:    i%5 - 2,
			ScheduledAt: now.Add(-time.Duration(i%7) * time.Second),
		}
	}
	added, err := q.AddBatch(ctx, q.DB(), jobs)
	if err != nil {
		t.Fatal(err)
	}

	// Pending: by zone, then priority (highest first), then scheduled
	// time, then id.
	sizes, listed := listPages(t, q, fdbq.Pending, 100)
	if !slices.Equal(sizes, []int{100, 100, 50}) {
		t.Fatalf("pending page sizes %v", sizes)
	}
	want := sortedIDs(added, func(a, b *fdbq.Job) int {
		if za, zb := fdbq.ShardOf(a.ID, fdbq.DefaultZones), fdbq.ShardOf(b.ID, fdbq.DefaultZones); za != zb {
			return za - zb
		}
		if a.Priority != b.Priority {
			return b.Priority - a.Priority
		}
		return a.ScheduledAt.Compare(b.ScheduledAt)
	})
	checkListing(t, "pending", listed, fdbq.Pending, want)
	if n, _ := q.Count(ctx, q.DB(), "email", fdbq.Pending); n != int64(len(listed)) {
		t.Fatalf("pending count %d, listed %d", n, len(listed))
	}

	// Running: by activity deadline. Accept in groups at different times
	// so the deadlines differ, and equal ones are ordered by id.
	var leases []*fdbq.Lease
	for {
		ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 30})
		if len(ls) == 0 {
			break
		}
		leases = append(leases, ls...)
		c.Advance(time.Millisecond)
	}
	if len(leases) != n {
		t.Fatalf("accepted %d", len(leases))
	}
	sizes, listed = listPages(t, q, fdbq.Running, 100)
	if !slices.Equal(sizes, []int{100, 100, 50}) {
		t.Fatalf("running page sizes %v", sizes)
	}
	running := make([]*fdbq.Job, len(leases))
	for i, l := range leases {
		running[i] = &l.Job
	}
	// The activity index is by lane (a hash of the id), then renewal.
	checkListing(t, "running", listed, fdbq.Running, sortedIDs(running, func(a, b *fdbq.Job) int {
		return cmp.Or(cmp.Compare(fdbq.LaneOf(a.ID), fdbq.LaneOf(b.ID)), a.HeartbeatAt.Compare(b.HeartbeatAt))
	}))
	if n, _ := q.Count(ctx, q.DB(), "email", fdbq.Running); n != int64(len(listed)) {
		t.Fatalf("running count %d, listed %d", n, len(listed))
	}

	// Finished: by finish time, in an order unrelated to the others.
	for i := range leases {
		l := leases[(i*91)%n]
		if err := q.Finish(ctx, q.DB(), l, nil); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			c.Advance(time.Millisecond)
		}
	}
	sizes, listed = listPages(t, q, fdbq.Finished, 100)
	if !slices.Equal(sizes, []int{100, 100, 50}) {
		t.Fatalf("finished page sizes %v", sizes)
	}
	var finished []*fdbq.Job
	for _, l := range leases {
		j, err := q.Get(ctx, q.DB(), "email", l.ID)
		if err != nil {
			t.Fatal(err)
		}
		finished = append(finished, j)
	}
	checkListing(t, "finished", listed, fdbq.Finished, sortedIDs(finished, func(a, b *fdbq.Job) int {
		return a.FinishedAt.Compare(b.FinishedAt)
	}))
	for s, want := range map[fdbq.State]int64{fdbq.Pending: 0, fdbq.Running: 0, fdbq.Finished: n} {
		if got, _ := q.Count(ctx, q.DB(), "email", s); got != want {
			t.Fatalf("%s count %d, want %d", s, got, want)
		}
	}
	if _, l := listPages(t, q, fdbq.Pending, 100); len(l) != 0 {
		t.Fatalf("pending listing of an empty state: %d jobs", len(l))
	}
}

func TestListPageBoundaries(t *testing.T) {
	q, _ := newQueue(t)
	for i := range 200 {
		addJob(t, q, fdbq.NewJob{ID: fmt.Sprintf("j%03d", i)})
	}
	// A last page exactly full has no next cursor.
	sizes, listed := listPages(t, q, fdbq.Pending, 100)
	if !slices.Equal(sizes, []int{100, 100}) || len(listed) != 200 {
		t.Fatalf("page sizes %v", sizes)
	}
	// The default limit is 100.
	page, err := q.List(context.Background(), q.DB(), "email", fdbq.ListOptions{State: fdbq.Pending})
	if err != nil || len(page.Jobs) != 100 || page.Next == "" {
		t.Fatalf("default limit: %d jobs, next %q, %v", len(page.Jobs), page.Next, err)
	}
	sizes, _ = listPages(t, q, fdbq.Pending, 7)
	if len(sizes) != 29 || sizes[28] != 4 {
		t.Fatalf("pages of 7: %v", sizes)
	}
}

func TestListCursorSurvivesChanges(t *testing.T) {
	// A cursor names the last key listed, not an offset: jobs removed or
	// added before it do not shift the next page. One zone, so that the
	// ids' order is the index's.
	s := fdbq.DefaultTypeSettings()
	s.Zones = 1
	q, _ := openTestQueue(t, nil, s)
	ctx := context.Background()
	for i := range 10 {
		addJob(t, q, fdbq.NewJob{ID: fmt.Sprintf("j%d", i)})
	}
	page, err := q.List(ctx, q.DB(), "email", fdbq.ListOptions{State: fdbq.Pending, Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	checkListing(t, "first page", page.Jobs, fdbq.Pending, []string{"j0", "j1", "j2", "j3"})
	if err := q.Remove(ctx, q.DB(), "email", "j1"); err != nil {
		t.Fatal(err)
	}
	if err := q.Remove(ctx, q.DB(), "email", "j3"); err != nil {
		t.Fatal(err)
	}
	addJob(t, q, fdbq.NewJob{ID: "j00"}) // sorts before the cursor
	page, err = q.List(ctx, q.DB(), "email", fdbq.ListOptions{State: fdbq.Pending, Limit: 4, Cursor: page.Next})
	if err != nil {
		t.Fatal(err)
	}
	checkListing(t, "second page", page.Jobs, fdbq.Pending, []string{"j4", "j5", "j6", "j7"})
}

func TestListBadCursor(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	for i := range 3 {
		addJob(t, q, fdbq.NewJob{ID: fmt.Sprintf("j%d", i)})
	}
	acceptNoWait(t, q, fdbq.AcceptOptions{Max: 1, Window: 1})
	pending, err := q.List(ctx, q.DB(), "email", fdbq.ListOptions{State: fdbq.Pending, Limit: 1})
	if err != nil || pending.Next == "" {
		t.Fatalf("list: %v %v", pending, err)
	}
	for name, o := range map[string]fdbq.ListOptions{
		"not base64":          {State: fdbq.Pending, Cursor: "%%%not base64%%%"},
		"a foreign key":       {State: fdbq.Pending, Cursor: base64.RawURLEncoding.EncodeToString([]byte("elsewhere"))},
		"another state's":     {State: fdbq.Running, Cursor: pending.Next},
		"another state's (2)": {State: fdbq.Finished, Cursor: pending.Next},
		"unknown state":       {State: fdbq.State("sleeping")},
		"no state":            {},
	} {
		if _, err := q.List(ctx, q.DB(), "email", o); !errors.Is(err, fdbq.ErrInvalidJob) {
			t.Fatalf("%s: %v, want ErrInvalidJob", name, err)
		}
	}
	// Another type's cursor is no good either.
	if err := q.SetType(ctx, q.DB(), "sms", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	if _, err := q.List(ctx, q.DB(), "sms", fdbq.ListOptions{State: fdbq.Pending, Cursor: pending.Next}); !errors.Is(err, fdbq.ErrInvalidJob) {
		t.Fatalf("cursor of another type: %v", err)
	}
}

func TestListInsideCallerTransaction(t *testing.T) {
	// Run inside the caller's transaction, List and Count see its own
	// uncommitted writes.
	q, _ := newQueue(t)
	ctx := context.Background()
	addJob(t, q, fdbq.NewJob{ID: "a"})
	err := q.DB().Transact(ctx, func(tx kv.Tx) error {
		if _, err := q.Add(ctx, tx, fdbq.NewJob{Type: "email", ID: "b"}); err != nil {
			return err
		}
		page, err := q.List(ctx, tx, "email", fdbq.ListOptions{State: fdbq.Pending})
		if err != nil {
			return err
		}
		want := []string{"a", "b"} // by zone
		slices.SortFunc(want, func(x, y string) int {
			return fdbq.ShardOf(x, fdbq.DefaultZones) - fdbq.ShardOf(y, fdbq.DefaultZones)
		})
		checkListing(t, "in the transaction", page.Jobs, fdbq.Pending, want)
		if n, err := q.Count(ctx, tx, "email", fdbq.Pending); err != nil || n != 2 {
			return fmt.Errorf("count in the transaction: %d %v", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTypesAndCounts(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	if _, err := q.GetType(ctx, q.DB(), "nope"); !errors.Is(err, fdbq.ErrUnknownType) {
		t.Fatalf("GetType of an unknown type: %v", err)
	}
	if _, err := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "nope", ID: "x"}); !errors.Is(err, fdbq.ErrUnknownType) {
		t.Fatalf("add of an unknown type: %v", err)
	}
	sms := fdbq.DefaultTypeSettings()
	sms.ActivityTimeout = time.Minute
	sms.Paused = true
	if err := q.SetType(ctx, q.DB(), "sms", sms); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		addJob(t, q, fdbq.NewJob{ID: fmt.Sprintf("e%d", i)})
	}
	addJob(t, q, fdbq.NewJob{Type: "sms", ID: "s0"})
	addJob(t, q, fdbq.NewJob{Type: "sms", ID: "s1", ScheduledAt: c.Now().Add(time.Hour)})
	ls := acceptNoWait(t, q, fdbq.AcceptOptions{Max: 2})
	if err := q.Finish(ctx, q.DB(), ls[0], nil); err != nil {
		t.Fatal(err)
	}

	types, err := q.Types(ctx, q.DB())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]fdbq.TypeInfo{}
	var names []string
	for _, ti := range types {
		got[ti.Name] = *ti
		names = append(names, ti.Name)
	}
	if !sort.StringsAreSorted(names) || !slices.Equal(names, []string{"email", "sms"}) {
		t.Fatalf("types %v", names)
	}
	if e := got["email"]; e.Pending != 3 || e.Running != 1 || e.Finished != 1 || e.Settings.ActivityTimeout != fdbq.DefaultActivityTimeout {
		t.Fatalf("email: %+v", e)
	}
	if s := got["sms"]; s.Pending != 2 || s.Running != 0 || s.Finished != 0 || !s.Settings.Paused || s.Settings.ActivityTimeout != time.Minute {
		t.Fatalf("sms: %+v", s)
	}
	for _, name := range names {
		ti, err := q.GetType(ctx, q.DB(), name)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*ti, got[name]) {
			t.Fatalf("GetType %s: %+v, Types: %+v", name, *ti, got[name])
		}
		for st, want := range map[fdbq.State]int64{fdbq.Pending: ti.Pending, fdbq.Running: ti.Running, fdbq.Finished: ti.Finished} {
			if n, err := q.Count(ctx, q.DB(), name, st); err != nil || n != want {
				t.Fatalf("count %s %s: %d %v, want %d", name, st, n, err, want)
			}
		}
	}
	if n, err := q.Count(ctx, q.DB(), "nope", fdbq.Pending); err != nil || n != 0 {
		t.Fatalf("count of an unknown type: %d %v", n, err)
	}
}
