package kvtest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/kvtest"
)

// The fault injector's ReadVersion asks the inner transaction first and
// injects nothing of its own: a transaction whose context ended answers
// its real, final error. FoundationDB obtains a transaction's read version
// once and caches it (NativeAPI.actor.h, Transaction::getReadVersion keeps
// trState->readVersionFuture), and the GRV path has no
// transaction_too_old.
func TestFaultyReadVersionKeepsRealError(t *testing.T) {
	db := open(t, true)
	// Every read draws too-old (TooOldRate × ReadTooOldFraction = 1).
	fb := kvtest.NewFaultyBackend(db.Backend(), kvtest.FaultOptions{Seed: 1, TooOldRate: 1 / kvtest.ReadTooOldFraction})
	for _, what := range []string{"Get", "ReadVersion"} {
		ctx, cancel := context.WithCancel(context.Background())
		tx, err := fb.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		if what == "Get" {
			_, err = tx.Get([]byte("k"))
		} else {
			_, err = tx.ReadVersion()
		}
		if !errors.Is(err, context.Canceled) || kv.IsRetryable(err) {
			t.Errorf("%s of a transaction whose context ended: %v (retryable %v), want its context's error", what, err, kv.IsRetryable(err))
		}
		tx.Cancel()
	}
}
