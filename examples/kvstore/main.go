// Command kvstore writes and reads through jobstage's embedded store: a
// read-modify-write counter, a watch woken by another transaction, and the
// commit's versionstamp. Run it twice: the data survives in the directory.
//
//	go run ./examples/kvstore [-dir ./kvstore-data]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/tuple"
)

func main() {
	dir := flag.String("dir", "./kvstore-data", "data directory of the embedded store (apart from the job store of jobstage serve)")
	flag.Parse()
	if err := run(*dir); err != nil {
		log.Fatal(err)
	}
}

func run(dir string) error {
	store, err := embedded.Open(dir, embedded.Options{})
	if err != nil {
		return err
	}
	db := kv.NewDB(store, kv.Options{})
	defer db.Close()
	ctx := context.Background()

	app := tuple.FromBytes([]byte("example")).Sub("kvstore")
	runs := app.MustPack(tuple.Tuple{"runs"})
	greeting := app.MustPack(tuple.Tuple{"greeting"})

	// A read-modify-write in one serializable transaction: concurrent runs
	// could never lose an increment.
	n, err := kv.Transact(ctx, db, func(tx kv.Tx) (int64, error) {
		v, err := tx.Get(runs)
		if err != nil {
			return 0, err
		}
		n := kv.DecodeInt64(v) + 1
		tx.Set(runs, kv.EncodeInt64(n))
		return n, nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("store %s opened; this is run %d\n", dir, n)

	// A watch, created in a transaction, fires when another transaction
	// changes the key: no polling.
	w, err := kv.Transact(ctx, db, func(tx kv.Tx) (kv.Watch, error) {
		return tx.Watch(greeting), nil
	})
	if err != nil {
		return err
	}
	stamp, err := kv.Transact(ctx, db, func(tx kv.Tx) (*kv.Future[kv.Versionstamp], error) {
		tx.Set(greeting, fmt.Appendf(nil, "hello from run %d", n))
		return tx.Versionstamp(), nil
	})
	if err != nil {
		return err
	}
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := w.Wait(waitCtx); err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	vs, err := stamp.Get(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("watch fired; the write committed with versionstamp %x\n", vs)

	// Range reads return keys in tuple order.
	return db.ReadTransact(ctx, func(tx kv.ReadTx) error {
		kvs, err := tx.GetRange(app.Range(), kv.RangeOptions{})
		if err != nil {
			return err
		}
		if len(kvs) == 0 {
			return errors.New("nothing read back")
		}
		for _, e := range kvs {
			t, err := app.Unpack(e.Key)
			if err != nil {
				return err
			}
			if t[0] == "runs" {
				fmt.Printf("  %v = %d\n", t, kv.DecodeInt64(e.Value))
			} else {
				fmt.Printf("  %v = %q\n", t, e.Value)
			}
		}
		return nil
	})
}
