package tuple

import (
	"bytes"
	"encoding/hex"
	"math"
	"strings"
	"testing"
)

// h decodes a hex string, ignoring spaces, for writing expected encodings
// in the byte grouping of their sources.
func h(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

// normalize returns the tuple Unpack is expected to produce for t: every
// integer as int64 when it fits and uint64 otherwise, and byte strings
// non-nil.
func normalize(t Tuple) Tuple {
	out := make(Tuple, len(t))
	for i, el := range t {
		switch v := el.(type) {
		case Tuple:
			out[i] = normalize(v)
		case []byte:
			out[i] = append([]byte{}, v...)
		case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
			_, iv := classify(v)
			switch {
			case iv.neg:
				out[i] = int64(-iv.mag)
			case iv.mag <= math.MaxInt64:
				out[i] = int64(iv.mag)
			default:
				out[i] = iv.mag
			}
		default:
			out[i] = el
		}
	}
	return out
}

// identical reports whether a and b hold the same elements with the same Go
// types, comparing floats by bits so that NaNs and signed zeros count.
func identical(a, b Tuple) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i := range a {
		switch x := a[i].(type) {
		case Tuple:
			y, ok := b[i].(Tuple)
			if !ok || !identical(x, y) {
				return false
			}
		case []byte:
			y, ok := b[i].([]byte)
			if !ok || y == nil || !bytes.Equal(x, y) {
				return false
			}
		case float32:
			y, ok := b[i].(float32)
			if !ok || math.Float32bits(x) != math.Float32bits(y) {
				return false
			}
		case float64:
			y, ok := b[i].(float64)
			if !ok || math.Float64bits(x) != math.Float64bits(y) {
				return false
			}
		default:
			if a[i] != b[i] {
				return false
			}
		}
	}
	return true
}

// repack re-encodes a decoded tuple, allowing any number of incomplete
// versionstamps, which Unpack accepts but Pack refuses.
func repack(t testing.TB, tup Tuple) []byte {
	t.Helper()
	e := encoder{vsPos: -1, allowIncomplete: true}
	if path, err := e.appendTuple(tup, false); err != nil {
		t.Fatalf("repack %#v: %v at %v", tup, err, path)
	}
	return e.buf
}
