package tuple

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

// tupleBuilder turns fuzz input into a tuple, consuming it byte by byte.
// Exhausted input reads as zeros, which build empty tuples, so every input
// yields a finite tuple.
type tupleBuilder struct {
	in []byte
}

func (b *tupleBuilder) byte() byte {
	if len(b.in) == 0 {
		return 0
	}
	c := b.in[0]
	b.in = b.in[1:]
	return c
}

// bytes returns the next n bytes, zero-padded.
func (b *tupleBuilder) bytes(n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b.byte()
	}
	return out
}

// uint returns an integer of n bytes, big-endian.
func (b *tupleBuilder) uint(n int) uint64 {
	var v uint64
	for range n {
		v = v<<8 | uint64(b.byte())
	}
	return v
}

// alphabet favours the bytes that matter to escaping and ordering.
var alphabet = []byte{0x00, 0x00, 0x01, 0xff, 0xfe, 'a', 'b', 0x80, 0xc3, 0x94}

// intEdges are integers at encoding-length and type boundaries.
var intEdges = []Element{
	int64(math.MinInt64), int64(math.MinInt64 + 1), int64(-1 << 56), int64(-1<<56 - 1),
	int64(-65536), int64(-65535), int64(-257), int64(-256), int64(-255), int64(-1),
	0, 1, 255, 256, 65535, 65536, int64(1<<56 - 1), int64(1 << 56),
	int64(math.MaxInt64), uint64(math.MaxInt64 + 1), uint64(math.MaxUint64),
	int8(math.MinInt8), uint8(math.MaxUint8), int16(math.MinInt16), uint16(math.MaxUint16),
	int32(math.MinInt32), uint32(math.MaxUint32), uint(7),
}

var floatEdges = []float64{
	0, math.Copysign(0, -1), 1, -1, math.Inf(1), math.Inf(-1), math.NaN(),
	math.Float64frombits(0xfff8000000000000), math.SmallestNonzeroFloat64, math.MaxFloat64,
}

func (b *tupleBuilder) tuple(depth int) Tuple {
	n := int(b.byte() % 5)
	t := make(Tuple, 0, n)
	for range n {
		t = append(t, b.element(depth))
	}
	return t
}

func (b *tupleBuilder) element(depth int) Element {
	switch b.byte() % 16 {
	case 0:
		return nil
	case 1:
		return b.bytes(int(b.byte() % 8))
	case 2:
		return string(b.bytes(int(b.byte() % 8)))
	case 3:
		s := make([]byte, b.byte()%6)
		for i := range s {
			s[i] = alphabet[int(b.byte())%len(alphabet)]
		}
		if b.byte()%2 == 0 {
			return s
		}
		return string(s)
	case 4:
		if depth >= 4 {
			return Tuple{}
		}
		return b.tuple(depth + 1)
	case 5:
		// A signed integer of 0 to 8 bytes, either sign.
		v := int64(b.uint(int(b.byte() % 9)))
		if b.byte()%2 == 0 {
			v = -v
		}
		return v
	case 6:
		return b.uint(int(b.byte() % 9))
	case 7:
		return intEdges[int(b.byte())%len(intEdges)]
	case 8:
		// Narrow Go integer types.
		switch v := b.uint(8); b.byte() % 8 {
		case 0:
			return int8(v)
		case 1:
			return int16(v)
		case 2:
			return int32(v)
		case 3:
			return int(v)
		case 4:
			return uint8(v)
		case 5:
			return uint16(v)
		case 6:
			return uint32(v)
		default:
			return uint(v)
		}
	case 9:
		return math.Float32frombits(uint32(b.uint(4)))
	case 10:
		return math.Float64frombits(b.uint(8))
	case 11:
		f := floatEdges[int(b.byte())%len(floatEdges)]
		if b.byte()%2 == 0 {
			return float32(f)
		}
		return f
	case 12:
		return b.byte()%2 == 0
	case 13:
		return UUID(b.bytes(16))
	case 14:
		v := Versionstamp{TransactionVersion: [10]byte(b.bytes(10)), UserVersion: uint16(b.uint(2))}
		if !v.IsComplete() {
			v.TransactionVersion[0] = 0xfe
		}
		return v
	default:
		// Short values from a tiny range, so that two tuples often share
		// a prefix and differ further in.
		switch b.byte() % 4 {
		case 0:
			return int64(b.byte()%3) - 1
		case 1:
			return string(alphabet[int(b.byte())%3:][:1])
		case 2:
			return Tuple{int64(b.byte() % 2)}
		default:
			return b.byte()%2 == 0
		}
	}
}

func buildTuple(in []byte) Tuple {
	b := tupleBuilder{in: in}
	return b.tuple(0)
}

// buildLongTuple keeps adding elements until the input is consumed, so that
// long inputs give long tuples.
func buildLongTuple(in []byte) Tuple {
	b := tupleBuilder{in: in}
	t := Tuple{}
	for len(b.in) > 0 {
		t = append(t, b.element(0))
	}
	return t
}

func FuzzRoundTrip(f *testing.F) {
	for _, seed := range []string{
		"",
		"\x01\x01",
		"\x04\x00\x01\x03foo\x02\x02hi\x05\x03\xff\xff\xff\x06\x08\xff\xff\xff\xff\xff\xff\xff\xff",
		"\x04\x04\x02\x00\x03\x03\x00\x05\x01\x07\x07\x07\x14",
		"\x03\x09\x7f\xc0\x00\x00\x0a\xff\xf8\x00\x00\x00\x00\x00\x00\x0b\x05\x00",
		"\x04\x0d0123456789abcdef\x0e\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00\x07\x0c\x01\x08\x80\x00\x00\x00\x00\x00\x00\x01\x02",
		strings.Repeat("\x04\x04", 10),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, tup := range []Tuple{buildTuple(in), buildLongTuple(in)} {
			packed, err := tup.Pack()
			if err != nil {
				t.Fatalf("Pack(%#v): %v", tup, err)
			}
			dec, err := Unpack(packed)
			if err != nil {
				t.Fatalf("Unpack(Pack(%#v)) = %x: %v", tup, packed, err)
			}
			if want := normalize(tup); !identical(dec, want) {
				t.Fatalf("Unpack(Pack(t)) = %#v, want %#v", dec, want)
			}
			if Compare(dec, tup) != 0 {
				t.Fatalf("Compare(Unpack(Pack(t)), t) != 0 for %#v", tup)
			}
			if again := dec.MustPack(); !bytes.Equal(again, packed) {
				t.Fatalf("Pack(Unpack(%x)) = %x", packed, again)
			}
		}
	})
}

func sign(c int) int {
	switch {
	case c < 0:
		return -1
	case c > 0:
		return 1
	}
	return 0
}

func FuzzOrder(f *testing.F) {
	f.Add([]byte{}, []byte{}, []byte{})
	f.Add([]byte("\x01\x0f\x00\x00"), []byte("\x01\x0f\x00\x01"), []byte("\x01\x0f\x00\x02"))
	f.Add([]byte("\x01\x03\x02\x00a"), []byte("\x01\x03\x02\x00\x00"), []byte("\x02\x03\x02\x00a\x00"))
	f.Add([]byte("\x01\x04\x01\x0f\x02\x00"), []byte("\x01\x04\x00"), []byte("\x01\x04\x02\x00\x00"))
	f.Add([]byte{}, []byte("\x01\x05\x01\x01\x00"), []byte("\x01\x05\x01\x01\x01"))
	f.Add([]byte{}, []byte("\x01\x0b\x00\x01"), []byte("\x01\x0b\x01\x01"))
	f.Add([]byte{}, []byte("\x01\x07\x00"), []byte("\x01\x06\x08\xff\xff\xff\xff\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, common, x, y []byte) {
		prefix := buildTuple(common)
		a := append(append(Tuple{}, prefix...), buildTuple(x)...)
		b := append(append(Tuple{}, prefix...), buildTuple(y)...)
		pa, pb := a.MustPack(), b.MustPack()
		c := Compare(a, b)
		if got := bytes.Compare(pa, pb); sign(c) != got {
			t.Fatalf("Compare(%#v, %#v) = %d but packed order is %d:\n%x\n%x", a, b, c, got, pa, pb)
		}
		if r := Compare(b, a); r != -c {
			t.Fatalf("Compare is not antisymmetric: %d and %d", c, r)
		}
		// A tuple's range holds exactly the tuples it is a proper prefix of.
		for _, pair := range [][2]Tuple{{a, b}, {b, a}} {
			short, long := pair[0], pair[1]
			r, err := Subspace{}.RangeOf(short)
			if err != nil {
				t.Fatal(err)
			}
			isPrefix := len(short) < len(long) && Compare(short, long[:len(short)]) == 0
			if in := r.Contains(long.MustPack()); in != isPrefix {
				t.Fatalf("RangeOf(%#v).Contains(Pack(%#v)) = %v, want %v", short, long, in, isPrefix)
			}
		}
	})
}

func FuzzUnpack(f *testing.F) {
	for _, v := range goldenVectors {
		f.Add(h(v.hex))
	}
	for _, v := range malformedInputs {
		if len(v.hex) < 200 {
			f.Add(h(v.hex))
		}
	}
	f.Add(h("1d 09 010000000000000000"))
	f.Add(h("0b f6 feffffffffffffffff"))
	f.Add(h("1d 08 ffffffffffffffff"))
	f.Add(h("33 ffffffffffffffffffff 0001 33 ffffffffffffffffffff 0002"))
	f.Add(h("05 05 00ff 00 00ff 0500 00 14"))
	f.Fuzz(func(t *testing.T, in []byte) {
		tup, err := Unpack(in)
		if err != nil {
			if tup != nil {
				t.Fatalf("Unpack(%x) returned %#v with error %v", in, tup, err)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrIntRange) {
				t.Fatalf("Unpack(%x): unexpected error %v", in, err)
			}
			return
		}
		// Accepted input is canonical: re-encoding reproduces it.
		if again := repack(t, tup); !bytes.Equal(again, in) {
			t.Fatalf("Unpack(%x) = %#v, which packs to %x", in, tup, again)
		}
		if has, err := tup.HasIncompleteVersionstamp(); err == nil && !has {
			if again := tup.MustPack(); !bytes.Equal(again, in) {
				t.Fatalf("Pack(Unpack(%x)) = %x", in, again)
			}
		}
		if Compare(tup, tup) != 0 {
			t.Fatalf("Compare(%#v, itself) != 0", tup)
		}
	})
}
