package fdbq_test

import (
	"context"
	"sync/atomic"

	"github.com/jobstage/jobstage/kv"
)

// readCounts counts what transactions read from a store: point reads,
// range reads and the keys the range reads returned; and the attempts of
// transactions (begins).
type readCounts struct {
	gets, ranges, keys, begins atomic.Int64
}

// snapshot returns the counts so far.
func (c *readCounts) snapshot() (gets, ranges, keys int64) {
	return c.gets.Load(), c.ranges.Load(), c.keys.Load()
}

// countingBackend wraps a backend and counts the reads of its
// transactions, snapshot reads included.
type countingBackend struct {
	kv.Backend
	c *readCounts
}

// countingDB returns a DB over db's backend whose reads are counted.
func countingDB(db *kv.DB) (*kv.DB, *readCounts) {
	c := &readCounts{}
	return kv.NewDB(&countingBackend{Backend: db.Backend(), c: c}, kv.Options{}), c
}

// CommitsAtMostOnce forwards the inner backend's answer, so the DB adds no
// commit markers the inner one would not get.
func (b *countingBackend) CommitsAtMostOnce() bool {
	m, ok := b.Backend.(kv.AtMostOnceBackend)
	return ok && m.CommitsAtMostOnce()
}

func (b *countingBackend) Begin(ctx context.Context) (kv.Transaction, error) {
	b.c.begins.Add(1)
	tx, err := b.Backend.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &countingTx{Transaction: tx, c: b.c}, nil
}

type countingTx struct {
	kv.Transaction
	c *readCounts
}

// Get, GetRange and Iterate count as a snapshot's reads do.
func (t *countingTx) reads() *countingReader { return &countingReader{ReadTx: t.Transaction, c: t.c} }

func (t *countingTx) Get(key []byte) ([]byte, error) { return t.reads().Get(key) }

func (t *countingTx) GetRange(r kv.Range, o kv.RangeOptions) ([]kv.KeyValue, error) {
	return t.reads().GetRange(r, o)
}

func (t *countingTx) Iterate(r kv.Range, o kv.RangeOptions) kv.RangeIterator {
	return t.reads().Iterate(r, o)
}

// Transact and ReadTransact hand fn the wrapper, so nested reads count.
func (t *countingTx) Transact(ctx context.Context, fn func(kv.Tx) error) error {
	return t.Transaction.Transact(ctx, func(kv.Tx) error { return fn(t) })
}

func (t *countingTx) ReadTransact(ctx context.Context, fn func(kv.ReadTx) error) error {
	return t.Transaction.ReadTransact(ctx, func(kv.ReadTx) error { return fn(t) })
}

func (t *countingTx) Snapshot() kv.ReadTx {
	return &countingReader{ReadTx: t.Transaction.Snapshot(), c: t.c}
}

type countingReader struct {
	kv.ReadTx
	c *readCounts
}

func (r *countingReader) Get(key []byte) ([]byte, error) {
	r.c.gets.Add(1)
	return r.ReadTx.Get(key)
}

func (r *countingReader) GetRange(rg kv.Range, o kv.RangeOptions) ([]kv.KeyValue, error) {
	kvs, err := r.ReadTx.GetRange(rg, o)
	r.c.ranges.Add(1)
	r.c.keys.Add(int64(len(kvs)))
	return kvs, err
}

func (r *countingReader) Iterate(rg kv.Range, o kv.RangeOptions) kv.RangeIterator {
	r.c.ranges.Add(1)
	return &countingIterator{RangeIterator: r.ReadTx.Iterate(rg, o), c: r.c}
}

func (r *countingReader) ReadTransact(ctx context.Context, fn func(kv.ReadTx) error) error {
	return r.ReadTx.ReadTransact(ctx, func(kv.ReadTx) error { return fn(r) })
}

type countingIterator struct {
	kv.RangeIterator
	c *readCounts
}

func (it *countingIterator) Next() bool {
	if !it.RangeIterator.Next() {
		return false
	}
	it.c.keys.Add(1)
	return true
}
