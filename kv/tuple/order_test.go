package tuple

import (
	"bytes"
	"math"
	"slices"
	"testing"
)

func f32(bits uint32) float32 { return math.Float32frombits(bits) }
func f64(bits uint64) float64 { return math.Float64frombits(bits) }

// ascendingInts returns integers around every encoding-length boundary and
// the extremes, in numeric order, using assorted Go integer types.
func ascendingInts() []Element {
	var vals []int64
	for k := 1; k <= 7; k++ {
		b := int64(1) << (8 * k)
		vals = append(vals, -b-1, -b, -b+1, b-1, b, b+1)
	}
	vals = append(vals, math.MinInt64, math.MinInt64+1, -2, -1, 0, 1, 2, math.MaxInt64-1, math.MaxInt64)
	slices.Sort(vals)
	vals = slices.Compact(vals)
	var out []Element
	for i, v := range vals {
		// Alternate between the Go types that can hold v, so that the
		// comparisons mix types.
		switch {
		case i%3 == 0 && v >= 0 && v <= math.MaxUint16:
			out = append(out, uint16(v))
		case i%3 == 1 && v >= math.MinInt32 && v <= math.MaxInt32:
			out = append(out, int32(v))
		case i%2 == 0 && v >= 0 && v <= math.MaxUint32:
			out = append(out, uint(v))
		default:
			out = append(out, v)
		}
	}
	return append(out, uint64(math.MaxInt64+1), uint64(math.MaxUint64-1), uint64(math.MaxUint64))
}

// ascendingTuples lists tuples in strictly increasing tuple order, as
// specified by design/tuple.md: element by element, shorter prefix first,
// different types by type code, byte strings bytewise, integers by value,
// floats in IEEE total order with NaNs outside the infinities.
func ascendingTuples() []Tuple {
	ts := []Tuple{
		{},
		{nil},
		{nil, nil},
		{nil, []byte{}},
		{nil, 1},
		{[]byte{}},
		{[]byte{}, nil},
		{[]byte{0}},
		{[]byte{0}, nil},
		{[]byte{0, 0}},
		{[]byte{0, 0xff}},
		{[]byte{1}},
		{[]byte("foo")},
		{[]byte("foo"), nil},
		{[]byte("foo"), ""},
		{[]byte("foo\x00")},
		{[]byte("foo\x00\x00")},
		{[]byte("foo\x01")},
		{[]byte("fop")},
		{[]byte{0xff}},
		{[]byte{0xff, 0xff}},
		{""},
		{"\x00"},
		{"a"},
		{"a", nil},
		{"a", "b"},
		{"a\x00"},
		{"a\x00", nil},
		{"a\x00\x00"},
		{"a\x01"},
		{"ab"},
		{"z"},
		{"\u00d4"},
		{"\u4e2d"},
		{"\U0001f525"},
		{Tuple{}},
		{Tuple{}, nil},
		{Tuple{}, 1},
		{Tuple{nil}},
		{Tuple{nil}, nil},
		{Tuple{nil, nil}},
		{Tuple{nil, 1}},
		{Tuple{[]byte{}}},
		{Tuple{[]byte{0}}},
		{Tuple{"a"}},
		{Tuple{Tuple{}}},
		{Tuple{Tuple{nil}}},
		{Tuple{Tuple{1}}},
		{Tuple{-1}},
		{Tuple{0}},
		{Tuple{0}, "x"},
		{Tuple{0, nil}},
		{Tuple{0, 1}},
		{Tuple{1}},
		{Tuple{1.5}},
		{Tuple{true}},
	}
	for _, v := range ascendingInts() {
		ts = append(ts, Tuple{v})
	}
	ts = append(ts, Tuple{uint64(math.MaxUint64), nil})
	for _, v := range []float32{
		f32(0xffffffff), // negative NaN with the largest payload
		f32(0xffc00000), // negative quiet NaN
		f32(0xff800001), // negative NaN with the smallest payload
		float32(math.Inf(-1)),
		-math.MaxFloat32,
		-1,
		-math.SmallestNonzeroFloat32,
		float32(math.Copysign(0, -1)),
		0,
		math.SmallestNonzeroFloat32,
		1,
		math.MaxFloat32,
		float32(math.Inf(1)),
		f32(0x7f800001), // NaN with the smallest payload
		f32(0x7fc00000), // quiet NaN, as math.NaN() gives
		f32(0x7fffffff), // NaN with the largest payload
	} {
		ts = append(ts, Tuple{v})
	}
	for _, v := range []float64{
		f64(0xffffffffffffffff),
		f64(0xfff8000000000000),
		f64(0xfff0000000000001),
		math.Inf(-1),
		-math.MaxFloat64,
		-1,
		-math.SmallestNonzeroFloat64,
		math.Copysign(0, -1),
		0,
		math.SmallestNonzeroFloat64,
		1,
		math.MaxFloat64,
		math.Inf(1),
		f64(0x7ff0000000000001),
		math.NaN(),
		f64(0x7fffffffffffffff),
	} {
		ts = append(ts, Tuple{v})
	}
	ts = append(ts,
		Tuple{false},
		Tuple{false, nil},
		Tuple{true},
		Tuple{UUID{}},
		Tuple{UUID{15: 1}},
		Tuple{UUID{0: 1}},
		Tuple{UUID{0: 0xff, 15: 0xff}},
		Tuple{Versionstamp{}},
		Tuple{Versionstamp{UserVersion: 1}},
		Tuple{Versionstamp{UserVersion: 0xffff}},
		Tuple{Versionstamp{TransactionVersion: [10]byte{9: 1}}},
		Tuple{Versionstamp{TransactionVersion: [10]byte{0: 1}}},
		Tuple{Versionstamp{TransactionVersion: [10]byte{0: 1}}, nil},
	)
	return ts
}

func TestOrder(t *testing.T) {
	ts := ascendingTuples()
	packed := make([][]byte, len(ts))
	for i, tup := range ts {
		packed[i] = tup.MustPack()
	}
	for i := range ts {
		if c := Compare(ts[i], ts[i]); c != 0 {
			t.Errorf("Compare(%#v, itself) = %d", ts[i], c)
		}
		for j := i + 1; j < len(ts); j++ {
			if c := Compare(ts[i], ts[j]); c != -1 {
				t.Errorf("Compare(%#v, %#v) = %d, want -1", ts[i], ts[j], c)
			}
			if c := Compare(ts[j], ts[i]); c != 1 {
				t.Errorf("Compare(%#v, %#v) = %d, want 1", ts[j], ts[i], c)
			}
			if bytes.Compare(packed[i], packed[j]) >= 0 {
				t.Errorf("packed %#v = %x does not sort before packed %#v = %x", ts[i], packed[i], ts[j], packed[j])
			}
		}
	}
}

// TestCompareMixedIntTypes checks that integers compare by value whatever
// their Go type, as their encodings do.
func TestCompareMixedIntTypes(t *testing.T) {
	same := []Element{int8(5), int16(5), int32(5), int64(5), 5, uint8(5), uint16(5), uint32(5), uint64(5), uint(5)}
	for _, a := range same {
		for _, b := range same {
			if c := Compare(Tuple{a}, Tuple{b}); c != 0 {
				t.Errorf("Compare(%T 5, %T 5) = %d", a, b, c)
			}
			if !bytes.Equal(Tuple{a}.MustPack(), Tuple{b}.MustPack()) {
				t.Errorf("%T 5 and %T 5 pack differently", a, b)
			}
		}
	}
	if Compare(Tuple{int8(-1)}, Tuple{uint64(math.MaxUint64)}) != -1 || Compare(Tuple{uint8(0)}, Tuple{int64(math.MinInt64)}) != 1 {
		t.Error("signed and unsigned compare wrongly")
	}
}

func TestComparePanicsOnUnsupportedType(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Compare did not panic")
		}
	}()
	Compare(Tuple{1, struct{}{}}, Tuple{1, 2})
}
