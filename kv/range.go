package kv

import "bytes"

// KeyValue is one key and its value, as returned by range reads.
type KeyValue struct {
	Key   []byte
	Value []byte
}

// Range is the half-open key interval [Begin, End).
type Range struct {
	Begin []byte
	End   []byte
}

// KeyRange returns the range [begin, end).
func KeyRange(begin, end []byte) Range { return Range{Begin: begin, End: end} }

// SingleKeyRange returns the range that holds exactly key: [key, key+"\x00").
func SingleKeyRange(key []byte) Range {
	return Range{Begin: key, End: KeyAfter(key)}
}

// PrefixRange returns the range of every key that starts with prefix. A
// prefix made only of 0xff bytes has no such range: PrefixRange returns
// ErrInvalidPrefix (FoundationDB's strinc fails the same way).
func PrefixRange(prefix []byte) (Range, error) {
	end, err := Strinc(prefix)
	if err != nil {
		return Range{}, err
	}
	return Range{Begin: append([]byte(nil), prefix...), End: end}, nil
}

// Contains reports whether key lies in r.
func (r Range) Contains(key []byte) bool {
	return bytes.Compare(key, r.Begin) >= 0 && bytes.Compare(key, r.End) < 0
}

// Overlaps reports whether r and o share at least one key.
func (r Range) Overlaps(o Range) bool {
	return bytes.Compare(r.Begin, o.End) < 0 && bytes.Compare(o.Begin, r.End) < 0
}

// Empty reports whether r holds no key.
func (r Range) Empty() bool { return bytes.Compare(r.Begin, r.End) >= 0 }

// KeyAfter returns the first key after key in byte order: key + "\x00".
func KeyAfter(key []byte) []byte {
	k := make([]byte, len(key)+1)
	copy(k, key)
	return k
}

// Strinc returns the first key that does not have prefix as a prefix: the
// prefix with trailing 0xff bytes removed and its last byte incremented.
func Strinc(prefix []byte) ([]byte, error) {
	for i := len(prefix) - 1; i >= 0; i-- {
		if prefix[i] != 0xff {
			out := make([]byte, i+1)
			copy(out, prefix[:i+1])
			out[i]++
			return out, nil
		}
	}
	return nil, ErrInvalidPrefix
}
