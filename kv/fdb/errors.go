//go:build fdb

package fdb

import (
	"errors"

	"github.com/apple/foundationdb/bindings/go/src/fdb"

	"github.com/jobstage/jobstage/kv"
)

// toKV turns an fdb.Error into a *kv.Error with the same code, so that
// errors.Is(err, kv.ErrNotCommitted) and kv.IsRetryable work on it. Other
// errors pass through.
func toKV(err error) error {
	var fe fdb.Error
	if errors.As(err, &fe) {
		return &kv.Error{Code: fe.Code, Detail: fe.Error()}
	}
	return err
}

// withCause returns transaction_cancelled error e, matching cause as well
// when the adapter knows why it cancelled the transaction.
func withCause(e *kv.Error, cause error) error {
	if cause == nil {
		return e
	}
	return &cancelledError{cause: cause, err: e}
}

// cancelledError is transaction_cancelled from a cancellation the adapter
// made for a reason the caller can test for: the transaction's context
// ended (context.Canceled, context.DeadlineExceeded), the Store was closed
// (kv.ErrClosed), or a write failed before the commit. It matches both that
// cause and kv.ErrTransactionCancelled. The cause comes first so that
// errors.As finds it when it is itself a *kv.Error.
type cancelledError struct {
	cause error
	err   *kv.Error
}

func (e *cancelledError) Error() string { return e.err.Error() + ": " + e.cause.Error() }

func (e *cancelledError) Unwrap() []error { return []error{e.cause, e.err} }
