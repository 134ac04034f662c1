package tuple

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// malformedInputs must all be rejected with ErrMalformed. The first group is
// malformedSequences of TuplePackingTest.java in the official Java bindings,
// without its invalid UTF-8 strings (see TestInvalidUTF8Accepted).
var malformedInputs = []struct {
	name string
	hex  string
}{
	{"java bytes unterminated", "01 deadc0de"},
	{"java bytes escaped nul unterminated", "01 dead 00ff c0de"},
	{"java string unterminated", "02 68656c6c6f"},
	{"java string escaped nul unterminated", "02 68656c 00ff 6c6f"},
	{"java nested unterminated", "05 0268656c6c6f00"},
	{"java nested nil unterminated", "05 0268656c6c6f00 00ff 02746865726500"},
	{"java int truncated positive", "16 01"},
	{"java int truncated negative", "12 01"},
	{"java big int truncated positive", "1d 09 0102030405060708"},
	{"java big int truncated negative", "0b f6 0102030405060708"},
	{"java float32 truncated", "20 010203"},
	{"java float64 truncated", "21 01020304050607"},
	{"java uuid truncated", "30 0102030405060708090a0b0c0d0e"},
	{"java versionstamp truncated", "33 0102030405060708090a0b"},
	{"java unknown code ff", "ff"},

	{"bytes code only", "01"},
	{"string code only", "02"},
	{"bytes ending in escape", "01 61 00ff"},
	{"nested code only", "05"},
	{"nested nil at end", "05 00ff"},
	{"nested bytes unterminated", "05 01 61"},
	{"deeply nested unterminated", strings.Repeat("05", 10000)},
	{"deeply nested one short", strings.Repeat("05", 100) + strings.Repeat("00", 99)},
	{"int8 code only", "1c"},
	{"negative int8 code only", "0c"},
	{"int8 truncated", "1c 01020304050607"},
	{"negative int truncated", "0c 80"},
	{"float32 code only", "20"},
	{"float64 code only", "21"},
	{"uuid code only", "30"},
	{"versionstamp code only", "33"},
	{"valid then truncated", "14 15 01 16 01"},

	{"top-level escape after nil", "00 ff"},
	{"escape after bytes", "01 61 00 ff"},
	{"garbage inside nested", "05 15 01 ff 00"},
	{"unknown code inside nested", "05 01 61 00 07 00"},
	{"escape after nested tuple", "05 00ff 00 ff"},

	{"unknown code 03 (deprecated nested)", "03 04"},
	{"unknown code 04", "04"},
	{"unknown code 06", "06"},
	{"unknown code 0a (reserved big int)", "0a 00"},
	{"unknown code 1e (reserved big int)", "1e 00"},
	{"unknown code 22 (long double)", "22 00000000000000000000"},
	{"unknown code 23 (decimal)", "23 00"},
	{"unknown code 25 (deprecated true)", "25"},
	{"unknown code 28", "28"},
	{"unknown code 31 (64-bit id)", "31 0000000000000000"},
	{"unknown code 32 (80-bit versionstamp)", "32 00000000000000000000"},
	{"unknown code 34 (length-prefixed bytes)", "34 01 61"},
	{"unknown code 40 (user type)", "40"},
	{"unknown code f0 (end of tuple)", "f0"},

	{"non-minimal zero", "15 00"},
	{"non-minimal 1", "16 0001"},
	{"non-minimal MaxInt64", "1c 00 7fffffffffffff"},
	{"non-minimal negative zero", "13 ff"},
	{"non-minimal -1", "12 fffe"},
	{"non-minimal negative 8 bytes", "0c ff 00000000000000"},
	{"big int zero length", "1d 00"},
	{"big int length only", "1d"},
	{"big int short length", "1d 08 0102030405060708"},
	{"big int leading zero", "1d 09 00ffffffffffffffff"},
	{"negative big int length only", "0b"},
	{"negative big int zero length", "0b ff"},
	{"negative big int leading ff", "0b f6 ff0000000000000000"},
}

func TestMalformed(t *testing.T) {
	for _, tc := range malformedInputs {
		t.Run(tc.name, func(t *testing.T) {
			in := h(tc.hex)
			tup, err := Unpack(in)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Unpack(%x) = %#v, %v; want ErrMalformed", in, tup, err)
			}
			if tup != nil {
				t.Fatalf("Unpack returned %#v with error", tup)
			}
			if !strings.HasPrefix(err.Error(), "tuple: malformed encoding: ") || !strings.Contains(err.Error(), "offset") {
				t.Fatalf("error %q does not describe the problem and its offset", err)
			}
		})
	}
}

// TestInvalidUTF8Accepted documents that, like the official Go bindings and
// unlike the Java and Python ones, strings are not checked for UTF-8.
func TestInvalidUTF8Accepted(t *testing.T) {
	for _, in := range []string{
		"02 757466 08 80 00",
		"02 757466 10 eda0bd 00",
		"02 757466 10 eda0bd edb4a5 00",
	} {
		b := h(in)
		tup, err := Unpack(b)
		if err != nil {
			t.Fatalf("Unpack(%s): %v", in, err)
		}
		if got := tup.MustPack(); !bytes.Equal(got, b) {
			t.Fatalf("repacked %s as %x", in, got)
		}
	}
}

func TestDeepNesting(t *testing.T) {
	const depth = 100000
	in := append(bytes.Repeat([]byte{codeNested}, depth), bytes.Repeat([]byte{0x00}, depth)...)
	tup, err := Unpack(in)
	if err != nil {
		t.Fatal(err)
	}
	if got := tup.MustPack(); !bytes.Equal(got, in) {
		t.Fatal("deeply nested tuple did not round-trip")
	}
}
