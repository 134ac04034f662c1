package fdbq

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"math"
	"strings"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// ValidateIDPrefix reports what is wrong with a prefix of job ids, as
// ListOptions.IDPrefix takes it, as an ErrInvalidJob that says what and
// at which byte; nil when nothing is. A prefix follows the rules of job
// ids (ValidateID): 1 to MaxIDSize bytes of valid UTF-8 without control
// characters ("" is no prefix, and never validated).
func ValidateIDPrefix(prefix string) error { return validateText("id prefix", prefix, MaxIDSize) }

// listFilter is ListOptions' filters, checked, with the times in the
// store's milliseconds.
type listFilter struct {
	key, idPrefix string
	// since and until bound a job's time t: since <= t < until;
	// math.MinInt64 and math.MaxInt64 when there is no bound.
	since, until int64
}

// listFilterOf checks o's filters (see ListOptions).
func listFilterOf(o ListOptions) (*listFilter, error) {
	f := &listFilter{key: o.Key, idPrefix: o.IDPrefix, since: math.MinInt64, until: math.MaxInt64}
	if f.key != "" {
		if err := ValidateKey(f.key); err != nil {
			return nil, listRefusal("key filter", err)
		}
	}
	if f.idPrefix != "" {
		if err := ValidateIDPrefix(f.idPrefix); err != nil {
			return nil, listRefusal("id prefix filter", err)
		}
	}
	if !o.Since.IsZero() && !o.Until.IsZero() && o.Since.After(o.Until) {
		return nil, errorf(ErrInvalidJob, "list: since %s is after until %s",
			o.Since.Format(time.RFC3339Nano), o.Until.Format(time.RFC3339Nano))
	}
	if !o.Since.IsZero() {
		f.since = ceilMs(o.Since)
	}
	if !o.Until.IsZero() {
		f.until = ceilMs(o.Until)
	}
	return f, nil
}

// listRefusal is err, a refusal of ValidateKey's or ValidateIDPrefix's,
// said of the listing's filter what.
func listRefusal(what string, err error) error {
	var fe *Error
	if errors.As(err, &fe) {
		return errorf(fe.Err, "list: %s: %s", what, fe.Detail)
	}
	return err
}

// ceilMs is the first millisecond of the store's at or after t: a time
// kept in milliseconds, ms, is at or after t when ms >= ceilMs(t), and
// before t when ms < ceilMs(t). Times beyond the int64 milliseconds are
// held at their ends.
func ceilMs(t time.Time) int64 {
	sec := t.Unix()
	switch {
	case sec >= math.MaxInt64/1000:
		return math.MaxInt64
	case sec <= math.MinInt64/1000:
		return math.MinInt64
	}
	ms := sec*1000 + int64(t.Nanosecond()/1e6)
	if t.Nanosecond()%1e6 != 0 {
		ms++
	}
	return ms
}

// set reports whether any filter is set.
func (f *listFilter) set() bool { return f.key != "" || f.idPrefix != "" || f.timed() }

// timed reports whether a time bound is set.
func (f *listFilter) timed() bool { return f.since != math.MinInt64 || f.until != math.MaxInt64 }

// perEntry reports whether a filter is set that the finished index's
// order does not answer (the key or the id prefix).
func (f *listFilter) perEntry() bool { return f.key != "" || f.idPrefix != "" }

// matches reports whether a job of fairness key key whose time is at
// (ms) passes the key and time filters.
func (f *listFilter) matches(key string, at int64) bool {
	return (f.key == "" || key == f.key) && f.timeIn(at)
}

// timeIn reports whether a job whose time is at (ms) passes the time
// filters.
func (f *listFilter) timeIn(at int64) bool { return at >= f.since && at < f.until }

// rangeOf is the part of index sub (a type's index of the given shape,
// root the queue's subspace) that can hold entries f lets through: a
// key's zones of the ready index, a time range of the scheduled index,
// else the whole index.
func (f *listFilter) rangeOf(root tuple.Subspace, typ, shape string, sub tuple.Subspace) kv.Range {
	switch {
	case shape == shapeReady && f.key != "":
		return root.Sub(tagPending, typ, f.key).Range()
	case shape == shapeScheduled:
		return f.timeRange(sub)
	}
	return sub.Range()
}

// timeRange is the part of sub, whose keys begin with a time (ms), that
// f's time bounds let through.
func (f *listFilter) timeRange(sub tuple.Subspace) kv.Range {
	r := sub.Range()
	if f.since != math.MinInt64 {
		r.Begin = sub.MustPack(tuple.Tuple{f.since})
	}
	if f.until != math.MaxInt64 {
		r.End = sub.MustPack(tuple.Tuple{f.until})
	}
	if string(r.Begin) > string(r.End) {
		r.Begin = r.End
	}
	return r
}

// digest names the listing f filters, of type typ's jobs in state s, in
// its cursors: a listing with other filters, or of another type or state,
// refuses them.
func (f *listFilter) digest(typ string, s State) string {
	sum := sha256.Sum256(tuple.Tuple{typ, string(s), f.key, f.idPrefix, f.since, f.until}.MustPack())
	return base64.RawURLEncoding.EncodeToString(sum[:9])
}

// cursor is the cursor of a page that stopped at pos (the position's own
// encoding, in base64url): pos itself when no filter is set, as before
// filters were, else pos, a dot, and the filters' digest.
func (f *listFilter) cursor(pos, typ string, s State) string {
	if !f.set() {
		return pos
	}
	return pos + "." + f.digest(typ, s)
}

// position checks that cursor was made by a listing of typ's jobs in
// state s with f's filters, and returns the position it holds; "" for
// no cursor.
func (f *listFilter) position(cursor, typ string, s State) (string, error) {
	if cursor == "" {
		return "", nil
	}
	pos, digest, filtered := strings.Cut(cursor, ".")
	switch {
	case filtered && !f.set():
		return "", errorf(ErrInvalidJob, "list: the cursor is from a listing with filters (key, id prefix, since, until); pass the same filters with it, or list from the first page (no cursor)")
	case !filtered && f.set():
		return "", errorf(ErrInvalidJob, "list: the cursor is from a listing without filters; pass it without them, or list from the first page (no cursor)")
	case filtered && digest != f.digest(typ, s):
		return "", errorf(ErrInvalidJob, "list: the cursor is from a listing with other filters (key, id prefix, since, until), or of another type or state; pass the filters it was made with, or list from the first page (no cursor)")
	}
	return pos, nil
}
