package fdbq

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobstage/jobstage/internal/jsontext"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// Unique says what makes a job unique among the jobs of its type, and
// what Add does when a job like it already exists (see Unique jobs in the
// package doc).
type Unique struct {
	// Fields are the top-level fields of the job's data, which must then
	// be a JSON object, that make it unique; a field the data lacks
	// counts as absent, which differs from null. Empty: the whole data.
	// Either way values compare as JSON: objects whatever the order of
	// their members, strings and numbers as written ("1" and "1.0"
	// differ), a member given twice by its last value. Data with a
	// string that is not valid Unicode (bytes that are not UTF-8, half
	// a surrogate pair) is refused: it would compare equal to others.
	Fields []string
	// States are the states in which an existing job counts as a
	// duplicate; zero means UniqueDefault.
	States UniqueStates
	// Window is how long a finished job counts as a duplicate after it
	// finished (by the clock of the process that finished it); 0: for as
	// long as it is kept (the type's retention). Pending and running jobs
	// count whatever their age.
	Window time.Duration
	// OnDuplicate is what Add does when a duplicate exists.
	OnDuplicate OnDuplicate
}

// UniqueStates is a set of the states in which an existing job counts as
// a duplicate.
type UniqueStates uint8

// States of a job for Unique.States.
const (
	UniquePending UniqueStates = 1 << iota
	UniqueRunning
	UniqueSucceeded
	UniqueFailed
	UniqueCanceled

	// UniqueDefault: pending, running, and finished with success, so that
	// a job that failed or was canceled can be added again.
	UniqueDefault  = UniquePending | UniqueRunning | UniqueSucceeded
	uniqueAnyState = UniquePending | UniqueRunning | UniqueSucceeded | UniqueFailed | UniqueCanceled
)

var uniqueStateNames = [...]string{"pending", "running", "succeeded", "failed", "canceled"}

// ParseUniqueStates reads states by their names: pending, running,
// succeeded, failed, canceled, and finished for the last three.
func ParseUniqueStates(names []string) (UniqueStates, error) {
	var s UniqueStates
	for _, n := range names {
		switch n {
		case "finished":
			s |= UniqueSucceeded | UniqueFailed | UniqueCanceled
			continue
		}
		i := slices.Index(uniqueStateNames[:], n)
		if i < 0 {
			return 0, errorf(ErrInvalidJob, "unique state %q is not one of pending, running, succeeded, failed, canceled, finished", n)
		}
		s |= 1 << i
	}
	return s, nil
}

// Names returns the states' names, in the order of ParseUniqueStates.
func (s UniqueStates) Names() []string {
	var out []string
	for i, n := range uniqueStateNames {
		if s&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// String is the states' names joined by '|'.
func (s UniqueStates) String() string { return strings.Join(s.Names(), "|") }

// OnDuplicate is what Add does with a unique job when a duplicate exists.
type OnDuplicate uint8

// What Add does on a duplicate.
const (
	// DuplicateReturn adds nothing and returns the existing job, with
	// Added set to AddedDuplicate.
	DuplicateReturn OnDuplicate = iota
	// DuplicateReplace adds the existing job again with the new job's
	// data and options, under the existing job's id (Add's resubmit: a
	// pending job is updated in place, a running one runs again after
	// its attempt, a finished one is added again), and returns it with
	// Added set to AddedReplaced.
	DuplicateReplace
	// DuplicateRefuse adds nothing and fails with a *DuplicateError
	// (ErrDuplicate), which names the existing job.
	DuplicateRefuse
)

var onDuplicateNames = [...]string{"return", "replace", "refuse"}

// ParseOnDuplicate reads "return", "replace" or "refuse" ("": return).
func ParseOnDuplicate(s string) (OnDuplicate, error) {
	if s == "" {
		return DuplicateReturn, nil
	}
	i := slices.Index(onDuplicateNames[:], s)
	if i < 0 {
		return 0, errorf(ErrInvalidJob, "on duplicate %q is not one of return, replace, refuse", s)
	}
	return OnDuplicate(i), nil
}

// String is the policy's name, as ParseOnDuplicate reads it.
func (o OnDuplicate) String() string {
	if int(o) < len(onDuplicateNames) {
		return onDuplicateNames[o]
	}
	return fmt.Sprintf("OnDuplicate(%d)", uint8(o))
}

// Added says what Add did with a unique job.
type Added string

// What Add did with a unique job (Job.Added; empty for a job without
// Unique).
const (
	AddedNew       Added = "added"     // no duplicate: the job was added
	AddedDuplicate Added = "duplicate" // a duplicate exists and is returned; nothing was written
	AddedReplaced  Added = "replaced"  // the duplicate was added again with the new data
)

// ErrDuplicate: a unique job has a duplicate and its OnDuplicate is
// DuplicateRefuse. The error is a *DuplicateError.
var ErrDuplicate = errors.New("fdbq: duplicate job")

// DuplicateError is the error of an add refused for a duplicate: it names
// the existing job.
type DuplicateError struct {
	Type, ID string
	State    State
	Outcome  Outcome // set when State is Finished
}

// Error says which job is the duplicate and in which state.
func (e *DuplicateError) Error() string {
	st := string(e.State)
	if e.Outcome != "" {
		st += ", " + string(e.Outcome)
	}
	return fmt.Sprintf("%v: job %s/%s (%s) is already there", ErrDuplicate, e.Type, e.ID, st)
}

// Is makes errors.Is(err, ErrDuplicate) true.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// MaxUniqueFields bounds Unique.Fields.
const MaxUniqueFields = 64

// validate checks u's options.
func (u *Unique) validate() error {
	if u.States&^uniqueAnyState != 0 {
		return errorf(ErrInvalidJob, "unique states 0x%x name unknown states", uint8(u.States))
	}
	if u.Window < 0 {
		return errorf(ErrInvalidJob, "unique window %v is negative", u.Window)
	}
	if u.OnDuplicate > DuplicateRefuse {
		return errorf(ErrInvalidJob, "on duplicate %d is not return, replace or refuse", uint8(u.OnDuplicate))
	}
	if len(u.Fields) > MaxUniqueFields {
		return errorf(ErrInvalidJob, "%d unique fields, more than %d", len(u.Fields), MaxUniqueFields)
	}
	for _, f := range u.Fields {
		if f == "" {
			return errorf(ErrInvalidJob, "a unique field name is empty")
		}
	}
	return nil
}

// states is u.States, or UniqueDefault for none.
func (u *Unique) states() UniqueStates {
	if u.States == 0 {
		return UniqueDefault
	}
	return u.States
}

// counts says whether the existing job old is a duplicate under u at
// now (ms).
func (u *Unique) counts(old *record, now int64) bool {
	st := u.states()
	switch old.State {
	case Pending:
		return st&UniquePending != 0
	case Running:
		return st&UniqueRunning != 0
	}
	var bit UniqueStates
	switch old.Outcome {
	case Succeeded:
		bit = UniqueSucceeded
	case Failed:
		bit = UniqueFailed
	case Canceled:
		bit = UniqueCanceled
	}
	if st&bit == 0 {
		return false
	}
	return u.Window <= 0 || now-old.FinishedAt < u.Window.Milliseconds()
}

// uniqueDigest is the digest of what makes a job of data unique under
// fields (empty: the whole data): SHA-256 of a tuple of the field names
// and their values as canonical JSON (encoding/json's, object members
// sorted), so that equal data of any member order meets the same entry.
func uniqueDigest(data json.RawMessage, fields []string) ([]byte, error) {
	if !comparableText(data) {
		// encoding/json reads both as U+FFFD: distinct data would
		// share a digest.
		return nil, errorf(ErrInvalidJob, "the data of a unique job holds a string that is not valid Unicode (bytes that are not UTF-8, or a \\u escape of a surrogate without its pair), which cannot be compared")
	}
	var v any
	if len(data) > 0 {
		d := json.NewDecoder(bytes.NewReader(data))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return nil, errorf(ErrInvalidJob, "data is not valid JSON: %v", err)
		}
	}
	t := tuple.Tuple{"jobstage.unique.v1"}
	if len(fields) == 0 {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, errorf(ErrInvalidJob, "data: %v", err)
		}
		t = append(t, "", b)
	} else {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, errorf(ErrInvalidJob, "unique fields %q need data that is a JSON object", fields)
		}
		names := slices.Clone(fields)
		slices.Sort(names)
		names = slices.Compact(names)
		for _, n := range names {
			fv, present := obj[n]
			if !present {
				t = append(t, n, nil)
				continue
			}
			b, err := json.Marshal(fv)
			if err != nil {
				return nil, errorf(ErrInvalidJob, "data field %q: %v", n, err)
			}
			t = append(t, n, b)
		}
	}
	p, err := t.Pack()
	if err != nil {
		return nil, errorf(ErrInvalidJob, "unique fields: %v", err)
	}
	sum := sha256.Sum256(p)
	return sum[:], nil
}

// comparableText says whether every string of the JSON text b decodes
// to what it says (jsontext.Problem): encoding/json reads bytes that are
// not UTF-8 and half a surrogate pair as U+FFFD, so distinct data would
// share a digest.
func comparableText(b []byte) bool { return jsontext.Problem(b) == "" }

// addUnique adds the job j, which has Unique, unless a duplicate exists
// (j.digest's entry in the unique index names a job whose record has the
// same digest, in a state that counts): then it does what
// j.Unique.OnDuplicate says. The entry is read with a conflict, so
// concurrent adds of one unique job serialize and one of them adds it.
func (q *Queue) addUnique(tx kv.Tx, j NewJob, s *TypeSettings, marked *zoneMarks, now int64, token string, written map[[2]string]bool) (*Job, error) {
	ukey := q.k.unique(j.Type, j.digest)
	v, err := tx.Get(ukey)
	if err != nil {
		return nil, err
	}
	if id := string(v); v != nil && ValidateLookupID(id) == nil {
		old, err := q.load(tx, j.Type, id)
		if err != nil {
			return nil, err
		}
		if old != nil && bytes.Equal(old.Unique, j.digest) {
			k := [2]string{j.Type, id}
			// An earlier attempt of this call committed (its result was
			// unknown) and wrote the job: answer what it did.
			mine := old.LastAdd == token && !written[k]
			switch {
			case mine && id == j.ID:
				written[k] = true
				return addedAs(old.job(j.Type, id), AddedNew), nil
			case mine:
				written[k] = true
				return addedAs(old.job(j.Type, id), AddedReplaced), nil
			case !j.Unique.counts(old, now):
				// Not a duplicate: the new job takes the entry.
			case j.Unique.OnDuplicate == DuplicateRefuse:
				return nil, &DuplicateError{Type: j.Type, ID: id, State: old.State, Outcome: old.Outcome}
			case j.Unique.OnDuplicate == DuplicateReplace:
				r := j
				r.ID = id
				job, err := q.add(tx, r, s, marked, now, token, written[k])
				if err != nil {
					return nil, err
				}
				written[k] = true
				return addedAs(job, AddedReplaced), nil
			default:
				return addedAs(old.job(j.Type, id), AddedDuplicate), nil
			}
		}
	}
	k := [2]string{j.Type, j.ID}
	job, err := q.add(tx, j, s, marked, now, token, written[k])
	if err != nil {
		return nil, err
	}
	written[k] = true
	tx.Set(ukey, []byte(j.ID))
	return addedAs(job, AddedNew), nil
}

func addedAs(j *Job, a Added) *Job {
	j.Added = a
	return j
}

// releaseUnique clears the unique entry of digest when it names the job
// id: the job is removed, or no longer has that digest.
func (q *Queue) releaseUnique(tx kv.Tx, typ, id string, digest []byte) error {
	if len(digest) == 0 {
		return nil
	}
	key := q.k.unique(typ, digest)
	v, err := tx.Get(key)
	if err != nil {
		return err
	}
	if string(v) == id {
		tx.Clear(key)
	}
	return nil
}
