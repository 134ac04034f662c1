package fdbq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/tuple"
)

// Fuzz targets for every decoder of what the store holds or a client
// sends: they must never panic, must refuse what they cannot read with an
// error (ErrCorrupt for the store's data), and must read back what fdbq
// writes. FuzzDecodeRecord and FuzzRecordRoundTrip (codec_test.go) and
// FuzzParsePending (keys_internal_test.go) are the others.

// fuzzQueue is a queue over an in-memory store, shared by a fuzz target's
// inputs, with type "t" registered.
func fuzzQueue(f *testing.F) *Queue {
	f.Helper()
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		f.Fatal(err)
	}
	db := kv.NewDB(st, kv.Options{})
	f.Cleanup(func() { db.Close() })
	q := New(db, Options{})
	if err := q.SetType(context.Background(), db, "t", DefaultTypeSettings()); err != nil {
		f.Fatal(err)
	}
	return q
}

// errRollBack ends a fuzz input's transaction without committing it.
var errRollBack = errors.New("roll back")

// fuzzInTx runs fn in a transaction that is never committed, so that
// each input starts from the same store.
func fuzzInTx(t *testing.T, q *Queue, fn func(tx kv.Tx) error) {
	t.Helper()
	err := q.db.Transact(context.Background(), func(tx kv.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return errRollBack
	})
	if !errors.Is(err, errRollBack) {
		t.Fatal(err)
	}
}

// A stored value decodes to a record that can be stored again and reads
// back the same, or is ErrCorrupt naming the job; whatever the format.
func FuzzDecodeStored(f *testing.F) {
	for _, r := range sampleRecords() {
		b, _ := r.encode()
		f.Add(b)
		j, _ := json.Marshal(r)
		f.Add(j)
	}
	f.Add([]byte(`{"s":"running","a":-1,"ta":1,"ts":1}`))
	f.Add([]byte(`{"s":"finished","o":"lost"}`))
	f.Add([]byte{formatBinary1, 1, 0, 2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeStored(b, "t", "id")
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "t/id") {
				t.Fatalf("error %v: want ErrCorrupt naming the job", err)
			}
			return
		}
		again, err := r.encode()
		if errors.Is(err, ErrDataTooLarge) {
			return
		}
		if err != nil {
			t.Fatalf("a record read from the store cannot be stored: %v\n%+v", err, r)
		}
		r2, err := decodeStored(again, "t", "id")
		if err != nil {
			t.Fatalf("a record stored again does not read back: %v\n%+v", err, r)
		}
		// JSON reads empty data as empty, format 1 as nil.
		for _, p := range []*[]byte{(*[]byte)(&r.Data), (*[]byte)(&r.Result), (*[]byte)(&r.Progress)} {
			if len(*p) == 0 {
				*p = nil
			}
		}
		// Stored again, a running record of an earlier version is one of
		// this version (its entry is moved with it).
		r.legacy = false
		if !reflect.DeepEqual(r2, r) {
			t.Fatalf("stored again, the record reads\n%+v\nnot\n%+v", r2, r)
		}
	})
}

// A type's stored settings decode, and encode back to what decodes the
// same, or are ErrCorrupt naming the type.
func FuzzDecodeSettings(f *testing.F) {
	def, _ := json.Marshal(DefaultTypeSettings())
	f.Add(def)
	f.Add([]byte(`{"activity_timeout":1,"retry":{"max_attempts":-1,"backoff":"x"},"paused":true}`))
	f.Add([]byte("garbage"))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeSettings(b, "t")
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `type "t"`) {
				t.Fatalf("error %v: want ErrCorrupt naming the type", err)
			}
			return
		}
		again, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := decodeSettings(again, "t")
		if err != nil || !reflect.DeepEqual(s2, s) {
			t.Fatalf("settings %+v stored again read %+v, %v", s, s2, err)
		}
	})
}

// Any claim value makes reclaim answer leases of the claimed jobs that
// the claim's lock holds, or an error; never a panic, never another job.
func FuzzReclaim(f *testing.F) {
	q := fuzzQueue(f)
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if _, err := q.Add(ctx, q.db, NewJob{Type: "t", ID: id}); err != nil {
			f.Fatal(err)
		}
	}
	ls, err := q.Accept(ctx, "t", AcceptOptions{Max: 1})
	if err != nil || len(ls) != 1 {
		f.Fatalf("accept: %v, %v", ls, err)
	}
	held, lock := ls[0].ID, ls[0].Lock
	claim, _ := json.Marshal([]string{"a", "b", "nosuch"})
	f.Add(claim, lock)
	f.Add([]byte(`["a","a"]`), lock)
	f.Add([]byte(`{"a":1}`), lock)
	f.Add([]byte(`[1,null]`), "other")
	f.Fuzz(func(t *testing.T, b []byte, l string) {
		fuzzInTx(t, q, func(tx kv.Tx) error {
			res, err := q.reclaim(tx, "t", l, b)
			if err != nil {
				return nil
			}
			var ids []string
			if err := json.Unmarshal(b, &ids); err != nil {
				t.Fatalf("reclaim read %q, which is not a list of ids", b)
			}
			n := 0
			for _, id := range ids {
				if id == held {
					n++
				}
			}
			if l != lock {
				n = 0
			}
			if len(res.leases) != n {
				t.Fatalf("claim %q under lock %q: %d leases, want %d", b, l, len(res.leases), n)
			}
			for _, le := range res.leases {
				if le.ID != held || le.Lock != lock || le.State != Running {
					t.Fatalf("claim %q: lease %+v", b, le)
				}
			}
			return nil
		})
	})
}

// The keys of the running and finished indexes parse back to the time and
// id they were made from; any other key under an index parses as the
// tuple layer reads it, or is refused.
func FuzzParseIndexEntry(f *testing.F) {
	f.Add("id", int64(0), []byte(nil))
	f.Add("a\x00b", int64(math.MinInt64), []byte{0x15, 0x01, 0x02, 'x', 0x00})
	f.Add("", int64(math.MaxInt64), []byte{0x00})
	f.Fuzz(func(t *testing.T, id string, at int64, junk []byte) {
		q := &Queue{k: newKeys(tuple.FromBytes(DefaultPrefix))}
		// The running index's entries carry a timeout and a version.
		if at > 0 {
			if got, ok := q.entryID("t", Running, q.k.active("t", at, -at, id)); !ok || got != id {
				t.Fatalf("entryID of a running entry of %q: %q, %v", id, got, ok)
			}
		}
		for _, ix := range []struct {
			state State
			key   []byte
			sub   tuple.Subspace
			parse func(tuple.Subspace, []byte) (int64, string, bool)
		}{
			{Running, q.k.legacyActive("t", at, id), q.k.legacyActiveType("t"), parseIndexEntry},
			{Finished, q.k.finished("t", at, id), q.k.finishedType("t"), parseFinished},
		} {
			sub, parseIndexEntry := ix.sub, ix.parse
			gotAt, gotID, ok := parseIndexEntry(sub, ix.key)
			if !ok || gotAt != at || gotID != id {
				t.Fatalf("%s entry (%d, %q) parsed as (%d, %q, %v)", ix.state, at, id, gotAt, gotID, ok)
			}
			if got, ok := q.entryID("t", ix.state, ix.key); !ok || got != id {
				t.Fatalf("entryID of a %s entry of %q: %q, %v", ix.state, id, got, ok)
			}
			other := append(append([]byte(nil), sub.Bytes()...), junk...)
			gotAt, gotID, ok = parseIndexEntry(sub, other)
			_, idOK := q.entryID("t", ix.state, other)
			if ix.state == Running {
				// An entry of earlier versions is read as one when it is
				// none of this version's.
				if _, err := q.k.activeType("t").Unpack(other); err == nil {
					continue
				}
			}
			if ok != idOK {
				t.Fatalf("% x: parseIndexEntry says %v, entryID %v", junk, ok, idOK)
			}
			if !ok {
				continue
			}
			tu, err := sub.Unpack(other)
			if ix.state == Finished && err == nil && len(tu) == 3 {
				tu = tu[1:] // (lane, finished, id)
			}
			if err != nil || len(tu) != 2 || tu[0] != gotAt || tu[1] != gotID {
				t.Fatalf("% x read as (%d, %q); the tuple layer reads %v (%v)", junk, gotAt, gotID, tu, err)
			}
		}
	})
}

// A pending key parses, through the fast path or the tuple layer, to
// values whose key parses the same; entryID agrees.
func FuzzParsePendingEntry(f *testing.F) {
	f.Add([]byte{0x15, 0x01, 0x15, 0x02, 0x02, 'i', 0x00})
	f.Add([]byte{0x00})
	f.Add([]byte{0x15, 0x00, 0x14, 0x02, 'x', 0x00, 0xff, 0x00}) // an integer with a leading zero byte
	f.Add([]byte{0x1d, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x14, 0x02, 0x00})
	f.Fuzz(func(t *testing.T, junk []byte) {
		q := &Queue{k: newKeys(tuple.FromBytes(DefaultPrefix))}
		key := append(append([]byte(nil), q.k.of("t").pending...), junk...)
		z, neg, sched, id, err := q.parsePending("t", key)
		gotID, ok := q.entryID("t", Pending, key)
		if (err == nil) != ok || ok && gotID != id {
			t.Fatalf("% x: parsePending %q, %v; entryID %q, %v", junk, id, err, gotID, ok)
		}
		if err != nil {
			return
		}
		again := q.k.pending("t", z, int(-neg), sched, id)
		z2, n2, s2, id2, err := q.parsePending("t", again)
		if err != nil || z2 != z || n2 != neg || s2 != sched || id2 != id {
			t.Fatalf("% x read as (%d, %d, %q); made again and read: (%d, %d, %q), %v", junk, neg, sched, id, n2, s2, id2, err)
		}
	})
}

// A key of the type registry names the type it was made for; any other
// key under the registry names one only as the tuple layer reads it.
func FuzzParseTypeKey(f *testing.F) {
	f.Add("email", []byte{0x02, 'x', 0x00})
	f.Add("", []byte{0x15, 0x07})
	f.Add("a\x00b", []byte{0x02, 'a', 0x00, 0x02, 'b', 0x00})
	f.Fuzz(func(t *testing.T, name string, junk []byte) {
		k := newKeys(tuple.FromBytes(DefaultPrefix))
		sub := k.types()
		if got, ok := parseTypeKey(sub, k.typ(name)); !ok || got != name {
			t.Fatalf("type key of %q parsed as %q, %v", name, got, ok)
		}
		other := append(append([]byte(nil), sub.Bytes()...), junk...)
		got, ok := parseTypeKey(sub, other)
		if !ok {
			return
		}
		tu, err := sub.Unpack(other)
		if err != nil || len(tu) != 1 || tu[0] != got {
			t.Fatalf("% x read as %q; the tuple layer reads %v (%v)", junk, got, tu, err)
		}
	})
}

// The header Remove reads from a record it cannot decode gives, for any
// record in format 1, the index entries the record has in each state; any
// bytes give entries of the job or none, never a panic.
func FuzzHeaderEntries(f *testing.F) {
	f.Add(uint8(0), int64(3), int64(1_700_000_000_000), int64(5), int64(6), []byte(nil))
	f.Add(uint8(2), int64(math.MinInt32), int64(math.MinInt64), int64(math.MaxInt64), int64(-1), []byte{0x7f})
	f.Fuzz(func(t *testing.T, st uint8, prio, sched, expires, finished int64, junk []byte) {
		q := &Queue{k: newKeys(tuple.FromBytes(DefaultPrefix))}
		r := &record{State: stateCodes[1+int(st)%3], Priority: int(int32(prio)), ScheduledAt: sched, ExpiresAt: expires, FinishedAt: finished}
		if st&0x80 != 0 {
			r.Key, r.Shard = "tenant", int(st)%MaxZones
		}
		b, err := r.encode()
		if err != nil {
			t.Fatal(err)
		}
		want := map[State][]byte{
			Pending:  q.k.pending("t", r.zone(), r.Priority, sched, "id"),
			Running:  q.k.active("t", r.activityTimeoutMs(), 0, "id"),
			Finished: q.k.finished("t", finished, "id"),
		}
		// Format 1 has no zone.
		want1 := map[State][]byte{Pending: q.k.pending("t", zone{}, r.Priority, sched, "id"), Running: q.k.legacyActive("t", expires, "id"), Finished: want[Finished]}
		// A record of format 1 has its running entry, by deadline, made
		// from the header too.
		b1, err := r.encodeAs(formatBinary1)
		if err != nil {
			t.Fatal(err)
		}
		// Whatever follows the header, as when the rest is damaged.
		spoilt := append(b[:len(b)-1:len(b)-1], junk...)
		spoilt1 := append(b1[:len(b1)-1:len(b1)-1], junk...)
		for _, v := range [][]byte{b, spoilt, b1, spoilt1} {
			got := q.headerEntries("t", "id", v)
			if len(got) != 4 {
				t.Fatalf("% x: %d entries", v, len(got))
			}
			w := want
			if v[0] == formatBinary1 {
				w = want1
			}
			// A pending job's entry is in the ready index or the
			// scheduled one.
			scheduled := q.k.scheduled("t", r.zone(), r.Priority, sched, "id")
			if v[0] == formatBinary1 {
				scheduled = q.k.scheduled("t", zone{}, r.Priority, sched, "id")
			}
			for _, e := range got {
				if string(e.key) != string(w[e.state]) && (e.state != Pending || string(e.key) != string(scheduled)) {
					t.Fatalf("% x: %s entry % x, want % x", v, e.state, e.key, w[e.state])
				}
			}
		}
		for n := range len(junk) {
			for _, e := range q.headerEntries("t", "id", junk[:n]) {
				if id, ok := q.entryID("t", e.state, e.key); !ok || id != "id" {
					t.Fatalf("% x: %s entry % x does not name the job", junk[:n], e.state, e.key)
				}
			}
		}
	})
}

// Whatever key the pending index holds, OldestDue answers without an
// error; whatever cursor a client sends, List answers a page or
// ErrInvalidJob.
func FuzzListAndOldestDueOverAnyKey(f *testing.F) {
	q := fuzzQueue(f)
	ctx := context.Background()
	if _, err := q.Add(ctx, q.db, NewJob{Type: "t", ID: "a"}); err != nil {
		f.Fatal(err)
	}
	f.Add([]byte{0x00}, "")
	f.Add([]byte{0x15, 0x01}, "AA")
	f.Add([]byte{0x15, 0x01, 0x15, 0x01, 0x02, 'z', 0x00}, "not base64!")
	f.Fuzz(func(t *testing.T, junk []byte, cursor string) {
		key := append(append([]byte(nil), q.k.of("t").pending...), junk...)
		fuzzInTx(t, q, func(tx kv.Tx) error {
			if len(key) <= kv.MaxKeySize {
				tx.Set(key, []byte{0x7f})
			}
			if _, err := q.OldestDue(ctx, tx, "t"); err != nil {
				t.Fatalf("oldest due with % x: %v", junk, err)
			}
			for _, s := range []State{Pending, Running, Finished} {
				p, err := q.List(ctx, tx, "t", ListOptions{State: s, Limit: 2, Cursor: cursor})
				if err != nil && !errors.Is(err, ErrInvalidJob) {
					t.Fatalf("list %s with % x after %q: %v", s, junk, cursor, err)
				}
				if p != nil {
					for _, u := range p.Unreadable {
						if !errors.Is(u.Err, ErrCorrupt) {
							t.Fatalf("unreadable %+v", u)
						}
					}
				}
			}
			return nil
		})
	})
}

// A key of a type's history parses to the minute and kind it was made
// from; any other key under the history parses as the tuple layer reads
// it — (hour, lane, minute, kind), the hour the minute's, the lane in
// range — or is refused.
func FuzzParseHistory(f *testing.F) {
	f.Add(int64(0), int64(1), 3, []byte(nil))
	f.Add(int64(math.MinInt64), int64(math.MaxInt64), 15, []byte{0x15, 0x01, 0x15, 0x02, 0x15, 0x10, 0x15, 0x01})
	f.Add(int64(-1), int64(-1), 0, []byte{0x13, 0xfe, 0x14, 0x13, 0xfe, 0x15, 0x01})
	f.Add(int64(0), int64(0), 0, []byte{0x15, 0x00, 0x14, 0x14, 0x15, 0x01}) // an hour of 0 in two bytes
	f.Fuzz(func(t *testing.T, minute, kind int64, lane int, junk []byte) {
		k := newKeys(tuple.FromBytes(DefaultPrefix))
		if lane >= 0 && lane < historyLanes {
			key := k.history("t", minute, historyKind(kind), lane)
			gotMinute, gotKind, ok := k.parseHistory("t", key)
			if !ok || gotMinute != minute || gotKind != historyKind(kind) {
				t.Fatalf("(%d, %d, %d) parsed as (%d, %d, %v)", minute, kind, lane, gotMinute, gotKind, ok)
			}
			if hour, ok := k.historyHourOf("t", key); !ok || hour != floorDiv(minute, 60) {
				t.Fatalf("the hour of minute %d read as %d, %v", minute, hour, ok)
			}
		}
		sub := k.historyType("t")
		other := append(append([]byte(nil), sub.Bytes()...), junk...)
		gotMinute, gotKind, ok := k.parseHistory("t", other)
		tu, err := sub.Unpack(other)
		want := err == nil && len(tu) == 4
		if want {
			h, ok0 := tu[0].(int64)
			l, ok1 := tu[1].(int64)
			m, ok2 := tu[2].(int64)
			c, ok3 := tu[3].(int64)
			want = ok0 && ok1 && ok2 && ok3 && l >= 0 && l < historyLanes && h == floorDiv(m, 60)
			if want && ok && (m != gotMinute || historyKind(c) != gotKind) {
				t.Fatalf("% x read as (%d, %d); the tuple layer reads %v", junk, gotMinute, gotKind, tu)
			}
		}
		if ok != want {
			t.Fatalf("% x: parseHistory says %v; the tuple layer reads %v (%v)", junk, ok, tu, err)
		}
		// Any key lies in the range of the hour historyHourOf says, or
		// before every hour's.
		h, in := k.historyHourOf("t", other)
		switch {
		case !in && bytes.Compare(other, k.historyHour("t", math.MinInt64)) >= 0:
			t.Fatalf("% x: before every hour, says historyHourOf", junk)
		case in && bytes.Compare(other, k.historyHour("t", h)) < 0:
			t.Fatalf("% x: in hour %d, before its range", junk, h)
		case in && h < math.MaxInt64 && bytes.Compare(other, k.historyHour("t", h+1)) >= 0:
			t.Fatalf("% x: in hour %d, after its range", junk, h)
		case ok && h != floorDiv(gotMinute, 60):
			t.Fatalf("% x: a counter of minute %d, in hour %d's range", junk, gotMinute, h)
		}
	})
}
