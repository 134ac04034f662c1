package fdbq

import (
	"unicode"
	"unicode/utf8"
)

// MaxTypeNameSize bounds type names.
const MaxTypeNameSize = 128

// ValidateTypeName reports what is wrong with a job type's name, as an
// ErrInvalidJob that says what and at which byte; nil when nothing is.
//
// A type name is 1 to MaxTypeNameSize bytes of ASCII letters, digits, '_',
// '-' and '.', starting with a letter or a digit. A type name travels
// further than the store: it is a metric label (which must be UTF-8), a
// segment of the HTTP API's paths (no '/', and never the dot segments "."
// and "..", which URLs remove), an argument of the jobstage command (a
// leading '-' would read as a flag) and a segment of configuration
// environment variables (JOBSTAGE_TYPES__SEND_EMAIL__…, where every
// character but a letter or digit becomes '_'). This set is safe in all of
// them without escaping.
func ValidateTypeName(name string) error {
	return validateName(ErrInvalidJob, "type name", name, MaxTypeNameSize)
}

// validateName checks a name of the type names' rules (see
// ValidateTypeName) of at most limit bytes: what names it in the error,
// of sentinel err ("schedule name", ErrInvalidSchedule).
func validateName(sentinel error, what, name string, limit int) error {
	if err := checkSize(sentinel, what, name, limit); err != nil {
		return err
	}
	for i := 0; i < len(name); {
		r, n := utf8.DecodeRuneInString(name[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			return notUTF8(sentinel, what, name, i)
		case i == 0 && !isAlnum(r):
			return errorf(sentinel, "%s %q starts with %q; it must start with a letter or a digit", what, name, r)
		case !isAlnum(r) && r != '_' && r != '-' && r != '.':
			return errorf(sentinel, "%s %q has %q at byte %d; use ASCII letters, digits, '_', '-' and '.'", what, name, r, i)
		}
		i += n
	}
	return nil
}

// ValidateID reports what is wrong with the id of a new job, as an
// ErrInvalidJob that says what and at which byte; nil when nothing is.
//
// A job id is 1 to MaxIDSize bytes of valid UTF-8 with no control
// characters (unicode.IsControl: C0, DEL and C1), and neither "." nor "..".
// The store would keep any bytes, but the id comes back through JSON,
// which turns bytes that are not UTF-8 into U+FFFD, so a job with such an
// id could not be named again; control characters make ids that print
// badly in logs and terminals; and "." and ".." are the dot segments that
// URL paths remove, so the HTTP API's routes (/v1/types/{type}/jobs/{id})
// and the web UI's links could not name such a job as they name others.
//
// Earlier versions let "." and ".." in: a job stored under one is still
// named by every call that looks a job up (ValidateLookupID's rules).
func ValidateID(id string) error {
	if err := validateText("job id", id, MaxIDSize); err != nil {
		return err
	}
	if id == "." || id == ".." {
		return errorf(ErrInvalidJob, "job id %q is a dot segment, which URL paths remove; a job cannot be named so", id)
	}
	return nil
}

// ValidateLookupID reports what is wrong with an id that names a job that
// may exist: ValidateID's rules but the ones added after jobs were stored
// under ids they refuse ("." and ".."), so that such jobs can still be
// read, waited for, changed and removed.
func ValidateLookupID(id string) error { return validateText("job id", id, MaxIDSize) }

// validateText checks that s is 1 to limit bytes of valid UTF-8 without
// control characters; what names s in the error.
func validateText(what, s string, limit int) error {
	if err := checkSize(ErrInvalidJob, what, s, limit); err != nil {
		return err
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			return notUTF8(ErrInvalidJob, what, s, i)
		case unicode.IsControl(r):
			return errorf(ErrInvalidJob, "%s %q has a control character at byte %d", what, s, i)
		}
		i += n
	}
	return nil
}

// MaxKeySize bounds fairness keys (Job.Key).
const MaxKeySize = 128

// ValidateKey reports what is wrong with a fairness key: one is 1 to
// MaxKeySize bytes of valid UTF-8 without control characters, as a job id
// is ("" is no key, and never validated).
func ValidateKey(key string) error { return validateText("fairness key", key, MaxKeySize) }

// checkName checks a name a caller gave for a new job: what is "type
// name" or "job id", which is also how the error names it.
func checkName(what, s string) error {
	if what == "type name" {
		return ValidateTypeName(s)
	}
	return ValidateID(s)
}

func checkSize(sentinel error, what, s string, limit int) error {
	if s == "" {
		return errorf(sentinel, "empty %s", what)
	}
	if len(s) > limit {
		return errorf(sentinel, "%s of %d bytes is longer than %d", what, len(s), limit)
	}
	return nil
}

func notUTF8(sentinel error, what, s string, at int) error {
	return errorf(sentinel, "%s %q is not valid UTF-8 at byte %d", what, s, at)
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}
