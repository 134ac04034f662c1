package kvtest

import (
	"bytes"
	"fmt"

	"github.com/jobstage/jobstage/kv"
)

// atomicCase is one atomic mutation on a key with a known starting value
// and FoundationDB's result, written out rather than computed so that the
// table also checks kv.ApplyMutation.
type atomicCase struct {
	name  string
	op    kv.MutationType
	start []byte // nil: the key is absent
	param []byte
	want  []byte // nil: the key is cleared
}

func le(v uint64, n int) []byte {
	b := make([]byte, n)
	for i := range n {
		b[i] = byte(v >> (8 * i))
	}
	return b
}

func atomicCases() []atomicCase {
	long := bytes.Repeat([]byte{'x'}, kv.MaxValueSize-1)
	fits := bytes.Repeat([]byte{'y'}, kv.MaxValueSize-2)
	return []atomicCase{
		{"add", kv.MutationAdd, le(5, 8), le(3, 8), le(8, 8)},
		{"add-absent", kv.MutationAdd, nil, le(7, 8), le(7, 8)},
		{"add-carry", kv.MutationAdd, []byte{0xff, 0x00}, []byte{0x01, 0x00}, []byte{0x00, 0x01}},
		{"add-wraps", kv.MutationAdd, []byte{0xff}, []byte{0x01}, []byte{0x00}},
		{"add-shorter-value", kv.MutationAdd, []byte{0x01}, le(1, 4), le(2, 4)},
		{"add-longer-value", kv.MutationAdd, []byte{1, 2, 3, 4}, []byte{1, 0}, []byte{2, 2}},
		{"add-negative", kv.MutationAdd, le(5, 8), kv.EncodeInt64(-7), kv.EncodeInt64(-2)},
		{"bit-and", kv.MutationBitAnd, []byte{0xf0, 0x0f}, []byte{0xff, 0x01}, []byte{0xf0, 0x01}},
		{"bit-and-absent", kv.MutationBitAnd, nil, []byte{0x0f}, []byte{0x0f}},
		{"bit-or", kv.MutationBitOr, []byte{0xf0}, []byte{0x0f, 0x01}, []byte{0xff, 0x01}},
		{"bit-or-absent", kv.MutationBitOr, nil, []byte{0x0f}, []byte{0x0f}},
		{"bit-xor", kv.MutationBitXor, []byte{0xff, 0x00}, []byte{0x0f, 0x0f}, []byte{0xf0, 0x0f}},
		{"bit-xor-absent", kv.MutationBitXor, nil, []byte{0x0f}, []byte{0x0f}},
		{"append", kv.MutationAppendIfFits, []byte("ab"), []byte("cd"), []byte("abcd")},
		{"append-absent", kv.MutationAppendIfFits, nil, []byte("x"), []byte("x")},
		{"append-exactly-fits", kv.MutationAppendIfFits, fits, []byte("zz"), append(bytes.Clone(fits), "zz"...)},
		{"append-does-not-fit", kv.MutationAppendIfFits, long, []byte("zz"), long},
		// Max and Min compare little-endian unsigned integers: 256 > 255
		// although 256's first byte is smaller.
		{"max-keeps", kv.MutationMax, le(256, 2), le(255, 2), le(256, 2)},
		{"max-replaces", kv.MutationMax, le(5, 8), le(9, 8), le(9, 8)},
		{"max-absent", kv.MutationMax, nil, le(3, 2), le(3, 2)},
		{"max-pads-value", kv.MutationMax, []byte{0x05}, le(3, 2), le(5, 2)},
		{"min-replaces", kv.MutationMin, le(256, 2), le(255, 2), le(255, 2)},
		{"min-keeps", kv.MutationMin, le(5, 8), le(9, 8), le(5, 8)},
		{"min-absent", kv.MutationMin, nil, le(3, 2), le(3, 2)},
		{"min-pads-value", kv.MutationMin, []byte{0x05}, le(3, 2), le(3, 2)},
		// ByteMin and ByteMax compare byte strings.
		{"byte-min", kv.MutationByteMin, []byte("b"), []byte("ab"), []byte("ab")},
		{"byte-min-keeps", kv.MutationByteMin, []byte("ab"), []byte("b"), []byte("ab")},
		{"byte-min-absent", kv.MutationByteMin, nil, []byte("q"), []byte("q")},
		{"byte-max", kv.MutationByteMax, []byte("abc"), []byte("abd"), []byte("abd")},
		{"byte-max-keeps", kv.MutationByteMax, []byte("b"), []byte("ab"), []byte("b")},
		{"byte-max-absent", kv.MutationByteMax, nil, []byte("q"), []byte("q")},
		{"compare-and-clear-equal", kv.MutationCompareAndClear, []byte("v"), []byte("v"), nil},
		{"compare-and-clear-differs", kv.MutationCompareAndClear, []byte("v"), []byte("w"), []byte("v")},
		{"compare-and-clear-absent", kv.MutationCompareAndClear, nil, []byte("v"), nil},
	}
}

// testAtomicMutations: every atomic mutation gives FoundationDB's result,
// both as the transaction's own read and once committed.
func testAtomicMutations(e *env) {
	cases := atomicCases()
	for _, c := range cases {
		got, exists := kv.ApplyMutation(c.op, c.start, c.start != nil, c.param)
		if !exists {
			got = nil
		}
		if !sameValue(got, c.want) {
			e.Errorf("%s: kv.ApplyMutation = %s, want %s", c.name, show(got), show(c.want))
		}
	}
	e.transact(func(tx kv.Tx) error {
		for _, c := range cases {
			if c.start != nil {
				tx.Set(e.k("start/"+c.name), c.start)
				tx.Set(e.k("committed/"+c.name), c.start)
			}
		}
		return nil
	})
	// Own reads: each mutation applies to a value the transaction read
	// from the store.
	e.rollback(func(tx kv.Tx) error {
		for _, c := range cases {
			tx.Atomic(c.op, e.k("start/"+c.name), c.param)
			if err := e.expectGet(tx, e.k("start/"+c.name), c.want); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
		}
		return nil
	})
	// Committed: the store applies the mutations itself. Xor, Add and
	// AppendIfFits are not idempotent: Transact's commit-once keeps a
	// retried commit from applying them twice.
	e.transact(func(tx kv.Tx) error {
		for _, c := range cases {
			tx.Atomic(c.op, e.k("committed/"+c.name), c.param)
		}
		return nil
	})
	for _, c := range cases {
		if got := e.get("committed/" + c.name); !sameValue(got, c.want) {
			e.Errorf("%s: committed value = %s, want %s", c.name, show(got), show(c.want))
		}
	}
}
