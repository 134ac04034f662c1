package tuple

import (
	"bytes"
	"cmp"
	"fmt"
	"strings"
)

// Compare returns -1, 0 or +1 as a sorts before, equal to or after b in tuple
// order, which is the order of their encodings: Compare(a, b) has the sign of
// bytes.Compare(a.MustPack(), b.MustPack()). It compares elements pairwise,
// ordering different types by type code and a proper prefix first. Integers
// compare by value whatever their Go type; floats compare in IEEE total order
// (-NaN < -Inf < ... < -0 < +0 < ... < +Inf < +NaN), in which NaNs are
// equal only if their bits are; all float32 values sort before all float64
// values.
//
// Compare works on values rather than encodings and allocates nothing.
// Incomplete versionstamps compare like complete ones. Compare panics if an
// element has a type Pack does not accept.
func Compare(a, b Tuple) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := compareElements(a[i], b[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}

// intValue is an integer of any supported Go type as sign and magnitude.
type intValue struct {
	neg bool
	mag uint64
}

func (x intValue) compare(y intValue) int {
	switch {
	case x.neg != y.neg:
		if x.neg {
			return -1
		}
		return 1
	case x.neg:
		return cmp.Compare(y.mag, x.mag)
	default:
		return cmp.Compare(x.mag, y.mag)
	}
}

func signed(v int64) intValue {
	if v < 0 {
		return intValue{neg: true, mag: -uint64(v)}
	}
	return intValue{mag: uint64(v)}
}

// classify returns the element's sort class, which is its type code except
// that all integers share codeIntZero, and the integer value for integers.
func classify(el Element) (byte, intValue) {
	switch v := el.(type) {
	case nil:
		return codeNil, intValue{}
	case []byte:
		return codeBytes, intValue{}
	case string:
		return codeString, intValue{}
	case Tuple:
		return codeNested, intValue{}
	case int:
		return codeIntZero, signed(int64(v))
	case int8:
		return codeIntZero, signed(int64(v))
	case int16:
		return codeIntZero, signed(int64(v))
	case int32:
		return codeIntZero, signed(int64(v))
	case int64:
		return codeIntZero, signed(v)
	case uint:
		return codeIntZero, intValue{mag: uint64(v)}
	case uint8:
		return codeIntZero, intValue{mag: uint64(v)}
	case uint16:
		return codeIntZero, intValue{mag: uint64(v)}
	case uint32:
		return codeIntZero, intValue{mag: uint64(v)}
	case uint64:
		return codeIntZero, intValue{mag: v}
	case float32:
		return codeFloat32, intValue{}
	case float64:
		return codeFloat64, intValue{}
	case bool:
		if v {
			return codeTrue, intValue{}
		}
		return codeFalse, intValue{}
	case UUID:
		return codeUUID, intValue{}
	case Versionstamp:
		return codeVersionstamp, intValue{}
	default:
		panic(fmt.Sprintf("tuple.Compare: unsupported element type %T", el))
	}
}

func compareElements(x, y Element) int {
	cx, ix := classify(x)
	cy, iy := classify(y)
	if cx != cy {
		return cmp.Compare(cx, cy)
	}
	switch cx {
	case codeBytes:
		return bytes.Compare(x.([]byte), y.([]byte))
	case codeString:
		// Go compares strings bytewise, which is the order of their UTF-8
		// encodings and hence of the packed bytes.
		return strings.Compare(x.(string), y.(string))
	case codeNested:
		return Compare(x.(Tuple), y.(Tuple))
	case codeIntZero:
		return ix.compare(iy)
	case codeFloat32:
		return cmp.Compare(float32Key(x.(float32)), float32Key(y.(float32)))
	case codeFloat64:
		return cmp.Compare(float64Key(x.(float64)), float64Key(y.(float64)))
	case codeUUID:
		ux, uy := x.(UUID), y.(UUID)
		return bytes.Compare(ux[:], uy[:])
	case codeVersionstamp:
		vx, vy := x.(Versionstamp), y.(Versionstamp)
		if c := bytes.Compare(vx.TransactionVersion[:], vy.TransactionVersion[:]); c != 0 {
			return c
		}
		return cmp.Compare(vx.UserVersion, vy.UserVersion)
	default:
		// nil, false and true: the class determines the value.
		return 0
	}
}
