package fdbq

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/tuple"
)

// An idle monitor wakes for a type's history when the hour its first key
// lies in, by key order, ended the retention ago, as trimHistory clears
// by key order: whatever the key holds, and whatever clock wrote it. It
// neither sleeps through hours past the retention behind a key that is
// not a counter, nor wakes for an hour it would not clear (it would then
// sweep every interval for ever).
func TestHistoryDueByKeyOrder(t *testing.T) {
	// 13 minutes into an hour: with a retention of an hour, the hour
	// before this one is kept, the one before that is not.
	wall := time.UnixMilli(1_700_000_000_000)
	minute := wall.UnixMilli() / 60_000
	hour := minute / 60
	const retention = time.Hour
	counter := func(k keys, m int64) []byte { return k.history("email", m, histSucceeded, 3) }
	junk := func(k keys, tup tuple.Tuple) []byte {
		return k.root.MustPack(append(tuple.Tuple{tagHistory, "email"}, tup...))
	}
	for _, tc := range []struct {
		name string
		keys func(k keys) [][]byte
		due  bool // at once; false: not before the retention of the minute now
	}{
		{"an hour past the retention", func(k keys) [][]byte {
			return [][]byte{counter(k, minute-74)}
		}, true},
		{"an hour within the retention", func(k keys) [][]byte {
			return [][]byte{counter(k, minute-73)}
		}, false},
		{"a key before every hour, then an hour past the retention", func(k keys) [][]byte {
			return [][]byte{junk(k, tuple.Tuple{"junk"}), counter(k, minute-120)}
		}, true},
		{"a key in an hour past the retention that is no counter, then another such hour", func(k keys) [][]byte {
			return [][]byte{junk(k, tuple.Tuple{hour - 3, "junk"}), counter(k, minute-120)}
		}, true},
		{"a key in this hour that is no counter", func(k keys) [][]byte {
			return [][]byte{junk(k, tuple.Tuple{hour, "junk"})}
		}, false},
		{"a key in an hour far ahead that is no counter", func(k keys) [][]byte {
			return [][]byte{junk(k, tuple.Tuple{hour + 1_000_000, int64(1), "x"})}
		}, false},
		{"a key two bytes long for an hour far behind", func(k keys) [][]byte {
			return [][]byte{append(k.historyType("email").Bytes(), 0x15, 0x00)}
		}, true},
		{"a key after every minute", func(k keys) [][]byte {
			return [][]byte{junk(k, tuple.Tuple{tuple.Versionstamp{}})}
		}, false},
		{"a clock in the year 9999", func(k keys) [][]byte {
			return [][]byte{counter(k, time.Date(9999, 12, 31, 23, 59, 0, 0, time.UTC).UnixMilli()/60_000)}
		}, false},
		{"a clock in the year 1", func(k keys) [][]byte {
			return [][]byte{counter(k, time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()/60_000)}
		}, true},
		{"the last minute there is", func(k keys) [][]byte {
			return [][]byte{counter(k, math.MaxInt64)}
		}, false},
		{"the first minute there is", func(k keys) [][]byte {
			return [][]byte{counter(k, math.MinInt64)}
		}, true},
		{"an hour whose end overflows", func(k keys) [][]byte {
			return [][]byte{counter(k, (math.MaxInt64/3_600_000-10)*60)}
		}, false},
		{"an hour whose start underflows", func(k keys) [][]byte {
			return [][]byte{counter(k, (math.MinInt64/3_600_000-10)*60)}
		}, true},
		{"a minute 200 years on", func(k keys) [][]byte {
			return [][]byte{counter(k, minute+200*366*24*60)}
		}, false},
		{"a minute 300 years on", func(k keys) [][]byte {
			return [][]byte{counter(k, minute+300*366*24*60)}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st, err := embedded.Open("", embedded.Options{InMemory: true})
			if err != nil {
				t.Fatal(err)
			}
			db := kv.NewDB(st, kv.Options{})
			t.Cleanup(func() { db.Close() })
			q := New(db, Options{Now: func() time.Time { return wall }, HistoryRetention: retention})
			s := DefaultTypeSettings()
			s.Retention = 0
			if err := q.SetType(ctx, db, "email", s); err != nil {
				t.Fatal(err)
			}
			if err := db.Transact(ctx, func(tx kv.Tx) error {
				for _, key := range tc.keys(q.k) {
					tx.Add(key, 1)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			m := NewMonitor(q, MonitorOptions{})
			w, err := m.nextDue(ctx)
			if err != nil {
				t.Fatal(err)
			}
			w.cancel()
			if due := w.has && w.wait <= 0; due != tc.due {
				t.Fatalf("due at once: %v (wait %v, has %v), want %v", due, w.wait, w.has, tc.due)
			}
			// A sweep clears what made the monitor wake: once it has, the
			// monitor sleeps.
			if _, err := m.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			if w, err = m.nextDue(ctx); err != nil {
				t.Fatal(err)
			}
			w.cancel()
			if w.has && w.wait <= 0 {
				t.Fatalf("due at once after a sweep (wait %v)", w.wait)
			}
		})
	}
}
