package kv

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// MutationType is an atomic mutation, numbered as FoundationDB numbers them.
type MutationType int

// Atomic mutations. Operands shorter or longer than param are zero-padded or
// truncated to param's length, as FoundationDB does.
const (
	MutationAdd             MutationType = 2  // little-endian integer addition
	MutationBitAnd          MutationType = 6  // absent key: param
	MutationBitOr           MutationType = 7  //
	MutationBitXor          MutationType = 8  //
	MutationAppendIfFits    MutationType = 9  // append unless the value would exceed MaxValueSize
	MutationMax             MutationType = 12 // little-endian unsigned maximum
	MutationMin             MutationType = 13 // little-endian unsigned minimum; absent key: param
	MutationByteMin         MutationType = 16 // lexicographic minimum; absent key: param
	MutationByteMax         MutationType = 17 // lexicographic maximum
	MutationCompareAndClear MutationType = 20 // clear the key if its value equals param
)

func (m MutationType) String() string {
	switch m {
	case MutationAdd:
		return "add"
	case MutationBitAnd:
		return "bit_and"
	case MutationBitOr:
		return "bit_or"
	case MutationBitXor:
		return "bit_xor"
	case MutationAppendIfFits:
		return "append_if_fits"
	case MutationMax:
		return "max"
	case MutationMin:
		return "min"
	case MutationByteMin:
		return "byte_min"
	case MutationByteMax:
		return "byte_max"
	case MutationCompareAndClear:
		return "compare_and_clear"
	}
	return fmt.Sprintf("mutation(%d)", int(m))
}

// Valid reports whether m is an atomic mutation kv supports.
func (m MutationType) Valid() bool {
	switch m {
	case MutationAdd, MutationBitAnd, MutationBitOr, MutationBitXor, MutationAppendIfFits,
		MutationMax, MutationMin, MutationByteMin, MutationByteMax, MutationCompareAndClear:
		return true
	}
	return false
}

// ApplyMutation computes the value of a key after atomic mutation m with
// param, given its current value (exists false: the key is absent). It
// returns exists false when the mutation clears the key. Backends that
// evaluate atomics themselves use it so every backend agrees with
// FoundationDB's definitions.
func ApplyMutation(m MutationType, current []byte, exists bool, param []byte) (value []byte, stillExists bool) {
	n := len(param)
	fit := func() []byte { // current, zero-padded or truncated to len(param)
		out := make([]byte, n)
		copy(out, current)
		return out
	}
	switch m {
	case MutationAdd:
		out := fit()
		var carry uint16
		for i := 0; i < n; i++ {
			s := uint16(out[i]) + uint16(param[i]) + carry
			out[i] = byte(s)
			carry = s >> 8
		}
		return out, true
	case MutationBitAnd:
		if !exists {
			return clone(param), true
		}
		out := fit()
		for i := range out {
			out[i] &= param[i]
		}
		return out, true
	case MutationBitOr:
		out := fit()
		for i := range out {
			out[i] |= param[i]
		}
		return out, true
	case MutationBitXor:
		out := fit()
		for i := range out {
			out[i] ^= param[i]
		}
		return out, true
	case MutationAppendIfFits:
		if len(current)+n > MaxValueSize {
			return clone(current), exists
		}
		out := make([]byte, 0, len(current)+n)
		return append(append(out, current...), param...), true
	case MutationMax, MutationMin:
		if !exists {
			return clone(param), true
		}
		cur := fit()
		c := compareLittleEndian(cur, param)
		if (m == MutationMax && c >= 0) || (m == MutationMin && c <= 0) {
			return cur, true
		}
		return clone(param), true
	case MutationByteMin, MutationByteMax:
		if !exists {
			return clone(param), true
		}
		c := bytes.Compare(current, param)
		if (m == MutationByteMax && c >= 0) || (m == MutationByteMin && c <= 0) {
			return clone(current), true
		}
		return clone(param), true
	case MutationCompareAndClear:
		if exists && bytes.Equal(current, param) {
			return nil, false
		}
		return clone(current), exists
	}
	return clone(current), exists
}

// compareLittleEndian compares equal-length little-endian unsigned integers.
func compareLittleEndian(a, b []byte) int {
	for i := len(a) - 1; i >= 0; i-- {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// EncodeInt64 returns v as 8 little-endian bytes, the operand format of
// MutationAdd.
func EncodeInt64(v int64) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, uint64(v))
	return b
}

// DecodeInt64 reads a little-endian integer written by atomic adds; a nil
// value (absent key) is 0. Values shorter than 8 bytes are zero-extended.
func DecodeInt64(b []byte) int64 {
	var buf [8]byte
	copy(buf[:], b)
	return int64(binary.LittleEndian.Uint64(buf[:]))
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}
