package kv_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// openDB returns a DB over an in-memory embedded store. A deployment
// opens embedded.Open(dir, …) or a FoundationDB cluster (kv/fdb) instead;
// the code over the DB is the same.
func openDB() *kv.DB {
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	return kv.NewDB(st, kv.Options{})
}

// deposit is a transactional function: it takes a Transactor, so it
// runs in a transaction of its own when given the DB, or inside the
// caller's when given a Tx, and commits with it. It has no side effects
// outside the transaction, since it may run more than once.
func deposit(ctx context.Context, tr kv.Transactor, account string, cents int64) error {
	return tr.Transact(ctx, func(tx kv.Tx) error {
		tx.Add([]byte("balance/"+account), cents) // atomic: no read conflict
		return nil
	})
}

// Transactional functions compose: two deposits and a log entry commit in
// one transaction, or none of them does.
func Example() {
	db := openDB()
	defer db.Close()
	ctx := context.Background()

	if err := deposit(ctx, db, "ann", 500); err != nil { // alone
		log.Fatal(err)
	}
	err := db.Transact(ctx, func(tx kv.Tx) error { // together
		if err := deposit(ctx, tx, "ann", -200); err != nil {
			return err
		}
		if err := deposit(ctx, tx, "bob", 200); err != nil {
			return err
		}
		tx.Set([]byte("log/1"), []byte("ann pays bob 200"))
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}

	r, err := kv.PrefixRange([]byte("balance/"))
	if err != nil {
		log.Fatal(err)
	}
	err = db.ReadTransact(ctx, func(tx kv.ReadTx) error {
		kvs, err := tx.GetRange(r, kv.RangeOptions{})
		if err != nil {
			return err
		}
		for _, e := range kvs {
			fmt.Printf("%s = %d\n", e.Key, kv.DecodeInt64(e.Value))
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// balance/ann = 300
	// balance/bob = 200
}

// Transact returns the function's result along with the commit's error.
func ExampleTransact() {
	db := openDB()
	defer db.Close()
	ctx := context.Background()

	next := func(tx kv.Tx) (int64, error) {
		v, err := tx.Get([]byte("seq"))
		if err != nil {
			return 0, err
		}
		n := kv.DecodeInt64(v) + 1
		tx.Set([]byte("seq"), kv.EncodeInt64(n))
		return n, nil
	}
	for range 3 {
		n, err := kv.Transact(ctx, db, next)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("seq", n)
	}
	// Output:
	// seq 1
	// seq 2
	// seq 3
}

// A watch fires when the key's value changes from the one its
// transaction saw, once that transaction has committed.
func ExampleTx_watch() {
	db := openDB()
	defer db.Close()
	ctx := context.Background()

	var w kv.Watch
	err := db.Transact(ctx, func(tx kv.Tx) error {
		w = tx.Watch([]byte("config/version"))
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	err = db.Transact(ctx, func(tx kv.Tx) error {
		tx.Set([]byte("config/version"), []byte("2"))
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("watch:", w.Wait(ctx))
	// Output:
	// watch: <nil>
}

// Errors carry FoundationDB's codes; errors.Is compares codes, whatever
// wraps them.
func ExampleError() {
	db := openDB()
	defer db.Close()

	err := db.Transact(context.Background(), func(tx kv.Tx) error {
		tx.Set(make([]byte, kv.MaxKeySize+1), []byte("x"))
		return nil
	})
	fmt.Println(errors.Is(err, kv.ErrKeyTooLarge), kv.ErrorCode(err), kv.IsRetryable(err))
	// Output:
	// true 2102 false
}
