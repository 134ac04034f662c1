package fdbq_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
)

// TestErrorDetail: fdbq's errors are *fdbq.Error values: the sentinel,
// which errors.Is finds, and the detail without the sentinel's text, which
// callers take with errors.As instead of cutting the message.
func TestErrorDetail(t *testing.T) {
	ctx := context.Background()
	q, _ := newQueue(t)
	_, getErr := q.Get(ctx, q.DB(), "email", "nobody")
	_, typeErr := q.Add(ctx, q.DB(), fdbq.NewJob{Type: "nosuchtype", ID: "a"})
	for _, c := range []struct {
		name     string
		err      error
		sentinel error
		detail   string
	}{
		{"type name", fdbq.ValidateTypeName("-x"), fdbq.ErrInvalidJob, `type name "-x" starts with '-'; it must start with a letter or a digit`},
		{"retry policy", fdbq.RetryPolicy{MaxAttempts: 0, Backoff: fdbq.Constant}.Validate(), fdbq.ErrInvalidJob, "max_attempts 0 is below 1"},
		{"not found", getErr, fdbq.ErrNotFound, "email/nobody"},
		{"unknown type", typeErr, fdbq.ErrUnknownType, `"nosuchtype"`},
	} {
		var fe *fdbq.Error
		if !errors.As(c.err, &fe) || fe.Err != c.sentinel || fe.Detail != c.detail {
			t.Errorf("%s: %#v, want an *fdbq.Error of %v with detail %q", c.name, c.err, c.sentinel, c.detail)
			continue
		}
		if !errors.Is(c.err, c.sentinel) || c.err.Error() != c.sentinel.Error()+": "+c.detail {
			t.Errorf("%s: %q is not %q followed by its detail", c.name, c.err, c.sentinel)
		}
	}
}
