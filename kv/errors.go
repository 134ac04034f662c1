package kv

import (
	"errors"
	"fmt"
)

// Error is a store error with FoundationDB's error code. Two Errors match
// under errors.Is when their codes are equal, so callers test for a kind of
// failure with the sentinels below whatever detail a backend added:
//
//	if errors.Is(err, kv.ErrNotCommitted) { ... }
type Error struct {
	Code   int
	Detail string // what exactly went wrong; may be empty
}

func (e *Error) Error() string {
	name := codeNames[e.Code]
	if name == "" {
		name = "error"
	}
	if e.Detail == "" {
		return fmt.Sprintf("kv: %s (%d)", name, e.Code)
	}
	return fmt.Sprintf("kv: %s (%d): %s", name, e.Code, e.Detail)
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t.Code == e.Code
	}
	return false
}

// Retryable reports whether a transaction that failed with e may succeed if
// run again from the start (FoundationDB's "retryable" predicate).
func (e *Error) Retryable() bool { return retryableCodes[e.Code] }

// MaybeCommitted reports whether the transaction may have committed despite
// the error (FoundationDB's "maybe_committed" predicate).
func (e *Error) MaybeCommitted() bool {
	return e.Code == CodeCommitUnknownResult || e.Code == CodeClusterVersionChanged
}

// WithDetail returns a copy of e carrying detail.
func (e *Error) WithDetail(format string, args ...any) *Error {
	return &Error{Code: e.Code, Detail: fmt.Sprintf(format, args...)}
}

// FoundationDB error codes used by kv.
const (
	CodeTransactionTooOld         = 1007
	CodeFutureVersion             = 1009
	CodeNotCommitted              = 1020
	CodeCommitUnknownResult       = 1021
	CodeTransactionCancelled      = 1025
	CodeTransactionTimedOut       = 1031
	CodeTooManyWatches            = 1032
	CodeAccessedUnreadable        = 1036
	CodeProcessBehind             = 1037
	CodeDatabaseLocked            = 1038
	CodeClusterVersionChanged     = 1039
	CodeClientInvalidOperation    = 2000
	CodeTransactionInvalidVersion = 2020
	CodeNoCommitVersion           = 2021
	CodeKeyOutsideLegalRange      = 2004
	CodeInvertedRange             = 2005
	CodeRangeLimitsInvalid        = 2012
	CodeInvalidOptionValue        = 2006
	CodeUsedDuringCommit          = 2017
	CodeInvalidMutationType       = 2018
	CodeTransactionTooLarge       = 2101
	CodeKeyTooLarge               = 2102
	CodeValueTooLarge             = 2103
	CodeOperationFailed           = 1000
)

// Sentinels for errors.Is.
var (
	ErrTransactionTooOld         = &Error{Code: CodeTransactionTooOld}
	ErrFutureVersion             = &Error{Code: CodeFutureVersion}
	ErrNotCommitted              = &Error{Code: CodeNotCommitted}
	ErrCommitUnknownResult       = &Error{Code: CodeCommitUnknownResult}
	ErrTransactionCancelled      = &Error{Code: CodeTransactionCancelled}
	ErrTransactionTimedOut       = &Error{Code: CodeTransactionTimedOut}
	ErrTooManyWatches            = &Error{Code: CodeTooManyWatches}
	ErrAccessedUnreadable        = &Error{Code: CodeAccessedUnreadable}
	ErrClientInvalidOperation    = &Error{Code: CodeClientInvalidOperation}
	ErrNoCommitVersion           = &Error{Code: CodeNoCommitVersion}
	ErrTransactionInvalidVersion = &Error{Code: CodeTransactionInvalidVersion}
	ErrKeyOutsideLegalRange      = &Error{Code: CodeKeyOutsideLegalRange}
	ErrInvertedRange             = &Error{Code: CodeInvertedRange}
	ErrRangeLimitsInvalid        = &Error{Code: CodeRangeLimitsInvalid}
	ErrUsedDuringCommit          = &Error{Code: CodeUsedDuringCommit}
	ErrInvalidMutationType       = &Error{Code: CodeInvalidMutationType}
	ErrTransactionTooLarge       = &Error{Code: CodeTransactionTooLarge}
	ErrKeyTooLarge               = &Error{Code: CodeKeyTooLarge}
	ErrValueTooLarge             = &Error{Code: CodeValueTooLarge}
	ErrOperationFailed           = &Error{Code: CodeOperationFailed}
)

// Errors of kv's own that have no FoundationDB code.
var (
	// ErrInvalidPrefix: a prefix of only 0xff bytes has no end key.
	ErrInvalidPrefix = errors.New("kv: prefix of only 0xff bytes has no end key")
	// ErrRetryLimit is matched by the error Transact returns when it gave up
	// after its retry limit; that error also wraps the last attempt's error.
	ErrRetryLimit = errors.New("kv: retry limit reached")
	// ErrClosed: the database was closed.
	ErrClosed = errors.New("kv: database is closed")
)

var codeNames = map[int]string{
	CodeOperationFailed:           "operation_failed",
	CodeTransactionTooOld:         "transaction_too_old",
	CodeFutureVersion:             "future_version",
	CodeNotCommitted:              "not_committed",
	CodeCommitUnknownResult:       "commit_unknown_result",
	CodeTransactionCancelled:      "transaction_cancelled",
	CodeTransactionTimedOut:       "transaction_timed_out",
	CodeTooManyWatches:            "too_many_watches",
	CodeAccessedUnreadable:        "accessed_unreadable",
	CodeProcessBehind:             "process_behind",
	CodeDatabaseLocked:            "database_locked",
	CodeClientInvalidOperation:    "client_invalid_operation",
	CodeNoCommitVersion:           "no_commit_version",
	CodeTransactionInvalidVersion: "transaction_invalid_version",
	CodeKeyOutsideLegalRange:      "key_outside_legal_range",
	CodeInvertedRange:             "inverted_range",
	CodeRangeLimitsInvalid:        "range_limits_invalid",
	CodeInvalidOptionValue:        "invalid_option_value",
	CodeUsedDuringCommit:          "used_during_commit",
	CodeInvalidMutationType:       "invalid_mutation_type",
	CodeTransactionTooLarge:       "transaction_too_large",
	CodeKeyTooLarge:               "key_too_large",
	CodeValueTooLarge:             "value_too_large",
	// Codes a FoundationDB cluster may return that kv passes through.
	1039: "cluster_version_changed",
	1042: "commit_proxy_memory_limit_exceeded",
	1051: "batch_transaction_throttled",
	1078: "grv_proxy_memory_limit_exceeded",
	1213: "tag_throttled",
	1223: "proxy_tag_throttled",
	1235: "transaction_throttled_hot_shard",
	1242: "transaction_rejected_range_locked",
}

// retryableCodes is fdb_error_predicate(FDB_ERROR_PREDICATE_RETRYABLE) of
// FoundationDB 7.3 (bindings/c/fdb_c.cpp: MAYBE_COMMITTED or
// RETRYABLE_NOT_COMMITTED) with the two codes 7.4 adds, so a 7.4 cluster's
// throttling is retried too. 1223 is still defined and retried by 7.3 and
// 7.4 (only later releases dropped it); in 7.3, 1235 is a server-internal
// code that never reaches a client. The retry loop uses the predicate, not
// the client's on_error, which in 7.3 also retries 1079
// (blob_granule_request_failed, blob granules only).
var retryableCodes = map[int]bool{
	// MAYBE_COMMITTED
	CodeCommitUnknownResult:   true,
	CodeClusterVersionChanged: true,
	// RETRYABLE_NOT_COMMITTED
	CodeNotCommitted:      true,
	CodeTransactionTooOld: true,
	CodeFutureVersion:     true,
	CodeDatabaseLocked:    true,
	1078:                  true, // grv_proxy_memory_limit_exceeded
	1042:                  true, // commit_proxy_memory_limit_exceeded
	1051:                  true, // batch_transaction_throttled
	CodeProcessBehind:     true,
	1213:                  true, // tag_throttled
	1223:                  true, // proxy_tag_throttled (7.3, 7.4)
	1235:                  true, // transaction_throttled_hot_shard (7.4)
	1242:                  true, // transaction_rejected_range_locked (7.4)
}

// IsRetryable reports whether err (or an error it wraps) is a retryable
// store error.
func IsRetryable(err error) bool {
	var unknown *UnknownResultError
	if errors.Is(err, ErrRetryLimit) || errors.As(err, &unknown) {
		// The retry loop already gave up on it.
		return false
	}
	var e *Error
	return errors.As(err, &e) && e.Retryable()
}

// IsMaybeCommitted reports whether err says the transaction may or may not
// have committed (commit_unknown_result, cluster_version_changed), also
// when the retry loop gave up with such an outcome unresolved.
func IsMaybeCommitted(err error) bool {
	return errors.Is(err, ErrCommitUnknownResult) || errors.Is(err, errClusterVersionChanged)
}

var errClusterVersionChanged = &Error{Code: CodeClusterVersionChanged}

// ErrorCode returns the FoundationDB code of err, or 0 when err is not a
// store error.
func ErrorCode(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// RetryLimitError is returned by Transact when fn kept failing with
// retryable errors until the retry limit. It matches ErrRetryLimit and
// unwraps to the last attempt's error.
type RetryLimitError struct {
	Attempts int
	Err      error
}

func (e *RetryLimitError) Error() string {
	return fmt.Sprintf("kv: retry limit reached after %d attempts: %v", e.Attempts, e.Err)
}

func (e *RetryLimitError) Unwrap() error { return e.Err }

// UnknownResultError is returned by DB.Transact when it stopped (the retry
// limit, the context, a non-retryable error) while the outcome of an
// attempt whose commit answered commit_unknown_result was still unknown:
// that attempt may have committed. It matches ErrCommitUnknownResult and
// unwraps to both errors.
type UnknownResultError struct {
	Err     error // why Transact stopped
	Unknown error // the unresolved commit's error
}

func (e *UnknownResultError) Error() string {
	return fmt.Sprintf("%v (an earlier attempt may have committed: %v)", e.Err, e.Unknown)
}

func (e *UnknownResultError) Unwrap() []error { return []error{e.Err, e.Unknown} }

// Is makes errors.Is(err, ErrCommitUnknownResult) true, whatever code made
// the outcome unknown (cluster_version_changed, a cancel mid-commit).
func (e *UnknownResultError) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == CodeCommitUnknownResult
}

// Is makes errors.Is(err, ErrRetryLimit) true.
func (e *RetryLimitError) Is(target error) bool { return target == ErrRetryLimit }
