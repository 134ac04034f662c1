package fdbq

import "fmt"

// Error is an error of fdbq's with what it is about: Err is the sentinel
// it is (ErrInvalidJob, ErrNotFound, ErrUnknownType, ErrWrongState,
// ErrDataTooLarge, ErrHalt), which errors.Is finds through Unwrap, and
// Detail says what is wrong, or which job, without the sentinel's own
// text. A caller that shows the problem in its own words (an HTTP
// answer, a config's problem at its key) takes Detail with errors.As
// rather than cutting the sentinel's text off the message.
type Error struct {
	Err    error
	Detail string
	// Cause, when set, is the error Detail was made from (a decoder's,
	// for ErrCorrupt), for errors.Is and errors.As.
	Cause error
}

// Error is the sentinel's text, then the detail: "fdbq: job not found:
// email/j1".
func (e *Error) Error() string {
	if e.Detail == "" {
		return e.Err.Error()
	}
	return e.Err.Error() + ": " + e.Detail
}

// Unwrap returns the sentinel, and the cause if there is one.
func (e *Error) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

// errorf returns an *Error of the sentinel err, with the detail format
// and args make.
func errorf(err error, format string, args ...any) error {
	return &Error{Err: err, Detail: fmt.Sprintf(format, args...)}
}
