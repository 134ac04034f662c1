package tuple

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// Element is one tuple element. See the package documentation for the Go
// types Pack accepts and Unpack returns.
type Element = any

// Tuple is an ordered list of elements. A Tuple element nested in a Tuple is
// encoded as a nested tuple.
type Tuple []Element

// UUID is an RFC 4122 UUID in network byte order. It is a plain array so
// that UUIDs of other libraries that use [16]byte, such as
// github.com/google/uuid, convert to it directly.
type UUID [16]byte

// Type codes of the encoded elements.
const (
	codeNil          = 0x00
	codeBytes        = 0x01
	codeString       = 0x02
	codeNested       = 0x05
	codeNegBigInt    = 0x0b
	codeNegInt8      = 0x0c
	codeIntZero      = 0x14
	codePosInt8      = 0x1c
	codePosBigInt    = 0x1d
	codeFloat32      = 0x20
	codeFloat64      = 0x21
	codeFalse        = 0x26
	codeTrue         = 0x27
	codeUUID         = 0x30
	codeVersionstamp = 0x33

	// escape follows a 0x00 byte that is data rather than a terminator,
	// inside byte strings, and follows a nil inside nested tuples.
	escape = 0xff
)

var (
	// ErrMalformed is wrapped by the errors Unpack returns for input that is
	// not a canonical tuple encoding.
	ErrMalformed = errors.New("tuple: malformed encoding")

	// ErrIntRange is wrapped by the errors Unpack returns for a well-formed
	// integer outside [math.MinInt64, math.MaxUint64]. Other FoundationDB
	// bindings can write such integers; this package cannot represent them.
	ErrIntRange = errors.New("tuple: integer out of 64-bit range")

	// ErrUnsupportedType is wrapped by the errors Pack returns for an element
	// whose Go type has no tuple encoding.
	ErrUnsupportedType = errors.New("tuple: unsupported element type")

	// ErrIncompleteVersionstamp is wrapped by the errors returned when a
	// tuple holds the wrong number of incomplete versionstamps for the
	// operation: Pack accepts none and PackWithVersionstamp exactly one.
	ErrIncompleteVersionstamp = errors.New("tuple: wrong number of incomplete versionstamps")
)

// Pack returns the encoding of t. It fails if an element, at any depth, has
// an unsupported type (ErrUnsupportedType) or is an incomplete Versionstamp
// (ErrIncompleteVersionstamp); the error names the element's position.
func (t Tuple) Pack() ([]byte, error) {
	e := encoder{buf: make([]byte, 0, 32), vsPos: -1}
	if err := e.encode(t); err != nil {
		return nil, err
	}
	return e.buf, nil
}

// MustPack is like Pack but panics on error. It is meant for tuples built
// from values whose types are known to be valid, where a failure is a
// programming error.
func (t Tuple) MustPack() []byte {
	b, err := t.Pack()
	if err != nil {
		panic(err)
	}
	return b
}

// PackWithVersionstamp returns prefix followed by the encoding of t and by
// the 4-byte little-endian offset, counted from the start of prefix, of the
// transaction version of the single incomplete Versionstamp in t. The result
// is a key for FoundationDB's SET_VERSIONSTAMPED_KEY mutation, which
// replaces the 10 bytes at that offset with the commit version and strips
// the offset. t must hold exactly one incomplete Versionstamp at any depth.
func (t Tuple) PackWithVersionstamp(prefix []byte) ([]byte, error) {
	if n := t.countIncomplete(); n != 1 {
		return nil, fmt.Errorf("%w: PackWithVersionstamp needs exactly 1, tuple has %d", ErrIncompleteVersionstamp, n)
	}
	e := encoder{buf: make([]byte, 0, len(prefix)+32), vsPos: -1, allowIncomplete: true}
	e.buf = append(e.buf, prefix...)
	if err := e.encode(t); err != nil {
		return nil, err
	}
	if uint64(e.vsPos) > math.MaxUint32 {
		return nil, fmt.Errorf("tuple: versionstamp offset %d does not fit in 32 bits", e.vsPos)
	}
	return binary.LittleEndian.AppendUint32(e.buf, uint32(e.vsPos)), nil
}

// HasIncompleteVersionstamp reports whether t holds an incomplete
// Versionstamp at any depth. It returns an error wrapping
// ErrIncompleteVersionstamp, along with true, if t holds more than one,
// since no operation can encode such a tuple.
func (t Tuple) HasIncompleteVersionstamp() (bool, error) {
	n := t.countIncomplete()
	if n > 1 {
		return true, fmt.Errorf("%w: tuple has %d, at most 1 allowed", ErrIncompleteVersionstamp, n)
	}
	return n == 1, nil
}

func (t Tuple) countIncomplete() int {
	n := 0
	for _, el := range t {
		switch el := el.(type) {
		case Versionstamp:
			if !el.IsComplete() {
				n++
			}
		case Tuple:
			n += el.countIncomplete()
		}
	}
	return n
}

// encoder appends encoded elements to buf.
type encoder struct {
	buf []byte
	// vsPos is the offset in buf of the incomplete versionstamp's
	// transaction version, or -1 if none was written.
	vsPos int
	// allowIncomplete permits incomplete versionstamps, which only
	// PackWithVersionstamp can place in a key meaningfully.
	allowIncomplete bool
}

// encode appends the top-level tuple t.
func (e *encoder) encode(t Tuple) error {
	if path, err := e.appendTuple(t, false); err != nil {
		return fmt.Errorf("%w at element %s", err, formatPath(path))
	}
	return nil
}

// appendTuple appends the elements of t, wrapped in the nested-tuple code and
// terminator if nested. On failure it returns the failing element's index
// path, innermost index last.
func (e *encoder) appendTuple(t Tuple, nested bool) ([]int, error) {
	if nested {
		e.buf = append(e.buf, codeNested)
	}
	for i, el := range t {
		if sub, ok := el.(Tuple); ok {
			if path, err := e.appendTuple(sub, true); err != nil {
				return append([]int{i}, path...), err
			}
			continue
		}
		if el == nil {
			e.buf = append(e.buf, codeNil)
			if nested {
				e.buf = append(e.buf, escape)
			}
			continue
		}
		if err := e.appendScalar(el); err != nil {
			return []int{i}, err
		}
	}
	if nested {
		e.buf = append(e.buf, 0x00)
	}
	return nil, nil
}

// appendScalar appends an element that is neither nil nor a Tuple.
func (e *encoder) appendScalar(el Element) error {
	switch v := el.(type) {
	case []byte:
		e.buf = appendEscaped(append(e.buf, codeBytes), v)
	case string:
		e.buf = appendEscaped(append(e.buf, codeString), v)
	case int:
		e.buf = appendInt(e.buf, int64(v))
	case int8:
		e.buf = appendInt(e.buf, int64(v))
	case int16:
		e.buf = appendInt(e.buf, int64(v))
	case int32:
		e.buf = appendInt(e.buf, int64(v))
	case int64:
		e.buf = appendInt(e.buf, v)
	case uint:
		e.buf = appendUint(e.buf, uint64(v))
	case uint8:
		e.buf = appendUint(e.buf, uint64(v))
	case uint16:
		e.buf = appendUint(e.buf, uint64(v))
	case uint32:
		e.buf = appendUint(e.buf, uint64(v))
	case uint64:
		e.buf = appendUint(e.buf, v)
	case float32:
		e.buf = binary.BigEndian.AppendUint32(append(e.buf, codeFloat32), float32Key(v))
	case float64:
		e.buf = binary.BigEndian.AppendUint64(append(e.buf, codeFloat64), float64Key(v))
	case bool:
		if v {
			e.buf = append(e.buf, codeTrue)
		} else {
			e.buf = append(e.buf, codeFalse)
		}
	case UUID:
		e.buf = append(append(e.buf, codeUUID), v[:]...)
	case Versionstamp:
		if !v.IsComplete() {
			if !e.allowIncomplete {
				return fmt.Errorf("%w: incomplete versionstamp needs PackWithVersionstamp", ErrIncompleteVersionstamp)
			}
			// PackWithVersionstamp has checked there is only one.
			if e.vsPos < 0 {
				e.vsPos = len(e.buf) + 1
			}
		}
		e.buf = append(append(e.buf, codeVersionstamp), v.TransactionVersion[:]...)
		e.buf = binary.BigEndian.AppendUint16(e.buf, v.UserVersion)
	default:
		return fmt.Errorf("%w %T", ErrUnsupportedType, el)
	}
	return nil
}

// formatPath renders an index path such as [2 0] as "2.0".
func formatPath(path []int) string {
	parts := make([]string, len(path))
	for i, p := range path {
		parts[i] = strconv.Itoa(p)
	}
	return strings.Join(parts, ".")
}

// appendEscaped appends s with every 0x00 escaped as 0x00 0xff, then the 0x00
// terminator. The escape keeps the order of the raw bytes: an escaped 0x00
// sorts after the terminator, whatever follows the terminator.
func appendEscaped[S []byte | string](b []byte, s S) []byte {
	for i := 0; i < len(s); i++ {
		b = append(b, s[i])
		if s[i] == 0x00 {
			b = append(b, escape)
		}
	}
	return append(b, 0x00)
}

// byteLen returns the number of bytes needed to hold v, 0 for v == 0.
func byteLen(v uint64) int { return (bits.Len64(v) + 7) / 8 }

// appendBigEndian appends the low n bytes of v, most significant first.
func appendBigEndian(b []byte, v uint64, n int) []byte {
	for i := n - 1; i >= 0; i-- {
		b = append(b, byte(v>>(8*i)))
	}
	return b
}

func appendUint(b []byte, v uint64) []byte {
	n := byteLen(v)
	return appendBigEndian(append(b, byte(codeIntZero+n)), v, n)
}

func appendInt(b []byte, v int64) []byte {
	if v >= 0 {
		return appendUint(b, uint64(v))
	}
	// Negating in uint64 is exact for every int64, including MinInt64.
	mag := -uint64(v)
	n := byteLen(mag)
	// The low n bytes of ^mag are the one's complement of the magnitude.
	return appendBigEndian(append(b, byte(codeIntZero-n)), ^mag, n)
}

// float32Key maps f's bits to an unsigned integer whose order is the IEEE
// total order of f: positive values get their sign bit set, negative values
// are inverted so that larger magnitudes sort first.
func float32Key(f float32) uint32 {
	u := math.Float32bits(f)
	if u&(1<<31) != 0 {
		return ^u
	}
	return u | 1<<31
}

func float32FromKey(k uint32) float32 {
	if k&(1<<31) != 0 {
		return math.Float32frombits(k &^ (1 << 31))
	}
	return math.Float32frombits(^k)
}

// float64Key is float32Key for float64.
func float64Key(f float64) uint64 {
	u := math.Float64bits(f)
	if u&(1<<63) != 0 {
		return ^u
	}
	return u | 1<<63
}

func float64FromKey(k uint64) float64 {
	if k&(1<<63) != 0 {
		return math.Float64frombits(k &^ (1 << 63))
	}
	return math.Float64frombits(^k)
}
