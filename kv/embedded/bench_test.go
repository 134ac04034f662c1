package embedded_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

func openBench(b *testing.B) *kv.DB {
	b.Helper()
	return openBenchWith(b, kv.Options{})
}

func openBenchWith(b *testing.B, o kv.Options) *kv.DB {
	b.Helper()
	st, err := embedded.Open(b.TempDir(), embedded.Options{})
	if err != nil {
		b.Fatal(err)
	}
	db := kv.NewDB(st, o)
	b.Cleanup(func() { db.Close() })
	return db
}

// BenchmarkCommit measures durable (fsynced) commits per second of a small
// transaction (one 16-byte key, 100-byte value) with 1, 8 and 64 concurrent
// committers. Concurrent commits share fsyncs (group commit).
func BenchmarkCommit(b *testing.B) { benchmarkCommit(b, kv.Options{}) }

// BenchmarkCommitMarkers is BenchmarkCommit with DB.Transact's commit
// markers, which the embedded store does not need (it commits at most once
// on its own) and a FoundationDB cluster does: each transaction writes a
// marker and clears an earlier one.
func BenchmarkCommitMarkers(b *testing.B) { benchmarkCommit(b, kv.Options{AlwaysMarkers: true}) }

func benchmarkCommit(b *testing.B, o kv.Options) {
	for _, committers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("committers=%d", committers), func(b *testing.B) {
			db := openBenchWith(b, o)
			ctx := context.Background()
			value := make([]byte, 100)
			var next atomic.Int64
			b.SetParallelism((committers + 1) / 2) // GOMAXPROCS is 2 here; see README
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := make([]byte, 16)
				for pb.Next() {
					n := next.Add(1)
					binary.BigEndian.PutUint64(key[8:], uint64(n))
					copy(key, "bench/commit/")
					if err := db.Transact(ctx, func(tx kv.Tx) error {
						tx.Set(key, value)
						return nil
					}); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
		})
	}
}

func fill(b *testing.B, db *kv.DB, n int) {
	b.Helper()
	ctx := context.Background()
	value := make([]byte, 100)
	for i := 0; i < n; i += 1000 {
		if err := db.Transact(ctx, func(tx kv.Tx) error {
			for j := i; j < i+1000 && j < n; j++ {
				tx.Set(benchKey(j), value)
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
}

func benchKey(i int) []byte { return fmt.Appendf(nil, "bench/read/%08d", i) }

// BenchmarkPointRead measures point reads per second, 100 reads per
// transaction, from 100,000 keys.
func BenchmarkPointRead(b *testing.B) {
	db := openBench(b)
	const keys = 100_000
	fill(b, db, keys)
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if err := db.ReadTransact(ctx, func(tx kv.ReadTx) error {
				for j := 0; j < 100; j++ {
					i = (i + 7919) % keys
					if _, err := tx.Get(benchKey(i)); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds(), "reads/s")
}

// BenchmarkRangeRead measures range reads of 100 keys per second.
func BenchmarkRangeRead(b *testing.B) {
	db := openBench(b)
	const keys = 100_000
	fill(b, db, keys)
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i = (i + 7919) % (keys - 100)
			if err := db.ReadTransact(ctx, func(tx kv.ReadTx) error {
				kvs, err := tx.GetRange(kv.Range{Begin: benchKey(i), End: benchKey(i + 100)}, kv.RangeOptions{})
				if err == nil && len(kvs) != 100 {
					err = fmt.Errorf("read %d keys", len(kvs))
				}
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ranges/s")
}
