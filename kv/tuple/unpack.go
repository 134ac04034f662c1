package tuple

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Unpack decodes a packed tuple. Malformed or non-canonical input yields an
// error wrapping ErrMalformed, and integers beyond 64 bits an error wrapping
// ErrIntRange; Unpack never panics. The returned tuple does not alias b.
//
// Incomplete versionstamps are decoded like complete ones, so that keys
// built by PackWithVersionstamp can be inspected (after removing their
// 4-byte offset suffix).
func Unpack(b []byte) (Tuple, error) {
	// Nested tuples are tracked on an explicit stack rather than by
	// recursion, so that hostile input cannot exhaust the goroutine stack.
	type frame struct {
		parent Tuple
		start  int // offset of the 0x05 code, for error messages
	}
	var stack []frame
	cur := Tuple{}
	i := 0
	for i < len(b) {
		code := b[i]
		switch {
		case code == codeNil && len(stack) > 0:
			if i+1 < len(b) && b[i+1] == escape {
				cur = append(cur, nil)
				i += 2
				continue
			}
			// A bare 0x00 ends the innermost nested tuple.
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			cur = append(top.parent, cur)
			i++
		case code == codeNested:
			stack = append(stack, frame{parent: cur, start: i})
			cur = Tuple{}
			i++
		default:
			el, next, err := decodeElement(b, i)
			if err != nil {
				return nil, err
			}
			cur = append(cur, el)
			i = next
		}
	}
	if len(stack) > 0 {
		return nil, malformed(stack[len(stack)-1].start, "nested tuple has no terminator")
	}
	return cur, nil
}

func malformed(offset int, format string, args ...any) error {
	return fmt.Errorf("%w: %s (offset %d)", ErrMalformed, fmt.Sprintf(format, args...), offset)
}

// decodeElement decodes the element at b[i], which is neither a nested tuple
// nor a nested nil, and returns it with the offset just past it.
func decodeElement(b []byte, i int) (Element, int, error) {
	code := b[i]
	switch {
	case code == codeNil:
		return nil, i + 1, nil
	case code == codeBytes:
		s, next, err := decodeEscaped(b, i, "byte string")
		return s, next, err
	case code == codeString:
		s, next, err := decodeEscaped(b, i, "unicode string")
		return string(s), next, err
	case codeNegInt8 <= code && code <= codePosInt8:
		return decodeInt(b, i)
	case code == codeNegBigInt || code == codePosBigInt:
		return nil, 0, decodeBigInt(b, i)
	case code == codeFloat32:
		p, err := fixed(b, i, 4, "float32")
		if err != nil {
			return nil, 0, err
		}
		return float32FromKey(binary.BigEndian.Uint32(p)), i + 5, nil
	case code == codeFloat64:
		p, err := fixed(b, i, 8, "float64")
		if err != nil {
			return nil, 0, err
		}
		return float64FromKey(binary.BigEndian.Uint64(p)), i + 9, nil
	case code == codeFalse:
		return false, i + 1, nil
	case code == codeTrue:
		return true, i + 1, nil
	case code == codeUUID:
		p, err := fixed(b, i, 16, "UUID")
		if err != nil {
			return nil, 0, err
		}
		return UUID(p), i + 17, nil
	case code == codeVersionstamp:
		p, err := fixed(b, i, 12, "versionstamp")
		if err != nil {
			return nil, 0, err
		}
		v := Versionstamp{TransactionVersion: [10]byte(p), UserVersion: binary.BigEndian.Uint16(p[10:])}
		return v, i + 13, nil
	default:
		return nil, 0, malformed(i, "unknown type code 0x%02x", code)
	}
}

// fixed returns the n bytes following the type code at b[i].
func fixed(b []byte, i, n int, what string) ([]byte, error) {
	if len(b)-i-1 < n {
		return nil, malformed(i, "truncated %s: need %d bytes, have %d", what, n, len(b)-i-1)
	}
	return b[i+1 : i+1+n], nil
}

// decodeEscaped decodes the escaped, terminated byte string whose type code
// is at b[i]. A 0x00 followed by 0xff is a data byte; any other 0x00 is the
// terminator, so every byte sequence has at most one reading and the
// encoding is canonical by construction.
func decodeEscaped(b []byte, i int, what string) ([]byte, int, error) {
	out := []byte{}
	for j := i + 1; j < len(b); j++ {
		c := b[j]
		if c != 0x00 {
			out = append(out, c)
			continue
		}
		if j+1 < len(b) && b[j+1] == escape {
			out = append(out, 0x00)
			j++
			continue
		}
		return out, j + 1, nil
	}
	return nil, 0, malformed(i, "%s has no terminator", what)
}

// decodeInt decodes an integer with type code 0x0c to 0x1c at b[i].
func decodeInt(b []byte, i int) (Element, int, error) {
	code := int(b[i])
	n := code - codeIntZero
	neg := n < 0
	if neg {
		n = -n
	}
	p, err := fixed(b, i, n, "integer")
	if err != nil {
		return nil, 0, err
	}
	if n == 0 {
		return int64(0), i + 1, nil
	}
	var v uint64
	for _, c := range p {
		v = v<<8 | uint64(c)
	}
	// A leading zero byte of the magnitude (0xff after one's complement)
	// is one a minimal encoding would have left out.
	if p[0] == zeroByte(neg) {
		return nil, 0, malformed(i, "non-minimal integer encoding")
	}
	if !neg {
		if v <= math.MaxInt64 {
			return int64(v), i + 1 + n, nil
		}
		return v, i + 1 + n, nil
	}
	mask := uint64(math.MaxUint64) >> (64 - 8*n)
	mag := ^v & mask
	if mag > 1<<63 {
		return nil, 0, fmt.Errorf("%w: -%d (offset %d)", ErrIntRange, mag, i)
	}
	// Negating in uint64 and converting is exact down to MinInt64.
	return int64(-mag), i + 1 + n, nil
}

// decodeBigInt validates an arbitrary-precision integer (type code 0x0b or
// 0x1d, a length byte, then that many bytes) and reports it as out of range,
// or as malformed if it is truncated or not in the form other bindings write,
// which uses these codes only for magnitudes longer than 8 bytes.
func decodeBigInt(b []byte, i int) error {
	neg := b[i] == codeNegBigInt
	if i+1 >= len(b) {
		return malformed(i, "truncated big integer length")
	}
	n := int(b[i+1])
	if neg {
		n ^= 0xff
	}
	if len(b)-i-2 < n {
		return malformed(i, "truncated big integer: need %d bytes, have %d", n, len(b)-i-2)
	}
	if n == 8 && allBytes(b[i+2:i+10], ^zeroByte(neg)) {
		// The Python bindings write ±(2^64-1) this way. The negative value
		// is out of range anyway; the positive one is math.MaxUint64, which
		// this package, like the Go and Java bindings, writes as 0x1c ff...
		if neg {
			return fmt.Errorf("%w: -(2^64-1) (offset %d)", ErrIntRange, i)
		}
		return malformed(i, "non-canonical encoding of 2^64-1 (0x1d 0x08 0xff..., as written by the Python bindings; canonical is 0x1c 0xff...)")
	}
	if n <= 8 {
		return malformed(i, "non-minimal integer encoding: %d-byte big integer", n)
	}
	if b[i+2] == zeroByte(neg) {
		return malformed(i, "non-minimal integer encoding")
	}
	sign := ""
	if neg {
		sign = "negative "
	}
	return fmt.Errorf("%w: %s%d-byte integer (offset %d)", ErrIntRange, sign, n, i)
}

// zeroByte is the encoding of a zero byte of an integer's magnitude: 0x00
// for positive integers and, after one's complement, 0xff for negative ones.
func zeroByte(neg bool) byte {
	if neg {
		return 0xff
	}
	return 0x00
}

func allBytes(p []byte, c byte) bool {
	for _, x := range p {
		if x != c {
			return false
		}
	}
	return true
}
