package fdbq

import (
	"context"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// BatchSize returns the monitor's current sweep batch size (AIMD).
func (m *Monitor) BatchSize() int { return m.batchSize() }

// SetBatchSize sets the monitor's sweep batch size, so a test can start
// from a known size.
func (m *Monitor) SetBatchSize(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.batch = n
}

// ClaimCount returns how many accept claims are stored.
func (q *Queue) ClaimCount(ctx context.Context) (int, error) {
	kvs, err := kv.ReadTransact(ctx, q.db, func(tx kv.ReadTx) ([]kv.KeyValue, error) {
		return tx.GetRange(q.k.claims().Range(), kv.RangeOptions{})
	})
	return len(kvs), err
}

// SetMaxZoneScan sets how many zone marks one read of a zone index takes,
// until the returned func puts it back.
func SetMaxZoneScan(n int) func() {
	was := maxZoneScan
	maxZoneScan = n
	return func() { maxZoneScan = was }
}

// SetListScan sets how many index entries a page of a filtered listing
// examines, until the returned func puts it back.
func SetListScan(n int) func() {
	was := listScan
	listScan = n
	return func() { listScan = was }
}

// LaneOf is the lane of job id's activity entry.
func LaneOf(id string) int { return laneOf(id) }

// ShardOf is the shard of job id among n zones.
func ShardOf(id string, n int) int { return shardOf(id, n) }

// SetInterestLease sets how long an interest entry lives unrenewed, until
// the returned func puts it back.
func SetInterestLease(d time.Duration) func() {
	was := interestLease
	interestLease = d
	return func() { interestLease = was }
}

// InterestHolder is the holder name of q's interest entries.
func (q *Queue) InterestHolder() string { return q.interests.holder }

// Idle runs one wait of the monitor's loop (see Monitor.idle), outside
// the loop.
func (m *Monitor) Idle(ctx context.Context) (bool, error) { return m.idle(ctx) }

// Holds is how many types the monitor holds interest in.
func (m *Monitor) Holds() int { return len(m.holds) }

// UniqueEntries returns the unique index of type typ: each entry's job id.
func (q *Queue) UniqueEntries(ctx context.Context, typ string) ([]string, error) {
	kvs, err := kv.ReadTransact(ctx, q.db, func(tx kv.ReadTx) ([]kv.KeyValue, error) {
		return tx.GetRange(q.k.root.Sub(tagUnique, typ).Range(), kv.RangeOptions{})
	})
	ids := make([]string, len(kvs))
	for i, e := range kvs {
		ids[i] = string(e.Value)
	}
	return ids, err
}

// PutScheduleRecord overwrites schedule name's stored record with b, as
// a store damaged by something else would hold it.
func PutScheduleRecord(t interface{ Fatal(...any) }, q *Queue, name string, b []byte) {
	if err := q.db.Transact(context.Background(), func(tx kv.Tx) error {
		tx.Set(q.k.schedule(name), b)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// EventLog returns the raw entries of typ's event log.
func (q *Queue) EventLog(ctx context.Context, typ string) ([]kv.KeyValue, error) {
	return kv.ReadTransact(ctx, q.db, func(tx kv.ReadTx) ([]kv.KeyValue, error) {
		return tx.GetRange(q.k.events(typ).Range(), kv.RangeOptions{})
	})
}

// EventsHeld returns typ's events count as stored.
func (q *Queue) EventsHeld(ctx context.Context, typ string) (int64, error) {
	return kv.ReadTransact(ctx, q.db, func(tx kv.ReadTx) (int64, error) {
		b, err := tx.Get(q.k.eventsHeld(typ))
		return kv.DecodeInt64(b), err
	})
}

// PutRawEvent writes value as an event of typ's log in a transaction of
// its own, at that commit's position.
func (q *Queue) PutRawEvent(ctx context.Context, typ string, value []byte) error {
	return q.db.Transact(ctx, func(tx kv.Tx) error {
		key, err := q.k.events(typ).PackWithVersionstamp(tuple.Tuple{tuple.IncompleteVersionstamp(0), int64(0)})
		if err != nil {
			return err
		}
		tx.SetVersionstampedKey(key, value)
		return q.changed(tx, typ)
	})
}
