package fdbq

import (
	"errors"
	"fmt"
)

// ErrCorrupt: what the store holds for a job or a type does not decode: a
// record, a type's settings or an index key that is damaged, or that a
// version of jobstage this one cannot read wrote. The error names the job,
// type or key and says what is wrong. Remove deletes such a job; the other
// operations on it fail with ErrCorrupt; List, Types and the Monitor report
// or skip it and go on with the rest.
var ErrCorrupt = errors.New("fdbq: unreadable data in the store")

// corruptError marks a decoder's error, which names the job or type, as
// ErrCorrupt; its message is the decoder's.
type corruptError struct{ err error }

func (e *corruptError) Error() string   { return e.err.Error() }
func (e *corruptError) Unwrap() []error { return []error{ErrCorrupt, e.err} }

// corrupt marks err as ErrCorrupt; nil stays nil.
func corrupt(err error) error {
	if err == nil || errors.Is(err, ErrCorrupt) {
		return err
	}
	return &corruptError{err}
}

// decodeStored is decodeRecord for a record read from the store: one that
// does not decode, or that holds a state or outcome no version stores (a
// JSON record of earlier versions is read field by field, and may), is
// ErrCorrupt.
func decodeStored(b []byte, typ, id string) (*record, error) {
	rec, err := decodeRecord(b, typ, id)
	if err != nil {
		return nil, corrupt(err)
	}
	if err := rec.checkStored(); err != nil {
		return nil, corrupt(fmt.Errorf("fdbq: job %s/%s: corrupt record: %w", typ, id, err))
	}
	return rec, nil
}

// checkStored reports a state or outcome that no version stores, and that
// the record could not be stored again with.
func (r *record) checkStored() error {
	if _, ok := stateCode(r.State); !ok {
		return fmt.Errorf("unknown state %q", r.State)
	}
	if _, ok := outcomeCode(r.Outcome); !ok {
		return fmt.Errorf("unknown outcome %q", r.Outcome)
	}
	return nil
}

// Unreadable is an index entry whose job a listing could not read. The
// listing leaves it out of its jobs and goes on past it.
type Unreadable struct {
	// ID is the job's id; empty when the entry's key is not one fdbq
	// writes and names no id.
	ID string
	// Key is the index entry's key.
	Key []byte
	// Err says what is wrong; it wraps ErrCorrupt.
	Err error
}
