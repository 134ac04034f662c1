package fdbq_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
)

// Ids that must work: any Unicode text without control characters.
var goodIDs = []string{
	"a", "order-42", "a b", "a/b", "...", ".a", "a..", "./x", "café", "日本語", "🙂",
	"\uFFFD", // a real U+FFFD is valid UTF-8
	"\u00a0", // no-break space: not a control character
	strings.Repeat("i", fdbq.MaxIDSize),
	strings.Repeat("é", fdbq.MaxIDSize/2),
}

// badIDs: the empty id is bad only where a job is named, since Add makes
// one up.
var badIDs = []struct {
	id    string
	words []string
}{
	{"", []string{"empty job id"}},
	{strings.Repeat("i", fdbq.MaxIDSize+1), []string{"job id of 257 bytes is longer than 256"}},
	{"\xff", []string{`job id "\xff" is not valid UTF-8 at byte 0`}},
	{"ab\xe6\x97", []string{`job id "ab\xe6\x97" is not valid UTF-8 at byte 2`}}, // 日 cut short
	{"a\xed\xa0\x80", []string{"not valid UTF-8 at byte 1"}},                     // a surrogate, as CESU-8 writes one
	{"a\xc0\xaf", []string{"not valid UTF-8 at byte 1"}},                         // '/' in two bytes (overlong)
	{"\x00", []string{`job id "\x00" has a control character at byte 0`}},
	{"a\x01", []string{`job id "a\x01" has a control character at byte 1`}},
	{"a\x1f", []string{"control character at byte 1"}},
	{"tab\t", []string{"control character at byte 3"}},
	{"line\n", []string{"control character at byte 4"}},
	{"a\x7f", []string{`job id "a\x7f" has a control character at byte 1`}},     // DEL
	{"é\u0085", []string{`job id "é\u0085" has a control character at byte 2`}}, // C1: next line
	{"a\u009f", []string{"control character at byte 1"}},
}

// Type names that must work, among them every name the repository's
// tests, examples and configs use.
var goodTypes = []string{
	"email", "send-email", "img.resize", "bench", "t", "T_1", "v2.jobs-x_y", "0day", "a..b", "x-", "x.",
	strings.Repeat("t", fdbq.MaxTypeNameSize),
}

var badTypes = []struct {
	name  string
	words []string
}{
	{"", []string{"empty type name"}},
	{strings.Repeat("t", fdbq.MaxTypeNameSize+1), []string{"type name of 129 bytes is longer than 128"}},
	{"a b", []string{`type name "a b" has ' ' at byte 1`}},
	{"a/b", []string{`type name "a/b" has '/' at byte 1`}},
	{"a:b", []string{`':' at byte 1`}},
	{"a%2Fb", []string{`'%' at byte 1`}},
	{"café", []string{`type name "café" has 'é' at byte 3`}},
	{"\xff", []string{`type name "\xff" is not valid UTF-8 at byte 0`}},
	{"e\xe6\x97", []string{`type name "e\xe6\x97" is not valid UTF-8 at byte 1`}},
	{"a\x00", []string{`'\x00' at byte 1`}},
	{"a\x7f", []string{`'\x7f' at byte 1`}},
	{"a\u0085", []string{`'\u0085' at byte 1`}},
	{".", []string{`type name "." starts with '.'`, "letter or a digit"}},
	{"..", []string{`starts with '.'`}},
	{"-x", []string{`starts with '-'`}},
	{"_x", []string{`starts with '_'`}},
}

func TestNamesValidate(t *testing.T) {
	for _, id := range goodIDs {
		trMust(t, fmt.Sprintf("ValidateID(%q)", id), fdbq.ValidateID(id))
	}
	for _, tc := range badIDs {
		errIs(t, fmt.Sprintf("ValidateID(%q)", tc.id), fdbq.ValidateID(tc.id), fdbq.ErrInvalidJob, tc.words...)
	}
	for _, name := range goodTypes {
		trMust(t, fmt.Sprintf("ValidateTypeName(%q)", name), fdbq.ValidateTypeName(name))
	}
	for _, tc := range badTypes {
		errIs(t, fmt.Sprintf("ValidateTypeName(%q)", tc.name), fdbq.ValidateTypeName(tc.name), fdbq.ErrInvalidJob, tc.words...)
	}
}

func TestNamesGoodIDs(t *testing.T) {
	for _, id := range goodIDs {
		t.Run(fmt.Sprintf("%q", id[:min(len(id), 20)]), func(t *testing.T) {
			x := newTrQ(t)
			if j := x.add(fdbq.NewJob{ID: id}); j.ID != id {
				t.Fatalf("add returned id %q", j.ID)
			}
			x.is(id, fdbq.Pending, "", 0)
			jobs, err := x.q.AddBatch(x.ctx, x.q.DB(), []fdbq.NewJob{{Type: "email", ID: id}, {Type: "email", ID: "other"}})
			trMust(t, "add batch", err)
			if jobs[0].ID != id {
				t.Fatalf("add batch returned id %q", jobs[0].ID)
			}
			if _, err := x.q.WaitOne(x.ctx, "email", id, fdbq.Pending); err != nil {
				t.Fatalf("wait: %v", err)
			}
			trMust(t, "cancel", x.q.Cancel(x.ctx, x.q.DB(), "email", id))
			trMust(t, "requeue", x.q.Requeue(x.ctx, x.q.DB(), "email", id))
			trMust(t, "remove", x.q.Remove(x.ctx, x.q.DB(), "email", id))
			x.gone(id)
		})
	}
	// An empty id is not a bad one when adding: Add makes one.
	x := newTrQ(t)
	trMust(t, "the id Add made", fdbq.ValidateID(x.add(fdbq.NewJob{}).ID))
}

func TestNamesBadIDs(t *testing.T) {
	for _, tc := range badIDs {
		t.Run(fmt.Sprintf("%q", tc.id[:min(len(tc.id), 20)]), func(t *testing.T) {
			x := newTrQ(t)
			db := x.q.DB()
			change := x.raw(trChangeKey("email"))
			if tc.id != "" {
				_, err := x.q.Add(x.ctx, db, fdbq.NewJob{Type: "email", ID: tc.id})
				errIs(t, "add", err, fdbq.ErrInvalidJob, tc.words...)
				_, err = x.q.AddBatch(x.ctx, db, []fdbq.NewJob{{Type: "email", ID: "ok"}, {Type: "email", ID: tc.id}})
				errIs(t, "add batch", err, fdbq.ErrInvalidJob, tc.words...)
			}
			_, err := x.q.Get(x.ctx, db, "email", tc.id)
			errIs(t, "get", err, fdbq.ErrInvalidJob, tc.words...)
			errIs(t, "cancel", x.q.Cancel(x.ctx, db, "email", tc.id), fdbq.ErrInvalidJob, tc.words...)
			errIs(t, "requeue", x.q.Requeue(x.ctx, db, "email", tc.id), fdbq.ErrInvalidJob, tc.words...)
			errIs(t, "remove", x.q.Remove(x.ctx, db, "email", tc.id), fdbq.ErrInvalidJob, tc.words...)
			_, err = x.q.Wait(x.ctx, "email", []string{"ok", tc.id}, fdbq.Finished)
			errIs(t, "wait", err, fdbq.ErrInvalidJob, tc.words...)
			_, err = x.q.WaitOne(x.ctx, "email", tc.id, fdbq.Finished)
			errIs(t, "wait one", err, fdbq.ErrInvalidJob, tc.words...)

			x.wantCounts(0, 0, 0)
			if x.raw(trJobKey("email", tc.id)) != nil || x.raw(trJobKey("email", "ok")) != nil {
				t.Fatal("a refused add wrote a job")
			}
			if string(x.raw(trChangeKey("email"))) != string(change) {
				t.Fatal("refused calls moved the change counter")
			}
		})
	}
}

func TestNamesGoodTypes(t *testing.T) {
	for _, name := range goodTypes {
		t.Run(name[:min(len(name), 20)], func(t *testing.T) {
			x := newTrQ(t)
			db := x.q.DB()
			trMust(t, "set type", x.q.SetType(x.ctx, db, name, fdbq.DefaultTypeSettings()))
			info, err := x.q.GetType(x.ctx, db, name)
			trMust(t, "get type", err)
			if info.Name != name {
				t.Fatalf("get type named it %q", info.Name)
			}
			if _, err := x.q.Add(x.ctx, db, fdbq.NewJob{Type: name, ID: "a"}); err != nil {
				t.Fatalf("add: %v", err)
			}
			if _, err := x.q.AddBatch(x.ctx, db, []fdbq.NewJob{{Type: name, ID: "b"}}); err != nil {
				t.Fatalf("add batch: %v", err)
			}
			if j, err := x.q.Get(x.ctx, db, name, "a"); err != nil || j.Type != name {
				t.Fatalf("get: %+v %v", j, err)
			}
			if n, err := x.q.Count(x.ctx, db, name, fdbq.Pending); err != nil || n != 2 {
				t.Fatalf("count: %d %v", n, err)
			}
			if p, err := x.q.List(x.ctx, db, name, fdbq.ListOptions{State: fdbq.Pending}); err != nil || len(p.Jobs) != 2 {
				t.Fatalf("list: %+v %v", p, err)
			}
			if at, err := x.q.OldestDue(x.ctx, db, name); err != nil || at.IsZero() {
				t.Fatalf("oldest due: %v %v", at, err)
			}
			trMust(t, "pause", x.q.Pause(x.ctx, db, name))
			trMust(t, "resume", x.q.Resume(x.ctx, db, name))
			ls, err := x.q.Accept(x.ctx, name, fdbq.AcceptOptions{Max: 2})
			if err != nil || len(ls) != 2 {
				t.Fatalf("accept: %d %v", len(ls), err)
			}
			trMust(t, "cancel", x.q.Cancel(x.ctx, db, name, "a"))
			trMust(t, "requeue", x.q.Requeue(x.ctx, db, name, "a"))
			if _, err := x.q.WaitOne(x.ctx, name, "a", fdbq.Pending); err != nil {
				t.Fatalf("wait: %v", err)
			}
			trMust(t, "remove", x.q.Remove(x.ctx, db, name, "a"))
		})
	}
}

func TestNamesBadTypes(t *testing.T) {
	for _, tc := range badTypes {
		t.Run(fmt.Sprintf("%q", tc.name[:min(len(tc.name), 20)]), func(t *testing.T) {
			x := newTrQ(t)
			db := x.q.DB()
			bad, words := tc.name, tc.words
			errIs(t, "set type", x.q.SetType(x.ctx, db, bad, fdbq.DefaultTypeSettings()), fdbq.ErrInvalidJob, words...)
			// Refused as bad, not as unknown (errIs also checks it is not
			// ErrUnknownType), whether or not the type could exist.
			_, err := x.q.Add(x.ctx, db, fdbq.NewJob{Type: bad, ID: "a"})
			errIs(t, "add", err, fdbq.ErrInvalidJob, words...)
			_, err = x.q.AddBatch(x.ctx, db, []fdbq.NewJob{{Type: "email", ID: "ok"}, {Type: bad, ID: "b"}})
			errIs(t, "add batch", err, fdbq.ErrInvalidJob, words...)

			_, err = x.q.GetType(x.ctx, db, bad)
			errIs(t, "get type", err, fdbq.ErrInvalidJob, words...)
			errIs(t, "pause", x.q.Pause(x.ctx, db, bad), fdbq.ErrInvalidJob, words...)
			errIs(t, "resume", x.q.Resume(x.ctx, db, bad), fdbq.ErrInvalidJob, words...)
			_, err = x.q.Get(x.ctx, db, bad, "a")
			errIs(t, "get", err, fdbq.ErrInvalidJob, words...)
			_, err = x.q.Count(x.ctx, db, bad, fdbq.Pending)
			errIs(t, "count", err, fdbq.ErrInvalidJob, words...)
			_, err = x.q.List(x.ctx, db, bad, fdbq.ListOptions{State: fdbq.Pending})
			errIs(t, "list", err, fdbq.ErrInvalidJob, words...)
			_, err = x.q.OldestDue(x.ctx, db, bad)
			errIs(t, "oldest due", err, fdbq.ErrInvalidJob, words...)
			_, err = x.q.Accept(x.ctx, bad, fdbq.AcceptOptions{})
			errIs(t, "accept", err, fdbq.ErrInvalidJob, words...)
			errIs(t, "cancel", x.q.Cancel(x.ctx, db, bad, "a"), fdbq.ErrInvalidJob, words...)
			errIs(t, "requeue", x.q.Requeue(x.ctx, db, bad, "a"), fdbq.ErrInvalidJob, words...)
			errIs(t, "remove", x.q.Remove(x.ctx, db, bad, "a"), fdbq.ErrInvalidJob, words...)
			_, err = x.q.WaitOne(x.ctx, bad, "a", fdbq.Finished)
			errIs(t, "wait", err, fdbq.ErrInvalidJob, words...)

			types, err := x.q.Types(x.ctx, db)
			trMust(t, "types", err)
			if len(types) != 1 || types[0].Name != "email" {
				t.Fatalf("a refused call registered a type: %v", types)
			}
			x.wantCounts(0, 0, 0)
		})
	}
}

// DeclareType refuses a bad name before it reads the store, so a
// misnamed type never reaches it.
func TestNamesDeclareType(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	err := q.DeclareType(ctx, q.DB(), "send email", fdbq.DefaultTypeSettings())
	errIs(t, "declare", err, fdbq.ErrInvalidJob, `type name "send email" has ' ' at byte 4`)
	trMust(t, "declare", q.DeclareType(ctx, q.DB(), "send-email", fdbq.DefaultTypeSettings()))
	types, err := q.Types(ctx, q.DB())
	trMust(t, "types", err)
	if len(types) != 2 || !slices.ContainsFunc(types, func(i *fdbq.TypeInfo) bool { return i.Name == "send-email" }) {
		t.Fatalf("types after declaring: %v", types)
	}
}

// TestNamesDotIDs: "." and "..", which URL paths remove (the HTTP API's
// job routes could not name them), are refused as the ids of new jobs,
// and a job an earlier version stored under one is read, listed, waited
// for, canceled, requeued, accepted, finished and removed all the same.
func TestNamesDotIDs(t *testing.T) {
	for _, id := range []string{".", ".."} {
		t.Run(id, func(t *testing.T) {
			errIs(t, "ValidateID", fdbq.ValidateID(id), fdbq.ErrInvalidJob, fmt.Sprintf("job id %q", id), "dot segment")
			trMust(t, "ValidateLookupID", fdbq.ValidateLookupID(id))
			x := newTrQ(t)
			db := x.q.DB()
			_, err := x.q.Add(x.ctx, db, fdbq.NewJob{Type: "email", ID: id})
			errIs(t, "add", err, fdbq.ErrInvalidJob, "dot segment")
			_, err = x.q.AddBatch(x.ctx, db, []fdbq.NewJob{{Type: "email", ID: "ok"}, {Type: "email", ID: id}})
			errIs(t, "add batch", err, fdbq.ErrInvalidJob, "dot segment")
			x.wantCounts(0, 0, 0)

			// Stored by an earlier version.
			x.add(fdbq.NewJob{ID: "stored"})
			jobtest.RenameJob(t, db, "email", "stored", id)
			x.is(id, fdbq.Pending, "", 0)
			if got := x.list(fdbq.Pending); !slices.Equal(got, []string{id}) {
				t.Fatalf("pending: %q", got)
			}
			if _, err := x.q.WaitOne(x.ctx, "email", id, fdbq.Pending); err != nil {
				t.Fatalf("wait: %v", err)
			}
			trMust(t, "cancel", x.q.Cancel(x.ctx, db, "email", id))
			x.is(id, fdbq.Finished, fdbq.Canceled, 0)
			trMust(t, "requeue", x.q.Requeue(x.ctx, db, "email", id))
			l := x.acceptOne(id)
			trMust(t, "finish", x.q.Finish(x.ctx, db, l, nil))
			x.is(id, fdbq.Finished, fdbq.Succeeded, 1)
			trMust(t, "remove", x.q.Remove(x.ctx, db, "email", id))
			x.gone(id)
			x.wantCounts(0, 0, 0)
		})
	}
}
