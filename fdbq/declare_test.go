package fdbq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
)

// DeclareType registers an unknown type with the declared settings, and
// gives a known one the declared settings but keeps an operator's pause.
func TestDeclareType(t *testing.T) {
	x := newTrQ(t)
	s := fdbq.DefaultTypeSettings()
	s.ActivityTimeout = time.Minute
	get := func(name string) fdbq.TypeSettings {
		t.Helper()
		info, err := x.q.GetType(x.ctx, x.q.DB(), name)
		trMust(t, "get type", err)
		return info.Settings
	}

	trMust(t, "declare a new type", x.q.DeclareType(x.ctx, x.q.DB(), "sms", s))
	if got := get("sms"); !got.Equal(s) {
		t.Fatalf("new type: %+v, want %+v", got, s)
	}

	// An operator pauses "email"; the program declares it again, with
	// other settings and not paused, as a restart does.
	trMust(t, "pause", x.q.Pause(x.ctx, x.q.DB(), "email"))
	trMust(t, "declare a paused type", x.q.DeclareType(x.ctx, x.q.DB(), "email", s))
	want := s
	want.Paused = true
	if got := get("email"); !got.Equal(want) {
		t.Fatalf("paused type declared again: %+v, want %+v (paused, the declared timeout)", got, want)
	}

	// Declaring a type paused pauses it, and Resume undoes it.
	paused := s
	paused.Paused = true
	trMust(t, "declare paused", x.q.DeclareType(x.ctx, x.q.DB(), "sms", paused))
	if got := get("sms"); !got.Paused {
		t.Fatalf("declared paused: %+v", got)
	}
	trMust(t, "resume", x.q.Resume(x.ctx, x.q.DB(), "sms"))
	trMust(t, "declare unpaused", x.q.DeclareType(x.ctx, x.q.DB(), "sms", s))
	if got := get("sms"); got.Paused {
		t.Fatalf("a resumed type declared unpaused is paused: %+v", got)
	}

	// Settings that do not validate are refused and change nothing.
	bad := s
	bad.ActivityTimeout = time.Millisecond
	if err := x.q.DeclareType(x.ctx, x.q.DB(), "email", bad); !errors.Is(err, fdbq.ErrInvalidJob) {
		t.Fatalf("declare with bad settings: %v", err)
	}
	if got := get("email"); !got.Equal(want) {
		t.Fatalf("after a refused declare: %+v, want %+v", got, want)
	}
}

// DeclareType is a transactional function: inside a transaction that
// fails it writes nothing.
func TestDeclareTypeInTransaction(t *testing.T) {
	x := newTrQ(t)
	errAbort := errors.New("abort")
	err := x.q.DB().Transact(x.ctx, func(tx kv.Tx) error {
		if err := x.q.DeclareType(context.Background(), tx, "sms", fdbq.DefaultTypeSettings()); err != nil {
			return err
		}
		return errAbort
	})
	if !errors.Is(err, errAbort) {
		t.Fatalf("transaction: %v", err)
	}
	if _, err := x.q.GetType(x.ctx, x.q.DB(), "sms"); !errors.Is(err, fdbq.ErrUnknownType) {
		t.Fatalf("type declared in an aborted transaction: %v", err)
	}
}
