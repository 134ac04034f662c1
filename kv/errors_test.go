package kv_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jobstage/jobstage/kv"
)

func TestErrorsMatchByCode(t *testing.T) {
	err := fmt.Errorf("accept: %w", kv.ErrNotCommitted.WithDetail("conflict on %q", "k"))
	if !errors.Is(err, kv.ErrNotCommitted) {
		t.Fatal("wrapped not_committed does not match the sentinel")
	}
	if errors.Is(err, kv.ErrTransactionTooOld) {
		t.Fatal("not_committed matches transaction_too_old")
	}
	if !kv.IsRetryable(err) || kv.IsMaybeCommitted(err) {
		t.Fatal("not_committed: want retryable, not maybe-committed")
	}
	if kv.ErrorCode(err) != 1020 {
		t.Fatalf("code %d", kv.ErrorCode(err))
	}
	if got := err.Error(); got != `accept: kv: not_committed (1020): conflict on "k"` {
		t.Fatalf("message %q", got)
	}
	if !kv.IsMaybeCommitted(kv.ErrCommitUnknownResult) || !kv.IsRetryable(kv.ErrCommitUnknownResult) {
		t.Fatal("commit_unknown_result: want retryable and maybe-committed")
	}
	for _, e := range []error{kv.ErrKeyTooLarge, kv.ErrValueTooLarge, kv.ErrTransactionTooLarge, kv.ErrKeyOutsideLegalRange, context.Canceled, errors.New("x")} {
		if kv.IsRetryable(e) {
			t.Errorf("%v is retryable", e)
		}
	}
	limit := &kv.RetryLimitError{Attempts: 4, Err: kv.ErrNotCommitted}
	if !errors.Is(limit, kv.ErrRetryLimit) || !errors.Is(limit, kv.ErrNotCommitted) {
		t.Fatal("RetryLimitError must match ErrRetryLimit and its cause")
	}
	if kv.IsRetryable(limit) {
		t.Fatal("an error the retry loop gave up on is not retryable again")
	}
}

func TestRangeHelpers(t *testing.T) {
	r, err := kv.PrefixRange([]byte("a\xff"))
	if err != nil || string(r.End) != "b" {
		t.Fatalf("PrefixRange(a\\xff) = %q, %v", r.End, err)
	}
	if _, err := kv.PrefixRange([]byte("\xff\xff")); !errors.Is(err, kv.ErrInvalidPrefix) {
		t.Fatalf("PrefixRange(\\xff\\xff): %v", err)
	}
	if !r.Contains([]byte("a\xff\x00")) || r.Contains([]byte("b")) {
		t.Fatal("Contains")
	}
	if !kv.SingleKeyRange([]byte("k")).Contains([]byte("k")) || kv.SingleKeyRange([]byte("k")).Contains([]byte("k\x00")) {
		t.Fatal("SingleKeyRange")
	}
	if !kv.KeyRange([]byte("a"), []byte("c")).Overlaps(kv.KeyRange([]byte("b"), []byte("d"))) ||
		kv.KeyRange([]byte("a"), []byte("b")).Overlaps(kv.KeyRange([]byte("b"), []byte("c"))) {
		t.Fatal("Overlaps")
	}
}

func TestFutureResolvesOnce(t *testing.T) {
	f := kv.NewFuture[int]()
	if !f.Resolve(1, nil) || f.Resolve(2, nil) {
		t.Fatal("only the first Resolve counts")
	}
	v, err := f.Get(context.Background())
	if v != 1 || err != nil {
		t.Fatalf("Get = %d, %v", v, err)
	}
	pending := kv.NewFuture[int]()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := pending.Get(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with a cancelled ctx: %v", err)
	}
}

func TestChanWatchCancel(t *testing.T) {
	calls := 0
	w := kv.NewChanWatch(func() { calls++ })
	w.Cancel()
	w.Cancel()
	if calls != 1 {
		t.Fatalf("onCancel ran %d times", calls)
	}
	if err := w.Wait(context.Background()); !errors.Is(err, kv.ErrTransactionCancelled) {
		t.Fatalf("Wait after Cancel: %v", err)
	}
	fired := kv.NewChanWatch(func() { t.Fatal("onCancel after the watch fired") })
	fired.Fire(nil)
	fired.Cancel()
	if err := fired.Wait(context.Background()); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}

// TestRetryablePredicate: IsRetryable and IsMaybeCommitted are
// fdb_error_predicate's RETRYABLE and MAYBE_COMMITTED of FoundationDB 7.3
// (bindings/c/fdb_c.cpp), with the two codes 7.4 adds: every FoundationDB
// code from 1000 to 2999 is checked against the lists, so one added or
// dropped by mistake fails.
func TestRetryablePredicate(t *testing.T) {
	maybeCommitted := map[int]bool{1021: true, 1039: true}
	retryableNotCommitted := map[int]bool{
		1020: true, 1007: true, 1009: true, 1038: true, 1078: true, 1042: true,
		1051: true, 1037: true, 1213: true, 1223: true, // 7.3
		1235: true, 1242: true, // 7.4
	}
	for code := 1000; code < 3000; code++ {
		err := fmt.Errorf("wrapped: %w", &kv.Error{Code: code})
		if got, want := kv.IsRetryable(err), maybeCommitted[code] || retryableNotCommitted[code]; got != want {
			t.Errorf("IsRetryable(%d) = %t, want %t", code, got, want)
		}
		if got, want := kv.IsMaybeCommitted(err), maybeCommitted[code]; got != want {
			t.Errorf("IsMaybeCommitted(%d) = %t, want %t", code, got, want)
		}
	}
	unknown := &kv.UnknownResultError{Err: &kv.RetryLimitError{Attempts: 2, Err: kv.ErrTransactionTooOld}, Unknown: kv.ErrCommitUnknownResult}
	if !kv.IsMaybeCommitted(unknown) || kv.IsRetryable(unknown) || !errors.Is(unknown, kv.ErrRetryLimit) {
		t.Errorf("a call that gave up with an unknown commit: maybe-committed %t, retryable %t, retry limit %t; want true, false, true",
			kv.IsMaybeCommitted(unknown), kv.IsRetryable(unknown), errors.Is(unknown, kv.ErrRetryLimit))
	}
}
