package tuple

import (
	"bytes"
	"errors"
	"testing"

	"github.com/jobstage/jobstage/kv"
)

func TestSubspace(t *testing.T) {
	root := Sub("jobs")
	if want := h("02 6a6f6273 00"); !bytes.Equal(root.Bytes(), want) {
		t.Fatalf("Sub(\"jobs\").Bytes() = %x, want %x", root.Bytes(), want)
	}
	queue := root.Sub("queue", 7)
	if want := h("02 6a6f6273 00 02 7175657565 00 15 07"); !bytes.Equal(queue.Bytes(), want) {
		t.Fatalf("nested prefix = %x, want %x", queue.Bytes(), want)
	}
	if !bytes.Equal(queue.Bytes(), Sub("jobs", "queue", 7).Bytes()) {
		t.Fatal("Sub chains differ from a single Sub")
	}

	key, err := queue.Pack(Tuple{"a", nil})
	if err != nil {
		t.Fatal(err)
	}
	if want := append(queue.Bytes(), h("02 61 00 00")...); !bytes.Equal(key, want) {
		t.Fatalf("Pack = %x, want %x", key, want)
	}
	if !bytes.Equal(key, queue.MustPack(Tuple{"a", nil})) {
		t.Fatal("MustPack differs from Pack")
	}
	if !queue.Contains(key) || !root.Contains(key) || Sub("other").Contains(key) {
		t.Fatal("Contains is wrong")
	}
	tup, err := queue.Unpack(key)
	if err != nil || !identical(tup, Tuple{"a", nil}) {
		t.Fatalf("Unpack = %#v, %v", tup, err)
	}
	tup, err = root.Unpack(key)
	if err != nil || !identical(tup, Tuple{"queue", int64(7), "a", nil}) {
		t.Fatalf("root Unpack = %#v, %v", tup, err)
	}
	if _, err := Sub("other").Unpack(key); !errors.Is(err, ErrNotInSubspace) {
		t.Fatalf("Unpack outside subspace: %v", err)
	}
	if _, err := queue.Unpack(append(queue.Bytes(), 0xff)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Unpack of a bad suffix: %v", err)
	}
	if tup, err := queue.Unpack(queue.Bytes()); err != nil || len(tup) != 0 {
		t.Fatalf("Unpack of the prefix = %#v, %v", tup, err)
	}
	if _, err := queue.Pack(Tuple{make(chan int)}); !errors.Is(err, ErrUnsupportedType) {
		t.Fatalf("Pack of a bad element: %v", err)
	}
}

func TestSubspaceRanges(t *testing.T) {
	s := FromBytes([]byte("p"))
	r := s.Range()
	if !bytes.Equal(r.Begin, []byte("p\x00")) || !bytes.Equal(r.End, []byte("p\xff")) {
		t.Fatalf("Range = %q..%q", r.Begin, r.End)
	}
	inside := []Tuple{{nil}, {[]byte{}}, {1}, {"x", 2}, {Tuple{}}, {Versionstamp{TransactionVersion: [10]byte{0: 0xfe}}}}
	for _, tup := range inside {
		if !r.Contains(s.MustPack(tup)) {
			t.Errorf("Range does not contain %#v", tup)
		}
	}
	for _, k := range [][]byte{[]byte("p"), []byte("o\xff"), []byte("p\xff"), []byte("q")} {
		if r.Contains(k) {
			t.Errorf("Range contains %q", k)
		}
	}

	rt, err := s.RangeOf(Tuple{"x"})
	if err != nil {
		t.Fatal(err)
	}
	px := s.MustPack(Tuple{"x"})
	if !bytes.Equal(rt.Begin, append(bytes.Clone(px), 0x00)) || !bytes.Equal(rt.End, append(bytes.Clone(px), 0xff)) {
		t.Fatalf("RangeOf = %x..%x", rt.Begin, rt.End)
	}
	for _, tup := range []Tuple{{"x", nil}, {"x", 1}, {"x", Tuple{"y"}}, {"x", "\xff"}} {
		if !rt.Contains(s.MustPack(tup)) {
			t.Errorf("RangeOf(x) does not contain %#v", tup)
		}
	}
	for _, tup := range []Tuple{{"x"}, {"w", 1}, {"x\x00"}, {"xa"}, {"y"}} {
		if rt.Contains(s.MustPack(tup)) {
			t.Errorf("RangeOf(x) contains %#v", tup)
		}
	}
	if _, err := s.RangeOf(Tuple{IncompleteVersionstamp(0)}); !errors.Is(err, ErrIncompleteVersionstamp) {
		t.Fatalf("RangeOf with an incomplete versionstamp: %v", err)
	}
	empty, err := s.RangeOf(Tuple{})
	if err != nil || !rangesEqual(empty, r) {
		t.Fatalf("RangeOf(empty) = %v, %v; want %v", empty, err, r)
	}

	var all Subspace
	if ar := all.Range(); !bytes.Equal(ar.Begin, []byte{0}) || !bytes.Equal(ar.End, []byte{0xff}) {
		t.Fatalf("zero Subspace Range = %q..%q", ar.Begin, ar.End)
	}
}

func rangesEqual(a, b kv.Range) bool {
	return bytes.Equal(a.Begin, b.Begin) && bytes.Equal(a.End, b.End)
}

func TestSubspaceCopies(t *testing.T) {
	raw := []byte("abc")
	s := FromBytes(raw)
	raw[0] = 'x'
	b := s.Bytes()
	b[1] = 'y'
	if !bytes.Equal(s.Bytes(), []byte("abc")) {
		t.Fatalf("Subspace prefix was changed through an alias: %q", s.Bytes())
	}
	r := s.Range()
	r.Begin[0] = 'z'
	if !bytes.Equal(s.Bytes(), []byte("abc")) {
		t.Fatal("Subspace prefix was changed through its Range")
	}
}

func TestSubspacePackWithVersionstamp(t *testing.T) {
	s := Sub("prefix")
	got, err := s.PackWithVersionstamp(Tuple{IncompleteVersionstamp(1)})
	if err != nil {
		t.Fatal(err)
	}
	// TuplePackingTest.java: the offset is 1 plus the prefix length.
	if want := h("02707265666978 00 33 ffffffffffffffffffff 0001 09000000"); !bytes.Equal(got, want) {
		t.Fatalf("PackWithVersionstamp = %x, want %x", got, want)
	}
	if _, err := s.PackWithVersionstamp(Tuple{1}); !errors.Is(err, ErrIncompleteVersionstamp) {
		t.Fatalf("PackWithVersionstamp without a versionstamp: %v", err)
	}
}

func TestSubPanics(t *testing.T) {
	for _, elems := range [][]Element{{struct{}{}}, {IncompleteVersionstamp(0)}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Sub(%#v) did not panic", elems)
				}
			}()
			Sub(elems...)
		}()
	}
}
