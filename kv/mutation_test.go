package kv_test

import (
	"bytes"
	"testing"

	"github.com/jobstage/jobstage/kv"
)

func TestApplyMutation(t *testing.T) {
	le := kv.EncodeInt64
	tests := []struct {
		name    string
		op      kv.MutationType
		cur     []byte
		exists  bool
		param   []byte
		want    []byte
		wantSet bool
	}{
		{"add absent", kv.MutationAdd, nil, false, le(5), le(5), true},
		{"add", kv.MutationAdd, le(40), true, le(2), le(42), true},
		{"add negative", kv.MutationAdd, le(40), true, le(-50), le(-10), true},
		{"add carries across bytes", kv.MutationAdd, []byte{0xff, 0x00}, true, []byte{0x01, 0x00}, []byte{0x00, 0x01}, true},
		{"add overflow wraps", kv.MutationAdd, []byte{0xff}, true, []byte{0x01}, []byte{0x00}, true},
		{"add short current is zero-extended", kv.MutationAdd, []byte{0x01}, true, le(1), le(2), true},
		{"add long current is truncated", kv.MutationAdd, []byte{1, 0, 0, 9}, true, []byte{1, 0}, []byte{2, 0}, true},
		{"bit_and absent takes param", kv.MutationBitAnd, nil, false, []byte{0x0f}, []byte{0x0f}, true},
		{"bit_and", kv.MutationBitAnd, []byte{0x3c}, true, []byte{0x0f}, []byte{0x0c}, true},
		{"bit_or", kv.MutationBitOr, []byte{0x30}, true, []byte{0x0f}, []byte{0x3f}, true},
		{"bit_xor", kv.MutationBitXor, []byte{0xff}, true, []byte{0x0f}, []byte{0xf0}, true},
		{"max keeps larger", kv.MutationMax, le(9), true, le(3), le(9), true},
		{"max takes larger", kv.MutationMax, le(3), true, le(9), le(9), true},
		{"max compares little-endian", kv.MutationMax, []byte{0xff, 0x00}, true, []byte{0x00, 0x01}, []byte{0x00, 0x01}, true},
		{"min absent takes param", kv.MutationMin, nil, false, le(7), le(7), true},
		{"min", kv.MutationMin, le(3), true, le(9), le(3), true},
		{"byte_min", kv.MutationByteMin, []byte("b"), true, []byte("ab"), []byte("ab"), true},
		{"byte_max", kv.MutationByteMax, []byte("b"), true, []byte("ab"), []byte("b"), true},
		{"byte_max absent", kv.MutationByteMax, nil, false, []byte("x"), []byte("x"), true},
		{"append", kv.MutationAppendIfFits, []byte("ab"), true, []byte("cd"), []byte("abcd"), true},
		{"append over the limit leaves it", kv.MutationAppendIfFits, make([]byte, kv.MaxValueSize), true, []byte("x"), make([]byte, kv.MaxValueSize), true},
		{"compare_and_clear equal", kv.MutationCompareAndClear, []byte("v"), true, []byte("v"), nil, false},
		{"compare_and_clear differs", kv.MutationCompareAndClear, []byte("v"), true, []byte("w"), []byte("v"), true},
		{"compare_and_clear absent", kv.MutationCompareAndClear, nil, false, []byte("v"), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, set := kv.ApplyMutation(tt.op, tt.cur, tt.exists, tt.param)
			if set != tt.wantSet || !bytes.Equal(got, tt.want) {
				t.Fatalf("ApplyMutation(%v, %x, %v, %x) = %x, %v; want %x, %v", tt.op, tt.cur, tt.exists, tt.param, got, set, tt.want, tt.wantSet)
			}
		})
	}
}

func TestMutationNames(t *testing.T) {
	for _, m := range []kv.MutationType{kv.MutationAdd, kv.MutationBitAnd, kv.MutationBitOr, kv.MutationBitXor,
		kv.MutationAppendIfFits, kv.MutationMax, kv.MutationMin, kv.MutationByteMin, kv.MutationByteMax, kv.MutationCompareAndClear} {
		if !m.Valid() {
			t.Errorf("%v not valid", m)
		}
	}
	if kv.MutationType(99).Valid() {
		t.Error("mutation 99 valid")
	}
	if got := kv.MutationType(99).String(); got != "mutation(99)" {
		t.Errorf("String = %q", got)
	}
}
