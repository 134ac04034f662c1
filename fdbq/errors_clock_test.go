package fdbq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// Workers whose clocks disagree end the attempts of one job: each entry of
// its history has the time of the clock of the process that ended the
// attempt (an hour behind, on time, an hour ahead), and the history keeps
// the order of the attempts, not of those times.
func TestAttemptErrorsSkewedClocks(t *testing.T) {
	q, c := newQueue(t)
	ctx := context.Background()
	db := q.DB()
	s := fdbq.DefaultTypeSettings()
	s.Retry = fdbq.RetryPolicy{MaxAttempts: 10, Backoff: fdbq.Constant, Base: time.Millisecond}
	if err := q.SetType(ctx, db, "email", s); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Add(ctx, db, fdbq.NewJob{Type: "email", ID: "a"}); err != nil {
		t.Fatal(err)
	}
	skews := []time.Duration{-time.Hour, 0, time.Hour, -2 * time.Hour}
	var want []fdbq.AttemptError
	for i, skew := range skews {
		// A retry is due by the clock of the worker that failed the
		// attempt before (a clock an hour ahead schedules it an hour
		// late): accept up to two hours ahead.
		ls, err := q.Accept(ctx, "email", fdbq.AcceptOptions{MaxScheduledAt: c.Now().Add(2 * time.Hour)})
		if err != nil || len(ls) != 1 {
			t.Fatalf("attempt %d: accept: %v %v", i+1, ls, err)
		}
		at := c.Now().Add(skew)
		worker := fdbq.New(db, fdbq.Options{Now: func() time.Time { return at }})
		if _, err := worker.End(ctx, db, ls[0], fdbq.Ending{How: fdbq.AttemptFailed, Cause: fmt.Sprint("failure ", i+1)}); err != nil {
			t.Fatalf("attempt %d: %v", i+1, err)
		}
		if j, err := q.Get(ctx, db, "email", "a"); err != nil || !j.ScheduledAt.Equal(at.Add(time.Millisecond).Truncate(time.Millisecond)) {
			t.Fatalf("attempt %d failed at %v: retry scheduled at %v (%v), want by that clock", i+1, at, j.ScheduledAt, err)
		}
		want = append(want, fdbq.AttemptError{Attempt: i + 1, At: at.UTC().Truncate(time.Millisecond), Error: fmt.Sprint("failure ", i+1)})
		c.Advance(time.Minute)
	}
	j, err := q.Get(ctx, db, "email", "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Errors) != len(want) {
		t.Fatalf("history %+v, want %+v", j.Errors, want)
	}
	for i := range want {
		got := j.Errors[i]
		if got.Attempt != want[i].Attempt || !got.At.Equal(want[i].At) || got.Error != want[i].Error {
			t.Errorf("entry %d: %+v, want %+v", i, got, want[i])
		}
	}
}
