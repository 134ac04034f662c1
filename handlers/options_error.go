package handlers

import (
	"errors"
	"fmt"
)

// OptionsError is the error Exec and HTTP return for options they refuse:
// which handler, and what is wrong, for a caller that shows it in its own
// words (a config's problem at the handler's key).
type OptionsError struct {
	Handler string // "exec" or "http"
	Reason  string // what is wrong with the options
	Err     error  // the error behind Reason, if any
}

func (e *OptionsError) Error() string { return "handlers: " + e.Handler + ": " + e.Reason }

// Unwrap returns the error behind Reason, if any.
func (e *OptionsError) Unwrap() error { return e.Err }

// badOptions returns the *OptionsError of handler whose reason format and
// args make; a %w among them is its Err.
func badOptions(handler, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &OptionsError{Handler: handler, Reason: err.Error(), Err: errors.Unwrap(err)}
}
