package fdbq

import (
	"context"
	"fmt"
	"testing"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// A type's count of jobs in a state is spread over countShards keys, so
// that no key is written by every job of the type; Count and Types sum
// them, with the one key of a store written before shards.
func TestCountersAreShardedAndSummed(t *testing.T) {
	ctx := context.Background()
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	defer db.Close()
	q := New(db, Options{})
	if err := q.SetType(ctx, db, "email", DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	const n = 1600
	jobs := make([]NewJob, n)
	for i := range jobs {
		jobs[i] = NewJob{Type: "email", ID: fmt.Sprintf("j%04d", i)}
	}
	if _, err := q.AddBatch(ctx, db, jobs); err != nil {
		t.Fatal(err)
	}
	// A store of before shards: its count at the state's key itself.
	if err := db.Transact(ctx, func(tx kv.Tx) error { tx.Add(q.k.count("email", Pending), 7); return nil }); err != nil {
		t.Fatal(err)
	}
	var shards []kv.KeyValue
	if err := db.ReadTransact(ctx, func(tx kv.ReadTx) error {
		var err error
		shards, err = tx.GetRange(q.k.countRange("email", Pending), kv.RangeOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(shards) != countShards+1 {
		t.Fatalf("%d keys hold the pending count, want %d shards and the key of before", len(shards), countShards)
	}
	for _, e := range shards[1:] {
		// Each shard takes about n/countShards of the jobs (100): FNV-1a of
		// the ids spreads them.
		if v := kv.DecodeInt64(e.Value); v < 50 || v > 150 {
			t.Errorf("shard %q counts %d of %d jobs", e.Key, v, n)
		}
	}
	got, err := q.Count(ctx, db, "email", Pending)
	if err != nil || got != n+7 {
		t.Fatalf("Count: %d, %v; want %d", got, err, n+7)
	}
	ls, err := q.Accept(ctx, "email", AcceptOptions{Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls[:40] {
		if err := q.Finish(ctx, db, l, nil); err != nil {
			t.Fatal(err)
		}
	}
	info, err := q.GetType(ctx, db, "email")
	if err != nil {
		t.Fatal(err)
	}
	if info.Pending != n+7-100 || info.Running != 60 || info.Finished != 40 {
		t.Fatalf("GetType counts %d/%d/%d, want %d/60/40", info.Pending, info.Running, info.Finished, n+7-100)
	}
}
