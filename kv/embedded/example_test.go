package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// A store in a data directory keeps what was committed across Close and
// Open; kv.NewDB puts the retry loop over it.
func Example() {
	dir, err := os.MkdirTemp("", "jobstage-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	st, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		log.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	err = db.Transact(ctx, func(tx kv.Tx) error {
		tx.Set([]byte("greeting"), []byte("hello"))
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := db.Close(); err != nil { // closes the store too
		log.Fatal(err)
	}

	st, err = embedded.Open(dir, embedded.Options{})
	if err != nil {
		log.Fatal(err)
	}
	db = kv.NewDB(st, kv.Options{})
	defer db.Close()
	v, err := kv.ReadTransact(ctx, db, func(tx kv.ReadTx) ([]byte, error) {
		return tx.Get([]byte("greeting"))
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("after reopening: %s\n", v)
	// Output:
	// after reopening: hello
}

// A data directory is open in one Store at a time: a second Open fails
// with ErrLocked until the first store is closed.
func ExampleOpen_locked() {
	dir, err := os.MkdirTemp("", "jobstage-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	first, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		log.Fatal(err)
	}
	_, err = embedded.Open(dir, embedded.Options{})
	fmt.Println("second open locked:", errors.Is(err, embedded.ErrLocked))
	if err := first.Close(); err != nil {
		log.Fatal(err)
	}
	second, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("open after close:", second.Dir() == dir)
	if err := second.Close(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// second open locked: true
	// open after close: true
}

// Transactions conflict as FoundationDB's do: a transaction whose read
// was overwritten after its read version fails to commit with
// not_committed, and DB.Transact runs it again.
func ExampleStore_conflict() {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()

	t1, err := st.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := t1.Get([]byte("k")); err != nil { // a read conflict on k
		log.Fatal(err)
	}
	t1.Set([]byte("seen"), []byte("nothing"))

	t2, err := st.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	t2.Set([]byte("k"), []byte("v"))
	fmt.Println("t2:", t2.Commit())

	err = t1.Commit()
	fmt.Println("t1:", errors.Is(err, kv.ErrNotCommitted), kv.IsRetryable(err))
	// Output:
	// t2: <nil>
	// t1: true true
}
