package tuple_test

import (
	"fmt"

	"github.com/jobstage/jobstage/kv/tuple"
)

func Example() {
	key, err := tuple.Tuple{"user", 42, []byte{0x00, 0x01}, nil, true}.Pack()
	if err != nil {
		panic(err)
	}
	fmt.Printf("% x\n", key)

	t, err := tuple.Unpack(key)
	if err != nil {
		panic(err)
	}
	// Integers come back as int64 (uint64 above math.MaxInt64).
	for _, el := range t {
		fmt.Printf("%T %v\n", el, el)
	}
	// Output:
	// 02 75 73 65 72 00 15 2a 01 00 ff 01 00 00 27
	// string user
	// int64 42
	// []uint8 [0 1]
	// <nil> <nil>
	// bool true
}

func ExampleSubspace() {
	jobs := tuple.Sub("jobs")
	queue := jobs.Sub("queue")

	key := queue.MustPack(tuple.Tuple{int64(1700000000), "job-17"})
	fmt.Printf("key    %q\n", key)

	// The subspace's Range covers every key packed in it.
	r := queue.Range()
	fmt.Printf("range  %q .. %q\n", r.Begin, r.End)
	fmt.Println("inside", r.Contains(key))

	t, err := queue.Unpack(key)
	if err != nil {
		panic(err)
	}
	fmt.Println("tuple ", t)

	// Keys of other subspaces are rejected.
	_, err = tuple.Sub("other").Unpack(key)
	fmt.Println(err != nil)
	// Output:
	// key    "\x02jobs\x00\x02queue\x00\x18eS\xf1\x00\x02job-17\x00"
	// range  "\x02jobs\x00\x02queue\x00\x00" .. "\x02jobs\x00\x02queue\x00\xff"
	// inside true
	// tuple  [1700000000 job-17]
	// true
}

func ExampleTuple_PackWithVersionstamp() {
	// Keys that sort in commit order: the database fills in the 10 0xff
	// bytes at the offset given by the last 4 bytes.
	events := tuple.Sub("events")
	key, err := events.PackWithVersionstamp(tuple.Tuple{tuple.IncompleteVersionstamp(0), "created"})
	if err != nil {
		panic(err)
	}
	fmt.Printf("% x\n", key)
	// Output:
	// 02 65 76 65 6e 74 73 00 33 ff ff ff ff ff ff ff ff ff ff 00 00 02 63 72 65 61 74 65 64 00 09 00 00 00
}
