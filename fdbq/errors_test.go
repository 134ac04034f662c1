package fdbq_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// errIs checks that err matches target with errors.Is, also when wrapped
// again by a caller, matches none of the other sentinels, and that its
// message says each of words.
func errIs(t *testing.T, what string, err, target error, words ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %v", what, target)
	}
	if !errors.Is(err, target) || !errors.Is(fmt.Errorf("caller: %w", err), target) {
		t.Fatalf("%s: %v is not %v", what, err, target)
	}
	for _, other := range []error{fdbq.ErrHalt, fdbq.ErrNotFound, fdbq.ErrUnknownType, fdbq.ErrInvalidJob, fdbq.ErrDataTooLarge, fdbq.ErrWrongState} {
		if other != target && errors.Is(err, other) {
			t.Fatalf("%s: %v also matches %v", what, err, other)
		}
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("%s: error %q does not say %q", what, err, w)
		}
	}
}

func TestErrorsUnknownType(t *testing.T) {
	x := newTrQ(t)
	_, err := x.q.Add(x.ctx, x.q.DB(), fdbq.NewJob{Type: "sms", ID: "a"})
	errIs(t, "add", err, fdbq.ErrUnknownType, `"sms"`)
	// A batch with one unknown type adds nothing.
	_, err = x.q.AddBatch(x.ctx, x.q.DB(), []fdbq.NewJob{{Type: "email", ID: "ok"}, {Type: "sms", ID: "b"}})
	errIs(t, "add batch", err, fdbq.ErrUnknownType, `"sms"`)
	x.wantCounts(0, 0, 0)
	if _, err := x.q.Get(x.ctx, x.q.DB(), "email", "ok"); !errors.Is(err, fdbq.ErrNotFound) {
		t.Fatalf("the batch's good job was written: %v", err)
	}
	_, err = x.q.Accept(x.ctx, "sms", fdbq.AcceptOptions{})
	errIs(t, "accept", err, fdbq.ErrUnknownType, `"sms"`)
	_, err = x.q.Accept(x.ctx, "sms", fdbq.AcceptOptions{Timeout: time.Hour})
	errIs(t, "blocking accept", err, fdbq.ErrUnknownType, `"sms"`)
	_, err = x.q.GetType(x.ctx, x.q.DB(), "sms")
	errIs(t, "get type", err, fdbq.ErrUnknownType, `"sms"`)
	errIs(t, "pause", x.q.Pause(x.ctx, x.q.DB(), "sms"), fdbq.ErrUnknownType, `"sms"`)
	errIs(t, "resume", x.q.Resume(x.ctx, x.q.DB(), "sms"), fdbq.ErrUnknownType, `"sms"`)
	if types, err := x.q.Types(x.ctx, x.q.DB()); err != nil || len(types) != 1 || types[0].Name != "email" {
		t.Fatalf("a refused call registered a type: %v %v", types, err)
	}
}

func TestErrorsInvalidJSON(t *testing.T) {
	x := newTrQ(t)
	_, err := x.q.Add(x.ctx, x.q.DB(), fdbq.NewJob{Type: "email", ID: "a", Data: trJS(`{"to":`)})
	errIs(t, "add", err, fdbq.ErrInvalidJob, "not valid JSON", `"a"`)
	x.wantCounts(0, 0, 0)

	x.add(fdbq.NewJob{ID: "a", Data: trJS(`1`)})
	_, err = x.q.Add(x.ctx, x.q.DB(), fdbq.NewJob{Type: "email", ID: "a", Data: trJS(`{]`)})
	errIs(t, "resubmit", err, fdbq.ErrInvalidJob, "not valid JSON")
	if j := x.get("a"); string(j.Data) != `1` {
		t.Fatalf("refused resubmit replaced the data: %s", j.Data)
	}

	l := x.acceptOne("a")
	errIs(t, "heartbeat data", x.q.Heartbeat(x.ctx, x.q.DB(), l, fdbq.HeartbeatOptions{Data: trJS(`nope`)}), fdbq.ErrInvalidJob, "heartbeat data", "not valid JSON")
	errIs(t, "heartbeat progress", x.q.Heartbeat(x.ctx, x.q.DB(), l, fdbq.HeartbeatOptions{Progress: trJS(`{`)}), fdbq.ErrInvalidJob, "progress", "not valid JSON")
	errIs(t, "finish result", x.q.Finish(x.ctx, x.q.DB(), l, trJS(`"unterminated`)), fdbq.ErrInvalidJob, "result", "email/a", "not valid JSON")
	j := x.is("a", fdbq.Running, "", 1)
	if string(j.Data) != `1` || j.Progress != nil || j.Result != nil {
		t.Fatalf("refused calls changed the job: %+v", j)
	}
	trMust(t, "finish with a good result", x.q.Finish(x.ctx, x.q.DB(), l, trJS(`true`)))
}

// jsonString returns a JSON string that takes n bytes.
func jsonString(n int, fill string) []byte {
	return []byte(`"` + strings.Repeat(fill, n-2) + `"`)
}

func TestErrorsDataTooLarge(t *testing.T) {
	x := newTrQ(t)
	change := x.raw(trChangeKey("email"))

	_, err := x.q.Add(x.ctx, x.q.DB(), fdbq.NewJob{Type: "email", ID: "big", Data: jsonString(fdbq.MaxDataSize+1, "x")})
	errIs(t, "add", err, fdbq.ErrDataTooLarge, "90001", "90000")
	// Data whose stored form is larger than it looks: encoding/json writes
	// '<' as \u003c.
	_, err = x.q.Add(x.ctx, x.q.DB(), fdbq.NewJob{Type: "email", ID: "html", Data: jsonString(fdbq.MaxDataSize/2, "<")})
	errIs(t, "add escaped", err, fdbq.ErrDataTooLarge, "90000")
	_, err = x.q.AddBatch(x.ctx, x.q.DB(), []fdbq.NewJob{{Type: "email", ID: "small"}, {Type: "email", ID: "big", Data: jsonString(fdbq.MaxDataSize+1, "x")}})
	errIs(t, "add batch", err, fdbq.ErrDataTooLarge)
	x.wantCounts(0, 0, 0)
	for _, id := range []string{"big", "html", "small"} {
		if x.raw(trJobKey("email", id)) != nil {
			t.Fatalf("refused add wrote job %s", id)
		}
	}
	if string(x.raw(trChangeKey("email"))) != string(change) {
		t.Fatal("refused adds moved the change counter")
	}

	// Exactly at the limit is fine.
	x.add(fdbq.NewJob{ID: "max", Data: jsonString(fdbq.MaxDataSize, "x")})
	if j := x.get("max"); len(j.Data) != fdbq.MaxDataSize {
		t.Fatalf("stored %d bytes", len(j.Data))
	}
	trMust(t, "remove", x.q.Remove(x.ctx, x.q.DB(), "email", "max"))

	// Data, result and progress share the limit.
	x.add(fdbq.NewJob{ID: "a", Data: jsonString(60_000, "d")})
	l := x.acceptOne("a")
	err = x.q.Finish(x.ctx, x.q.DB(), l, jsonString(40_000, "r"))
	errIs(t, "finish", err, fdbq.ErrDataTooLarge, "100000", "90000")
	err = x.q.Heartbeat(x.ctx, x.q.DB(), l, fdbq.HeartbeatOptions{Progress: jsonString(40_000, "p")})
	errIs(t, "heartbeat progress", err, fdbq.ErrDataTooLarge)
	err = x.q.Heartbeat(x.ctx, x.q.DB(), l, fdbq.HeartbeatOptions{Data: jsonString(fdbq.MaxDataSize+1, "d")})
	errIs(t, "heartbeat data", err, fdbq.ErrDataTooLarge)
	j := x.is("a", fdbq.Running, "", 1)
	if len(j.Data) != 60_000 || j.Result != nil || j.Progress != nil {
		t.Fatalf("refused calls changed the job: data %d result %d progress %d", len(j.Data), len(j.Result), len(j.Progress))
	}
	trMust(t, "finish with a result that fits", x.q.Finish(x.ctx, x.q.DB(), l, jsonString(30_000, "r")))
	x.is("a", fdbq.Finished, fdbq.Succeeded, 1)
}

func TestErrorsLongFailureCause(t *testing.T) {
	x := newTrQ(t)
	x.add(fdbq.NewJob{ID: "a", Data: jsonString(50_000, "d")})
	l := x.acceptOne("a")
	// A huge cause is cut, keeping its end, rather than failing the call.
	cause := strings.Repeat("frame\n", 200_000) + "the end"
	trMust(t, "fail with a long cause", x.q.Fail(x.ctx, x.q.DB(), l, cause))
	j := x.is("a", fdbq.Pending, "", 1)
	if len(j.Error) > 20_000 || !strings.HasSuffix(j.Error, "the end") {
		t.Fatalf("stored error of %d bytes ending %q", len(j.Error), j.Error[max(0, len(j.Error)-10):])
	}

	// A cause whose every byte needs escaping in JSON must not break the
	// record either: either it fits or the call says it is too large.
	x.c.Advance(time.Hour)
	l = x.acceptOne("a")
	err := x.q.Fail(x.ctx, x.q.DB(), l, strings.Repeat("<", 30_000))
	if err != nil {
		errIs(t, "fail with an escaped cause", err, fdbq.ErrDataTooLarge)
		x.is("a", fdbq.Running, "", 2)
	} else {
		x.is("a", fdbq.Pending, "", 2)
	}
}

func TestErrorsNames(t *testing.T) {
	x := newTrQ(t)
	long := strings.Repeat("n", fdbq.MaxIDSize+1)
	for _, tc := range []struct {
		name  string
		job   fdbq.NewJob
		words []string
	}{
		{"empty type", fdbq.NewJob{ID: "a"}, []string{"empty type name"}},
		{"long type", fdbq.NewJob{Type: long, ID: "a"}, []string{"type name", "257", "128"}},
		{"long id", fdbq.NewJob{Type: "email", ID: long}, []string{"job id", "257", "256"}},
		{"negative max attempts", fdbq.NewJob{Type: "email", ID: "a", MaxAttempts: -1}, []string{"max attempts"}},
		{"bad retry", fdbq.NewJob{Type: "email", ID: "a", Retry: &fdbq.RetryPolicy{MaxAttempts: 2, Backoff: "fibonacci"}}, []string{"unknown backoff", "fibonacci"}},
		{"priority out of range", fdbq.NewJob{Type: "email", ID: "a", Priority: math.MinInt}, []string{"priority", "out of range"}},
		{"retry without attempts", fdbq.NewJob{Type: "email", ID: "a", Retry: &fdbq.RetryPolicy{Backoff: fdbq.Constant}}, []string{"max_attempts", "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := x.q.Add(x.ctx, x.q.DB(), tc.job)
			errIs(t, "add", err, fdbq.ErrInvalidJob, tc.words...)
			x.wantCounts(0, 0, 0)
		})
	}
	// The limits are inclusive.
	id := strings.Repeat("i", fdbq.MaxIDSize)
	x.add(fdbq.NewJob{ID: id})
	if x.get(id).ID != id {
		t.Fatal("id at the limit")
	}
	typ := strings.Repeat("t", fdbq.MaxTypeNameSize)
	trMust(t, "set type at the limit", x.q.SetType(x.ctx, x.q.DB(), typ, fdbq.DefaultTypeSettings()))
	errIs(t, "set type with a long name", x.q.SetType(x.ctx, x.q.DB(), long, fdbq.DefaultTypeSettings()), fdbq.ErrInvalidJob, "type name")
	errIs(t, "set type without a name", x.q.SetType(x.ctx, x.q.DB(), "", fdbq.DefaultTypeSettings()), fdbq.ErrInvalidJob, "empty type name")
}

// The extreme priorities that are allowed keep their order.
func TestErrorsPriorityExtremes(t *testing.T) {
	x := newTrQ(t)
	now := x.c.Now()
	x.add(fdbq.NewJob{ID: "min", Priority: math.MinInt + 1, ScheduledAt: now.Add(-3 * time.Second)})
	x.add(fdbq.NewJob{ID: "zero", ScheduledAt: now})
	x.add(fdbq.NewJob{ID: "max", Priority: math.MaxInt, ScheduledAt: now})
	x.add(fdbq.NewJob{ID: "neg", Priority: -1, ScheduledAt: now.Add(-2 * time.Second)})
	ls := x.accept(fdbq.AcceptOptions{Max: 4, Window: 4})
	if got, want := trLeaseIDs(ls), []string{"max", "zero", "neg", "min"}; !slices.Equal(got, want) {
		t.Fatalf("accepted %v, want %v", got, want)
	}
}

func TestErrorsSettings(t *testing.T) {
	x := newTrQ(t)
	before, err := x.q.GetType(x.ctx, x.q.DB(), "email")
	trMust(t, "get type", err)
	for _, tc := range []struct {
		name  string
		edit  func(*fdbq.TypeSettings)
		words []string
	}{
		{"no activity timeout", func(s *fdbq.TypeSettings) { s.ActivityTimeout = 0 }, []string{"activity timeout", "0s"}},
		{"tiny activity timeout", func(s *fdbq.TypeSettings) { s.ActivityTimeout = time.Millisecond }, []string{"activity timeout", "1ms"}},
		{"unknown backoff", func(s *fdbq.TypeSettings) { s.Retry.Backoff = "random" }, []string{"unknown backoff", `"random"`}},
		{"no backoff", func(s *fdbq.TypeSettings) { s.Retry.Backoff = "" }, []string{"unknown backoff"}},
		{"zero max attempts", func(s *fdbq.TypeSettings) { s.Retry.MaxAttempts = 0 }, []string{"max_attempts", "0"}},
		{"negative delay", func(s *fdbq.TypeSettings) { s.Retry.Base = -time.Second }, []string{"negative delay"}},
		{"negative retention", func(s *fdbq.TypeSettings) { s.Retention = -time.Hour }, []string{"retention"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fdbq.DefaultTypeSettings()
			tc.edit(&s)
			errIs(t, "validate", s.Validate(), fdbq.ErrInvalidJob, tc.words...)
			errIs(t, "set type", x.q.SetType(x.ctx, x.q.DB(), "email", s), fdbq.ErrInvalidJob, tc.words...)
			errIs(t, "set new type", x.q.SetType(x.ctx, x.q.DB(), "other", s), fdbq.ErrInvalidJob, tc.words...)
			after, err := x.q.GetType(x.ctx, x.q.DB(), "email")
			trMust(t, "get type", err)
			if !after.Settings.Equal(before.Settings) {
				t.Fatalf("refused settings were stored: %+v", after.Settings)
			}
			if _, err := x.q.GetType(x.ctx, x.q.DB(), "other"); !errors.Is(err, fdbq.ErrUnknownType) {
				t.Fatalf("refused settings registered a type: %v", err)
			}
		})
	}
	trMust(t, "default settings", fdbq.DefaultTypeSettings().Validate())
}

func TestErrorsListAndWait(t *testing.T) {
	x := newTrQ(t)
	for _, id := range []string{"a", "b", "c"} {
		x.add(fdbq.NewJob{ID: id})
	}
	_, err := x.q.List(x.ctx, x.q.DB(), "email", fdbq.ListOptions{State: "done"})
	errIs(t, "list unknown state", err, fdbq.ErrInvalidJob, "unknown state", `"done"`)
	_, err = x.q.List(x.ctx, x.q.DB(), "email", fdbq.ListOptions{})
	errIs(t, "list without state", err, fdbq.ErrInvalidJob, "unknown state")
	_, err = x.q.List(x.ctx, x.q.DB(), "email", fdbq.ListOptions{State: fdbq.Pending, Cursor: "!!not base64!!"})
	errIs(t, "list bad cursor", err, fdbq.ErrInvalidJob, "bad cursor")

	// A cursor belongs to the listing that made it.
	p, err := x.q.List(x.ctx, x.q.DB(), "email", fdbq.ListOptions{State: fdbq.Pending, Limit: 1})
	trMust(t, "list", err)
	if p.Next == "" || len(p.Jobs) != 1 {
		t.Fatalf("first page: %d jobs, next %q", len(p.Jobs), p.Next)
	}
	_, err = x.q.List(x.ctx, x.q.DB(), "email", fdbq.ListOptions{State: fdbq.Finished, Cursor: p.Next})
	errIs(t, "cursor of another state", err, fdbq.ErrInvalidJob, "bad cursor")
	_, err = x.q.List(x.ctx, x.q.DB(), "sms", fdbq.ListOptions{State: fdbq.Pending, Cursor: p.Next})
	errIs(t, "cursor of another type", err, fdbq.ErrInvalidJob, "bad cursor")
	next, err := x.q.List(x.ctx, x.q.DB(), "email", fdbq.ListOptions{State: fdbq.Pending, Limit: 1, Cursor: p.Next})
	trMust(t, "second page", err)
	if len(next.Jobs) != 1 || next.Jobs[0].ID == p.Jobs[0].ID {
		t.Fatalf("second page: %v", next.Jobs)
	}

	_, err = x.q.Wait(x.ctx, "email", []string{"a"}, "done")
	errIs(t, "wait unknown state", err, fdbq.ErrInvalidJob, "unknown state", `"done"`)
	_, err = x.q.WaitOne(x.ctx, "email", "nope", fdbq.Finished)
	errIs(t, "wait missing", err, fdbq.ErrNotFound, "email/nope")
	_, err = x.q.Get(x.ctx, x.q.DB(), "email", "nope")
	errIs(t, "get missing", err, fdbq.ErrNotFound, "email/nope")
}

func TestErrorsHalt(t *testing.T) {
	x := newTrQ(t)
	x.add(fdbq.NewJob{ID: "a"})
	stale := x.acceptOne("a")
	trMust(t, "cancel", x.q.Cancel(x.ctx, x.q.DB(), "email", "a"))
	trMust(t, "requeue", x.q.Requeue(x.ctx, x.q.DB(), "email", "a"))
	cur := x.acceptOne("a")

	err := x.q.Finish(x.ctx, x.q.DB(), stale, nil)
	errIs(t, "finish with a stale lock", err, fdbq.ErrHalt, "email/a", "another lock")
	errIs(t, "fail with a stale lock", x.q.Fail(x.ctx, x.q.DB(), stale, "x"), fdbq.ErrHalt, "email/a")
	// A lease nobody issued.
	forged := &fdbq.Lease{Job: fdbq.Job{Type: "email", ID: "a"}, Lock: "forged"}
	errIs(t, "finish with a forged lock", x.q.Finish(x.ctx, x.q.DB(), forged, nil), fdbq.ErrHalt, "email/a")
	x.is("a", fdbq.Running, "", 1)
	trMust(t, "finish by the holder", x.q.Finish(x.ctx, x.q.DB(), cur, nil))

	errIs(t, "cancel finished", x.q.Cancel(x.ctx, x.q.DB(), "email", "a"), fdbq.ErrWrongState, "email/a", "finished")
	errIs(t, "requeue succeeded", x.q.Requeue(x.ctx, x.q.DB(), "email", "a"), fdbq.ErrWrongState, "email/a", "succeeded")
	errIs(t, "remove missing", x.q.Remove(x.ctx, x.q.DB(), "email", "nope"), fdbq.ErrNotFound, "email/nope")

	ctx, cancel := context.WithCancel(x.ctx)
	cancel()
	if _, err := x.q.Accept(ctx, "email", fdbq.AcceptOptions{Timeout: -1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("accept with an ended context: %v", err)
	}
}
