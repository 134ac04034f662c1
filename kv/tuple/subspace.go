package tuple

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/jobstage/jobstage/kv"
)

// ErrNotInSubspace is wrapped by the error Subspace.Unpack returns for a key
// that does not start with the subspace's prefix.
var ErrNotInSubspace = errors.New("tuple: key not in subspace")

// Subspace is a key prefix under which tuples are packed, typically a packed
// tuple naming an application area such as ("jobs", "queue"). The zero value
// is the subspace with an empty prefix, which holds every key. Subspaces are
// immutable values and safe for concurrent use.
type Subspace struct {
	prefix []byte
}

// Sub returns the subspace whose prefix is the packed tuple of elems. It
// panics if Pack would reject the tuple, a programming error since subspace
// names are normally constants; to handle such an error, use Tuple.Pack and
// FromBytes instead.
func Sub(elems ...Element) Subspace {
	return Subspace{}.Sub(elems...)
}

// FromBytes returns the subspace with the given raw prefix, which need not be
// a packed tuple. The prefix is copied.
func FromBytes(prefix []byte) Subspace {
	return Subspace{prefix: bytes.Clone(prefix)}
}

// Sub returns the subspace nested in s whose prefix is s's prefix followed by
// the packed tuple of elems. It panics in the same cases as the function Sub.
func (s Subspace) Sub(elems ...Element) Subspace {
	return Subspace{prefix: s.MustPack(Tuple(elems))}
}

// Bytes returns a copy of the prefix of s.
func (s Subspace) Bytes() []byte {
	return bytes.Clone(s.prefix)
}

// Pack returns the key for t in s: the prefix followed by the packed tuple.
// It fails in the same cases as Tuple.Pack.
func (s Subspace) Pack(t Tuple) ([]byte, error) {
	e := encoder{buf: make([]byte, 0, len(s.prefix)+32), vsPos: -1}
	e.buf = append(e.buf, s.prefix...)
	if err := e.encode(t); err != nil {
		return nil, err
	}
	return e.buf, nil
}

// MustPack is like Pack but panics on error, which is meant to signal a
// programming error as in Tuple.MustPack.
func (s Subspace) MustPack(t Tuple) []byte {
	k, err := s.Pack(t)
	if err != nil {
		panic(err)
	}
	return k
}

// PackWithVersionstamp is Tuple.PackWithVersionstamp with s's prefix: the
// appended offset counts from the start of the prefix, as the
// SET_VERSIONSTAMPED_KEY mutation expects.
func (s Subspace) PackWithVersionstamp(t Tuple) ([]byte, error) {
	return t.PackWithVersionstamp(s.prefix)
}

// Unpack decodes the tuple that follows s's prefix in key. It fails if key
// does not start with the prefix, or as Unpack does if the rest of the key is
// not a valid packed tuple. The prefix itself unpacks to the empty tuple.
func (s Subspace) Unpack(key []byte) (Tuple, error) {
	if !s.Contains(key) {
		return nil, fmt.Errorf("%w: key %q, prefix %q", ErrNotInSubspace, key, s.prefix)
	}
	return Unpack(key[len(s.prefix):])
}

// Contains reports whether key starts with s's prefix. Note that this holds
// for the prefix itself, which Range excludes.
func (s Subspace) Contains(key []byte) bool {
	return bytes.HasPrefix(key, s.prefix)
}

// Range returns the keys strictly inside s, [prefix+0x00, prefix+0xff): every
// key of the form prefix+packed tuple for a non-empty tuple, but not the
// prefix itself. This is the range the official bindings use for a
// subspace. Keys that continue the prefix with a 0xff byte lie outside it,
// but no packed tuple starts with 0xff.
func (s Subspace) Range() kv.Range {
	return kv.Range{Begin: withSuffix(s.prefix, 0x00), End: withSuffix(s.prefix, 0xff)}
}

// RangeOf returns the keys in s of the tuples that extend t by at least one
// element: [p+0x00, p+0xff) where p is s.Pack(t). It fails in the same cases
// as Pack.
func (s Subspace) RangeOf(t Tuple) (kv.Range, error) {
	p, err := s.Pack(t)
	if err != nil {
		return kv.Range{}, err
	}
	return kv.Range{Begin: withSuffix(p, 0x00), End: withSuffix(p, 0xff)}, nil
}

// withSuffix returns a new slice holding b followed by c.
func withSuffix(b []byte, c byte) []byte {
	out := make([]byte, len(b)+1)
	copy(out, b)
	out[len(b)] = c
	return out
}
