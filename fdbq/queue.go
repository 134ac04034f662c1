package fdbq

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// DefaultPrefix is the key prefix of a Queue when Options.Prefix is empty.
var DefaultPrefix = tuple.Tuple{"jobstage"}.MustPack()

// Options configure a Queue.
type Options struct {
	// Prefix is the key prefix of everything the queue stores, so several
	// deployments can share one store. Default: DefaultPrefix.
	Prefix []byte
	// Now is the clock (default time.Now); tests inject their own.
	Now func() time.Time
	// WaitWatches bounds the watches on job records that the queue's
	// waits (Wait, WaitOne) hold at once; past it they watch their types'
	// change keys, one watch a type (see Wait). Default (0):
	// DefaultWaitWatches. Negative: none, every wait watches a change key.
	WaitWatches int
	// Logger gets what the queue reports on its own, such as a pending
	// job that Accept skips because its record does not decode. Default:
	// slog.Default() at the time of each message.
	Logger *slog.Logger
	// Rand returns a random integer in [0, n) for the queue's random
	// choices (the zone an accept reads); it must be safe for concurrent
	// use. Default: math/rand/v2's IntN. Simulations seed their own.
	Rand func(n int) int
	// EventRetention is how long a type's event log keeps an event (see
	// Follow); a monitor clears older ones. Default (0):
	// DefaultEventRetention.
	EventRetention time.Duration
	// HistoryRetention is how long a type's history (History) keeps a
	// minute at least; a monitor clears the hours that ended this long
	// ago. Default (0 or less): DefaultHistoryRetention.
	HistoryRetention time.Duration
}

// Queue is the jobs layer over a kv store. Its operations that take a
// kv.Transactor run alone (pass the *kv.DB) or inside the caller's
// transaction (pass the kv.Tx), so an application can add a job, or finish
// one, atomically with its own writes.
type Queue struct {
	db      *kv.DB
	k       keys
	now     func() time.Time
	watches *watchShare
	log     *slog.Logger
	// unreadable holds the pending entries Accept found it cannot take.
	unreadable unreadableJobs
	// zones is what accepts know of each type's zones with ready jobs.
	zones *zoneCache
	intn  func(int) int
	// interests are the queue's holds on its types' change keys;
	// eventHolds those of its followers on their types' event logs.
	interests, eventHolds *interests
	eventRetention        time.Duration
	historyRetention      time.Duration
}

// New returns a Queue over db.
func New(db *kv.DB, opts Options) *Queue {
	prefix := opts.Prefix
	if len(prefix) == 0 {
		prefix = DefaultPrefix
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	waitWatches := opts.WaitWatches
	switch {
	case waitWatches == 0:
		waitWatches = DefaultWaitWatches
	case waitWatches < 0:
		waitWatches = 0
	}
	intn := opts.Rand
	if intn == nil {
		intn = mrand.IntN
	}
	return &Queue{db: db, k: newKeys(tuple.FromBytes(prefix)), now: now, watches: newWatchShare(waitWatches), log: opts.Logger,
		zones: &zoneCache{}, intn: intn, interests: newInterests(), eventHolds: newEventHolds(),
		eventRetention:   cmp.Or(opts.EventRetention, DefaultEventRetention),
		historyRetention: cmp.Or(max(opts.HistoryRetention, 0), DefaultHistoryRetention)}
}

// logger is Options.Logger, or the default logger.
func (q *Queue) logger() *slog.Logger {
	if q.log != nil {
		return q.log
	}
	return slog.Default()
}

// DB returns the store the queue runs on.
func (q *Queue) DB() *kv.DB { return q.db }

func (q *Queue) nowMs() int64 { return q.now().UnixMilli() }

// Now is the queue's clock (Options.Now): the time its jobs are
// scheduled by.
func (q *Queue) Now() time.Time { return q.now() }

// newToken returns 16 random bytes in hex: job ids and locks.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// --- records and indexes ---

// load reads a job record with a read conflict; nil if absent, ErrCorrupt
// if it does not decode.
func (q *Queue) load(tx kv.ReadTx, typ, id string) (*record, error) {
	b, err := tx.Get(q.k.job(typ, id))
	if err != nil || b == nil {
		return nil, err
	}
	return decodeStored(b, typ, id)
}

// maxInlineRecord bounds the records copied into their pending entries: a
// larger one would make Accept's window scan read more than it saves.
const maxInlineRecord = 2048

// put writes rec as the new state of the job, replacing old (nil: a new
// job), and keeps every index and counter in step. All state changes go
// through put and drop, so the indexes can never disagree with the
// records.
//
// A running job keeps its activity entry while it stays running, unless
// rec.renew asks for a new one (Accept, Heartbeat): then the entry is
// keyed by this transaction's read version and holds the token of the
// stamp that gets the commit's versionstamp, which the monitor compares
// with its own read versions (rec.stampToken: the caller writes that
// stamp, once for all it renews).
func (q *Queue) put(tx kv.Tx, typ, id string, old, rec *record) error {
	return q.putFrom(tx, typ, id, old, rec, nil)
}

// putFrom is put for a pending job whose index entry the caller read at
// key from (nil: not known). A pending job's entry is in the ready index
// or the scheduled index, and Accept moves entries between them without
// rewriting the record, so without from both keys are cleared.
func (q *Queue) putFrom(tx kv.Tx, typ, id string, old, rec *record, from []byte) error {
	renew := rec.State == Running && (rec.renew || old == nil || old.State != Running || old.legacy)
	if renew {
		rv, err := tx.ReadVersion()
		if err != nil {
			return err
		}
		rec.ActiveVersion, rec.legacy = rv, false
	}
	b, err := rec.encode()
	if err != nil {
		return err
	}
	if old != nil && old.State == Pending && from != nil {
		tx.Clear(from)
	} else if old != nil && (renew || rec.State != Running) {
		q.unindex(tx, typ, id, old)
	}
	switch rec.State {
	case Pending:
		// A small record rides along in its pending entry, so that Accept,
		// which reads the entries anyway, need not read the record too.
		var copyOf []byte
		if len(b) <= maxInlineRecord {
			copyOf = b
		}
		// Due by this process's clock: the ready index; not yet: the
		// scheduled index, from which an accept takes it once due.
		z := rec.zone()
		if rec.ScheduledAt <= q.nowMs() {
			tx.Set(q.k.pending(typ, z, rec.Priority, rec.ScheduledAt, id), copyOf)
			if err := q.markZone(tx, typ, z, rec.marked); err != nil {
				return err
			}
		} else {
			tx.Set(q.k.scheduled(typ, z, rec.Priority, rec.ScheduledAt, id), copyOf)
			rec.marked.bump(tx, q.k.watch(typ))
		}
	case Running:
		if renew {
			token := rec.stampToken
			if token == 0 {
				token = newStampToken()
				q.stamp(tx, typ, rec.ActiveVersion, token)
			}
			tx.Set(q.k.active(typ, rec.activityTimeoutMs(), rec.ActiveVersion, id), stampTokenValue(token))
		}
	case Finished:
		tx.Set(q.k.finished(typ, rec.FinishedAt, id), nil)
	}
	if old == nil || old.State != rec.State {
		if old != nil {
			tx.Add(q.k.countShard(typ, old.State, id), -1)
		}
		tx.Add(q.k.countShard(typ, rec.State, id), 1)
	}
	q.countKeyRunning(tx, typ, old, rec)
	q.countHistory(tx, typ, id, old, rec)
	tx.Set(q.k.job(typ, id), b)
	// The job's event before those of the dependents its change moves,
	// so that the log, within one commit too, has causes before effects.
	if err := q.logChange(tx, typ, id, rec); err != nil {
		return err
	}
	if rec.Workflow {
		// The workflow's dependents learn of the finish in its
		// transaction: nothing scans for ready work.
		switch {
		case rec.State == Finished && (old == nil || old.State != Finished):
			if err := q.workflowStep(tx, id, rec.Outcome); err != nil {
				return err
			}
		case rec.State != Finished && old != nil && old.State == Finished:
			if err := q.workflowStep(tx, id, ""); err != nil {
				return err
			}
		}
	}
	return nil
}

// stamp has the commit write its versionstamp to the stamp (rv, token):
// rv is this transaction's read version, token one that no other
// transaction uses, so the stamp holds this commit's version exactly.
func (q *Queue) stamp(tx kv.Tx, typ string, rv, token int64) {
	tx.SetVersionstampedValue(q.k.stamp(typ, rv, token), activityValue[:])
}

// newStampToken returns a random token for a transaction's stamp (> 0).
func newStampToken() int64 { return int64(mrand.Uint64()>>1) | 1 }

// stampTokenValue is an activity entry's value: its stamp's token.
func stampTokenValue(token int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(token))
}

// stampOf returns the key of the stamp an activity entry at read version
// rv with value v names; ok is false when v is no token.
func (k keys) stampOf(typ string, rv int64, v []byte) ([]byte, bool) {
	if len(v) != 8 {
		return nil, false
	}
	return k.stamp(typ, rv, int64(binary.BigEndian.Uint64(v))), true
}

// activityValue is a renewal's stamp as written: a versionstamp
// placeholder, which the commit fills in, then the placeholder's offset
// (0) for SetVersionstampedValue. Never written to.
var activityValue [10 + 4]byte

// parseActivity reads a renewal's stored stamp: the versionstamp of the
// commit that wrote it.
func parseActivity(v []byte) (kv.Versionstamp, bool) {
	var vs kv.Versionstamp
	if len(v) != len(vs) {
		return vs, false
	}
	copy(vs[:], v)
	return vs, true
}

// maxTimeoutMs bounds the timeouts read from activity keys, so that they
// convert to a time.Duration.
const maxTimeoutMs = math.MaxInt64 / int64(time.Millisecond)

// countKeyRunning keeps the running counts of fairness keys (tagKeyRunning)
// in step with a change of a job from old to rec (either nil: none). The
// jobs without a key are not counted: they have no per-key bound.
func (q *Queue) countKeyRunning(tx kv.Tx, typ string, old, rec *record) {
	var was, is *record
	if old != nil && old.State == Running && old.Key != "" {
		was = old
	}
	if rec != nil && rec.State == Running && rec.Key != "" {
		is = rec
	}
	if was != nil && is != nil && was.zone() == is.zone() {
		return
	}
	if was != nil {
		tx.Add(q.k.keyRunning(typ, was.zone()), -1)
	}
	if is != nil {
		tx.Add(q.k.keyRunning(typ, is.zone()), 1)
	}
}

// markZone records in the index of zones with ready jobs that zone z of
// typ has one, which this transaction wrote. Only a zone not marked yet
// gets written, with a bump of the type's watch key that wakes idle
// acceptors: a job added to a zone that has ready jobs writes neither,
// so no key is written by every add of a type. The mark is read with a
// conflict: an accept that finds the zone empty and clears its mark
// (with a read conflict on the zone's range) and this transaction cannot
// both commit unseen by the other, so a zone with ready jobs is never
// left unmarked.
//
// marks, if not nil, is what this transaction marked already: its zones
// are not read again, and a transaction that marks many zones (a batch of
// adds over many keys) bumps the watch key once, not once a zone.
func (q *Queue) markZone(tx kv.Tx, typ string, z zone, marks *zoneMarks) error {
	if marks != nil && marks.zones[z] {
		return nil
	}
	key := q.k.zoneMark(typ, z)
	v, err := tx.Get(key)
	if err != nil {
		return err
	}
	if marks != nil {
		if marks.zones == nil {
			marks.zones = map[zone]bool{}
		}
		marks.zones[z] = true
	}
	if v == nil {
		tx.Set(key, newMarkToken())
		marks.bump(tx, q.k.watch(typ))
	}
	return nil
}

// newMarkToken is the value of a zone's mark: a random token, new each
// time the zone is marked, so that a reader of the zone index tells a
// zone marked again since its last read from one marked all along
// (ReadyZones.Fresh).
func newMarkToken() []byte {
	return binary.LittleEndian.AppendUint64(nil, mrand.Uint64())
}

// markToken reads a mark's token (0: a mark written before tokens).
func markToken(v []byte) uint64 {
	if len(v) != 8 {
		return 0
	}
	return binary.LittleEndian.Uint64(v)
}

// zoneMarks is what one transaction attempt marked: the zones whose marks
// it read or wrote, and whether it bumped the type's watch key. Watchers
// see the key's value change, not by how much, so once a transaction is
// enough. A nil *zoneMarks keeps no record: every bump is made.
type zoneMarks struct {
	zones  map[zone]bool
	bumped bool
}

// bump adds 1 to the watch key unless this transaction did already.
func (m *zoneMarks) bump(tx kv.Tx, watch []byte) {
	if m != nil && m.bumped {
		return
	}
	tx.Add(watch, 1)
	if m != nil {
		m.bumped = true
	}
}

// drop deletes a job.
func (q *Queue) drop(tx kv.Tx, typ, id string, old *record) error {
	if err := q.releaseUnique(tx, typ, id, old.Unique); err != nil {
		return err
	}
	q.countKeyRunning(tx, typ, old, nil)
	q.unindex(tx, typ, id, old)
	tx.Add(q.k.countShard(typ, old.State, id), -1)
	tx.Clear(q.k.job(typ, id))
	if err := q.logChange(tx, typ, id, nil); err != nil {
		return err
	}
	if old.Workflow && old.State != Finished {
		if err := q.workflowStep(tx, id, OutcomeRemoved); err != nil {
			return err
		}
	}
	return nil
}

func (q *Queue) unindex(tx kv.Tx, typ, id string, old *record) {
	switch old.State {
	case Pending:
		tx.Clear(q.k.pending(typ, old.zone(), old.Priority, old.ScheduledAt, id))
		tx.Clear(q.k.scheduled(typ, old.zone(), old.Priority, old.ScheduledAt, id))
	case Running:
		if old.legacy {
			tx.Clear(q.k.legacyActive(typ, old.ExpiresAt, id))
		} else {
			tx.Clear(q.k.active(typ, old.activityTimeoutMs(), old.ActiveVersion, id))
		}
	case Finished:
		tx.Clear(q.k.finished(typ, old.FinishedAt, id))
	}
}

// settings reads a type's settings with a read conflict (a concurrent pause
// or change makes the caller retry and see it).
func (q *Queue) settings(tx kv.ReadTx, typ string) (TypeSettings, error) {
	b, err := tx.Get(q.k.typ(typ))
	if err != nil {
		return TypeSettings{}, err
	}
	if b == nil {
		return TypeSettings{}, errorf(ErrUnknownType, "%q", typ)
	}
	return decodeSettings(b, typ)
}

// --- types ---

// SetType registers a type or changes its settings.
func (q *Queue) SetType(ctx context.Context, tr kv.Transactor, name string, s TypeSettings) error {
	if err := checkName("type name", name); err != nil {
		return err
	}
	if err := s.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return tr.Transact(ctx, func(tx kv.Tx) error {
		tx.Set(q.k.typ(name), b)
		// Acceptors waiting on a paused type wake up on the watch key, an
		// idle monitor on the registry key.
		tx.Add(q.k.watch(name), 1)
		tx.Add(q.k.registry(), 1)
		return nil
	})
}

// DeclareType registers a type with settings s the way a program that
// declares its types at start wants: a type that exists keeps its pause,
// and gets s otherwise. Pausing is an operator's act (Pause, `jobstage
// pause`) that a restart must not undo; s.Paused true pauses the type all
// the same. Stored settings that do not decode (ErrCorrupt) are replaced
// by s, so that the type works again rather than keep the program from
// starting. SetType, by contrast, writes s as it is.
func (q *Queue) DeclareType(ctx context.Context, tr kv.Transactor, name string, s TypeSettings) error {
	if err := checkName("type name", name); err != nil {
		return err
	}
	return tr.Transact(ctx, func(tx kv.Tx) error {
		old, err := q.settings(tx, name)
		switch {
		case err == nil:
			s.Paused = s.Paused || old.Paused
		case errors.Is(err, ErrCorrupt):
			// Settings that do not decode are replaced by the declared
			// ones: they are what the type runs with.
		case !errors.Is(err, ErrUnknownType):
			return err
		}
		return q.SetType(ctx, tx, name, s)
	})
}

// GetType returns a type's settings and counts.
func (q *Queue) GetType(ctx context.Context, tr kv.ReadTransactor, name string) (*TypeInfo, error) {
	if err := checkName("type name", name); err != nil {
		return nil, err
	}
	return kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) (*TypeInfo, error) {
		s, err := q.settings(tx, name)
		if err != nil {
			return nil, err
		}
		return q.typeInfo(tx, name, s)
	})
}

func (q *Queue) typeInfo(tx kv.ReadTx, name string, s TypeSettings) (*TypeInfo, error) {
	info := &TypeInfo{Name: name, Settings: s}
	// One read of the type's counters, every state's shards in it.
	r, err := kv.PrefixRange(q.k.root.MustPack(tuple.Tuple{tagCount, name}))
	if err != nil {
		return nil, err
	}
	kvs, err := tx.GetRange(r, kv.RangeOptions{})
	if err != nil {
		return nil, err
	}
	for _, e := range kvs {
		switch n := kv.DecodeInt64(e.Value); {
		case bytes.HasPrefix(e.Key, q.k.count(name, Pending)):
			info.Pending += n
		case bytes.HasPrefix(e.Key, q.k.count(name, Running)):
			info.Running += n
		case bytes.HasPrefix(e.Key, q.k.count(name, Finished)):
			info.Finished += n
		}
	}
	return info, nil
}

// Types lists the registered types with their counts. A type whose
// settings do not decode is listed with Err set (ErrCorrupt) and zero
// Settings, and its counts; a key of the registry that names no type, with
// Err alone. Either way the other types are listed.
func (q *Queue) Types(ctx context.Context, tr kv.ReadTransactor) ([]*TypeInfo, error) {
	return kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) ([]*TypeInfo, error) {
		sub := q.k.types()
		kvs, err := tx.GetRange(sub.Range(), kv.RangeOptions{})
		if err != nil {
			return nil, err
		}
		out := make([]*TypeInfo, 0, len(kvs))
		for _, e := range kvs {
			name, ok := parseTypeKey(sub, e.Key)
			if !ok {
				out = append(out, &TypeInfo{Err: corruptf("malformed type key %q", e.Key)})
				continue
			}
			s, serr := decodeSettings(e.Value, name)
			if serr != nil {
				s = TypeSettings{}
			}
			info, err := q.typeInfo(tx, name, s)
			if err != nil {
				return nil, err
			}
			info.Err = serr
			out = append(out, info)
		}
		return out, nil
	})
}

// parseTypeKey reads the name of a key of the type registry, or reports
// false when the key is not one fdbq writes.
func parseTypeKey(sub tuple.Subspace, key []byte) (string, bool) {
	t, err := sub.Unpack(key)
	if err != nil || len(t) != 1 {
		return "", false
	}
	name, ok := t[0].(string)
	return name, ok
}

// Pause stops acceptance of a type's jobs; adds still work.
func (q *Queue) Pause(ctx context.Context, tr kv.Transactor, name string) error {
	return q.setPaused(ctx, tr, name, true)
}

// Resume undoes Pause.
func (q *Queue) Resume(ctx context.Context, tr kv.Transactor, name string) error {
	return q.setPaused(ctx, tr, name, false)
}

func (q *Queue) setPaused(ctx context.Context, tr kv.Transactor, name string, paused bool) error {
	if err := checkName("type name", name); err != nil {
		return err
	}
	return tr.Transact(ctx, func(tx kv.Tx) error {
		s, err := q.settings(tx, name)
		if err != nil {
			return err
		}
		s.Paused = paused
		b, err := json.Marshal(s)
		if err != nil {
			return err
		}
		tx.Set(q.k.typ(name), b)
		tx.Add(q.k.watch(name), 1)
		return nil
	})
}
