// Package tuple implements FoundationDB's tuple layer: an order-preserving
// encoding of typed tuples into byte strings, used to build structured keys.
//
// The encoding is byte-for-byte compatible with the official FoundationDB
// bindings (Go, Python, Java), so keys written by this package can be read by
// any of them and vice versa, within the set of types described below; the
// one exception, a Python quirk for 2^64-1, is described under Canonical
// encodings. The package is pure Go and does not need libfdb_c.
//
// # Order
//
// For tuples a and b, bytes.Compare(a.MustPack(), b.MustPack()) has the same
// sign as Compare(a, b). Tuples are ordered element by element; a tuple that
// is a proper prefix of another sorts first. Elements of different types sort
// by their type code (see the table below), so for example every byte string
// sorts before every unicode string, and every integer before every float.
//
// # Encoding
//
// A packed tuple is the concatenation of its encoded elements, each starting
// with a one-byte type code:
//
//	0x00       nil. Inside a nested tuple nil is written 0x00 0xff, because a
//	           bare 0x00 ends the nested tuple.
//	0x01       []byte: the bytes with each 0x00 escaped as 0x00 0xff,
//	           followed by a 0x00 terminator.
//	0x02       string: the UTF-8 bytes, escaped and terminated like []byte.
//	0x05       Tuple (nested): the encoded elements followed by 0x00.
//	0x0c-0x13  negative integers; the code is 0x14 minus the number of bytes
//	           (1 to 8), followed by the big-endian one's complement of the
//	           magnitude, so that more negative values sort first.
//	0x14       integer zero.
//	0x15-0x1c  positive integers; the code is 0x14 plus the number of bytes
//	           (1 to 8), followed by the value big-endian.
//	0x20       float32: IEEE 754 big-endian, with the sign bit flipped for
//	           positive values and all bits flipped for negative ones, which
//	           makes the bytes sort in IEEE total order.
//	0x21       float64: the same transformation on 8 bytes.
//	0x26       false.
//	0x27       true.
//	0x30       UUID: 16 bytes in network byte order.
//	0x33       Versionstamp: 10-byte transaction version followed by the
//	           2-byte big-endian user version.
//
// Integers always use the fewest bytes possible. Every int64 and every uint64
// fits in the 8-byte forms: math.MaxUint64 is 0x1c ff ff ff ff ff ff ff ff and
// math.MinInt64 is 0x0c 7f ff ff ff ff ff ff ff. The official bindings also
// support arbitrary-precision integers (type codes 0x0b and 0x1d, and 0x0c
// values below math.MinInt64); this package does not represent them, and
// Unpack reports such values with ErrIntRange.
//
// # Go types
//
// Pack accepts nil, []byte, string, Tuple, int, int8, int16, int32, int64,
// uint, uint8, uint16, uint32, uint64, float32, float64, bool, UUID and
// Versionstamp. Any other type, including other slice types and named types
// derived from the accepted ones, makes Pack fail with ErrUnsupportedType.
// A nil []byte packs as an empty byte string, and a nil Tuple as an empty
// nested tuple; only an untyped nil element packs as null.
//
// Unpack returns elements of these types: nil, []byte, string, Tuple, int64,
// uint64, float32, float64, bool, UUID and Versionstamp. Integers decode to
// int64 when they fit and to uint64 otherwise, as in the official Go
// bindings, so uint64(5) round-trips as int64(5). Strings are not checked for
// valid UTF-8 in either direction, as in the official Go bindings; readers in
// other languages may reject keys holding invalid UTF-8 strings.
//
// # Canonical encodings
//
// Unpack accepts only canonical encodings, the byte strings this package's
// encoder produces, so that unpacking and re-packing an accepted key yields
// the same key; code that rebuilds keys from decoded tuples (to delete or
// rewrite them, say) can rely on that. The only redundancy the format allows
// is in integers, so Unpack rejects with ErrMalformed:
//
//   - integers with more bytes than necessary: a positive value with a
//     leading 0x00 byte, or a negative one with a leading 0xff byte;
//   - arbitrary-precision codes 0x0b and 0x1d holding 8 bytes or fewer, or a
//     leading zero byte. This includes 0x1d 0x08 ff ff ff ff ff ff ff ff, which
//     the official Python bindings write for 2^64-1; the Go and Java bindings,
//     and this package, write 0x1c ff ff ff ff ff ff ff ff.
//
// No official binding writes any other of these encodings. Every byte
// string, unicode string and float bit pattern has a single encoding, and
// NaN payloads are preserved bit for bit.
//
// # Differences from the official Go bindings
//
// Beyond the Go API (errors instead of panics, no fdb.KeyConvertible
// elements, no *big.Int), the encoding agrees with the official Go bindings
// on every tuple both can represent. Decoding differs as follows:
//
//   - Unpack rejects the non-canonical integers above; the official bindings
//     decode them (0x15 0x00, for instance, as uint64(0)).
//   - Unpack returns ErrIntRange for integers outside [math.MinInt64,
//     math.MaxUint64], which the official bindings return as *big.Int.
//   - Unpack returns an error for truncated input, on which the official
//     bindings panic, and for an unterminated nested tuple, which they
//     accept.
//   - PackWithVersionstamp always writes the 4-byte offset of API version 520
//     and later; the 2-byte offset of older API versions is not supported.
//
// # Versionstamps
//
// A Versionstamp whose transaction version is all 0xff bytes is incomplete:
// its transaction version is filled in by the database when a key written
// with the SET_VERSIONSTAMPED_KEY mutation is committed. Pack refuses tuples
// holding an incomplete versionstamp, because such a key would be stored
// literally. PackWithVersionstamp accepts exactly one and appends the 4-byte
// little-endian offset of its transaction version, the format the
// SET_VERSIONSTAMPED_KEY mutation expects from API version 520 on.
//
// # Subspaces
//
// A Subspace is a key prefix, usually itself a packed tuple, under which
// tuples are packed. Its Range covers every key strictly inside it, from
// prefix+0x00 to prefix+0xff, the same convention as the official bindings.
//
// # Errors
//
// Functions return errors instead of panicking on bad input. Unpack reports
// malformed input with an error wrapping ErrMalformed and never panics. Only
// MustPack, Sub and Subspace.MustPack panic, and only for tuples Pack would
// reject, which is a programming error.
package tuple
