package embedded

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/jobstage/jobstage/kv"
)

// Defaults of Options.
const (
	DefaultTransactionLifetime = 5 * time.Second
	DefaultMaxBatch            = 1024
	DefaultMaxWatches          = 10_000
)

// Options configure a Store.
type Options struct {
	// InMemory keeps everything in memory (Pebble's in-memory filesystem):
	// nothing survives Close. For tests.
	InMemory bool
	// TransactionLifetime is how long a transaction may live from its read
	// version to its commit (FoundationDB: 5 s). Tests shorten it.
	TransactionLifetime time.Duration
	// MaxBatch bounds how many transactions one commit round resolves and
	// writes as one synced batch.
	MaxBatch int
	// MaxWatches bounds the watches outstanding at once (FoundationDB's
	// default is 10,000); past it Watch fails with too_many_watches.
	MaxWatches int
	// NoSync acknowledges commits without waiting for their fsync, or even
	// for their log record to reach the operating system: a crash of the
	// process or of the machine may lose the last acknowledged commits.
	// What survives a crash is still a prefix of the commits, in commit
	// order, whole transactions only, and versionstamps are still never
	// handed out twice (each Open moves the commit version NoSyncVersionGap
	// ahead and syncs that before the first commit). For benchmarks and
	// tests that do not need durability.
	NoSync bool
	// CacheSize is the bytes of Pebble's block cache, which keeps the
	// store's recently read blocks decompressed in memory; default
	// DefaultCacheSize; negative: Pebble's own default (8 MiB). Memory is
	// taken as blocks are read, up to the size.
	CacheSize int64

	// fs, when set, is the filesystem Pebble uses (tests inject failures).
	fs vfs.FS
}

// DefaultCacheSize is Options.CacheSize's default. With Pebble's own 8 MiB,
// a store of a million jobs read most of its job records from the
// operating system's page cache, a system call and a decompression a
// block: a fifth of a pipeline's CPU.
const DefaultCacheSize = 256 << 20

// NoSyncVersionGap is how far each Open with Options.NoSync moves the
// commit version ahead of the last one on disk: commits lost in a crash
// had versions above that one, and the versions of the next run start
// beyond theirs as long as a crash loses fewer commits than this.
const NoSyncVersionGap = 1 << 32

// System keys, outside the user keyspace (which ends at 0xff).
var (
	versionKey = []byte("\xff/jobstage/version")
	formatKey  = []byte("\xff/jobstage/format")
)

const formatValue = "jobstage-embedded/1"

// Store is the embedded backend: FoundationDB's transaction semantics on a
// Pebble database in one process. See the package documentation.
type Store struct {
	opts  Options
	dir   string
	lock  *dirLock
	db    *pebble.DB
	wopts *pebble.WriteOptions

	commitCh chan *commitReq
	syncCh   chan *syncBatch
	stop     chan struct{} // closed by Close: no new commits
	synced   chan struct{} // closed when syncLoop has exited
	done     chan struct{} // closed when the committer and syncLoop have exited
	watches  *watchSet
	skip     *skipCache

	// Owned by the committer goroutine.
	res         *resolver
	nextVersion uint64
	// keysScratch and liveScratch hold one transaction's written keys
	// while the committer resolves it, reused from one to the next.
	keysScratch, liveScratch []string

	// closeMu is held for reading by every read of Pebble and for writing
	// by Close, so Close never pulls the database from under a read.
	// notifyMu makes publishing a version and firing its watches one step
	// for registerWatches.
	notifyMu sync.Mutex

	// open holds the transactions with watches not yet registered, for
	// Close to fail.
	openMu sync.Mutex
	open   map[*txn]struct{}

	closeMu   sync.RWMutex
	closed    bool // REQUIRES: closeMu or mu held to read; both to write
	closeOnce sync.Once
	closeErr  error

	mu struct {
		sync.Mutex
		// version is the last published commit version: transactions that
		// start now read at it.
		version uint64
		// current is the snapshot of version; live holds it and every
		// older snapshot still referenced, oldest first.
		current *snapRef
		live    []*snapRef
		broken  error // set when a write to Pebble failed; the store refuses commits
		// refusing: Close has begun; no transaction begins.
		refusing bool
	}
}

// snapRef is a reference-counted Pebble snapshot that shows exactly the
// state at one commit version. Transactions that start at the same version
// share it.
type snapRef struct {
	version uint64
	snap    *pebble.Snapshot
	refs    int
}

var _ kv.AtMostOnceBackend = (*Store)(nil)

// CommitsAtMostOnce implements kv.AtMostOnceBackend: the store answers
// commit_unknown_result only when a write or sync of its data directory
// failed, and it then refuses every later transaction (Begin and Commit
// fail), so no retry can apply a transaction twice. DB.Transact writes it
// no commit markers.
func (s *Store) CommitsAtMostOnce() bool { return true }

// Open opens (creating if needed) the store in dir. With opts.InMemory, dir
// is ignored. A directory already opened by another Store, in this or
// another process, gives an error matching ErrLocked.
func Open(dir string, opts Options) (*Store, error) {
	if opts.TransactionLifetime <= 0 {
		opts.TransactionLifetime = DefaultTransactionLifetime
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.MaxBatch > 65536 {
		return nil, errors.New("kv/embedded: MaxBatch must be at most 65536 (the versionstamp's batch order is 2 bytes)")
	}
	if opts.MaxWatches <= 0 {
		opts.MaxWatches = DefaultMaxWatches
	}
	s := &Store{
		opts:     opts,
		dir:      dir,
		commitCh: make(chan *commitReq, opts.MaxBatch),
		syncCh:   make(chan *syncBatch, 64),
		synced:   make(chan struct{}),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		res:      newResolver(),
		watches:  newWatchSet(opts.MaxWatches),
		skip:     newSkipCache(),
		wopts:    pebble.Sync,
	}
	if opts.NoSync {
		s.wopts = pebble.NoSync
	}
	cacheSize := opts.CacheSize
	if cacheSize == 0 {
		cacheSize = DefaultCacheSize
	}
	popts := &pebble.Options{
		Logger:       quietLogger{},
		MemTableSize: 64 << 20,
	}
	if cacheSize > 0 {
		popts.Cache = pebble.NewCache(cacheSize)
		// Pebble takes its own reference; the store's goes now, and the
		// cache is freed when Pebble closes.
		defer popts.Cache.Unref()
	}
	dir, err := s.pebbleFS(dir, popts)
	if err != nil {
		return nil, err
	}
	db, err := pebble.Open(dir, popts)
	if err != nil {
		s.lock.release()
		if errors.Is(err, pebble.ErrCorruption) {
			return nil, fmt.Errorf("kv/embedded: data directory %s is corrupt: %w", s.dir, err)
		}
		return nil, fmt.Errorf("kv/embedded: open data directory %s (damaged or not a jobstage store?): %w", s.dir, err)
	}
	s.db = db
	if err := s.recover(); err != nil {
		db.Close()
		s.lock.release()
		return nil, err
	}
	if opts.NoSync {
		if err := s.skipVersions(NoSyncVersionGap); err != nil {
			db.Close()
			s.lock.release()
			return nil, err
		}
	}
	s.nextVersion = s.mu.version + 1
	s.mu.current = &snapRef{version: s.mu.version, snap: db.NewSnapshot()}
	s.mu.live = []*snapRef{s.mu.current}
	go s.commitLoop()
	go s.syncLoop()
	return s, nil
}

// pebbleFS sets the file system Pebble opens the store on and returns the
// directory to open there: "" for a file system in memory (opts.InMemory,
// or one a test gave), else dir, created if needed and locked against
// other Stores. The lock is s.lock, which the caller releases if the open
// fails later.
func (s *Store) pebbleFS(dir string, popts *pebble.Options) (string, error) {
	if s.opts.fs != nil {
		popts.FS = s.opts.fs
		return "", nil
	}
	if s.opts.InMemory {
		popts.FS = vfs.NewMem()
		return "", nil
	}
	if dir == "" {
		return "", errors.New("kv/embedded: no data directory given")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("kv/embedded: create data directory: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return "", err
	}
	s.lock = lock
	// Left unset, FS would be Pebble's default: vfs.Default wrapped in
	// a disk-health checker, whose ticker goroutine only a successful
	// Open's DB.Close stops, so every failed Open (a corrupt or foreign
	// directory) would leave one running. The checker's only output is
	// EventListener.DiskSlow, which the store does not set.
	popts.FS = vfs.Default
	return dir, nil
}

// recover reads the last commit version and checks the format marker.
func (s *Store) recover() error {
	format, err := s.getLatest(formatKey)
	if err != nil {
		return fmt.Errorf("kv/embedded: read format of %s: %w", s.dir, err)
	}
	ver, err := s.getLatest(versionKey)
	if err != nil {
		return fmt.Errorf("kv/embedded: read commit version of %s: %w", s.dir, err)
	}
	switch {
	case format == nil && ver == nil:
		// A new store; the format marker goes in with version 0.
		b := s.db.NewBatch()
		defer b.Close()
		_ = b.Set(formatKey, []byte(formatValue), nil)
		_ = b.Set(versionKey, make([]byte, 8), nil)
		if err := b.Commit(pebble.Sync); err != nil {
			return fmt.Errorf("kv/embedded: initialise %s: %w", s.dir, err)
		}
	case !bytes.Equal(format, []byte(formatValue)):
		return fmt.Errorf("kv/embedded: %s holds format %q, not %q", s.dir, format, formatValue)
	case len(ver) != 8:
		return fmt.Errorf("kv/embedded: %s is corrupt: commit version has %d bytes", s.dir, len(ver))
	default:
		s.mu.version = binary.BigEndian.Uint64(ver)
	}
	return nil
}

// skipVersions moves the commit version gap ahead, durably, before any
// commit of this run.
func (s *Store) skipVersions(gap uint64) error {
	v := s.mu.version + gap
	if v < s.mu.version {
		return fmt.Errorf("kv/embedded: commit versions of %s are exhausted", s.dir)
	}
	var vb [8]byte
	binary.BigEndian.PutUint64(vb[:], v)
	if err := s.db.Set(versionKey, vb[:], pebble.Sync); err != nil {
		return fmt.Errorf("kv/embedded: write commit version of %s: %w", s.dir, err)
	}
	s.mu.version = v
	return nil
}

// getLatest reads the committed value of key (nil if absent).
func (s *Store) getLatest(key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(pebbleKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := bytes.Clone(v)
	closer.Close()
	return out, nil
}

// acquireSnapshot returns the snapshot of the last published version,
// creating it if no transaction holds one yet.
func (s *Store) acquireSnapshot() (*snapRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.mu.refusing {
		return nil, errClosed
	}
	if s.mu.broken != nil {
		return nil, s.mu.broken
	}
	ref := s.mu.current
	ref.refs++
	return ref, nil
}

// releaseSnapshot drops a transaction's reference.
func (s *Store) releaseSnapshot(ref *snapRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref.refs--
	s.collectSnapshotsLocked()
}

// collectSnapshotsLocked closes unreferenced snapshots other than the
// current one.
//
// REQUIRES: s.mu is held.
func (s *Store) collectSnapshotsLocked() {
	kept := s.mu.live[:0]
	for _, r := range s.mu.live {
		if r.refs == 0 && r != s.mu.current {
			if !s.closed {
				r.snap.Close()
			}
			continue
		}
		kept = append(kept, r)
	}
	clear(s.mu.live[len(kept):])
	s.mu.live = kept
}

// oldestLiveVersion is the oldest read version a live transaction holds,
// or the published version when none.
func (s *Store) oldestLiveVersion() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	oldest := s.mu.version
	for _, r := range s.mu.live {
		if r.refs > 0 && r.version < oldest {
			oldest = r.version
		}
	}
	return oldest
}

// Close stops the committer, fails every outstanding watch and open
// transaction, and closes the database. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		// No transaction begins from here on; those open with watches
		// fail them, taking each transaction's lock with no store lock
		// held (a transaction holds its lock while it reads).
		s.mu.Lock()
		s.mu.refusing = true
		s.mu.Unlock()
		s.openMu.Lock()
		open := make([]*txn, 0, len(s.open))
		for t := range s.open {
			open = append(open, t)
		}
		s.openMu.Unlock()
		for _, t := range open {
			t.mu.Lock()
			t.failWatchesLocked(errClosed)
			t.mu.Unlock()
		}
		// A read-only commit registers its watches under notifyMu and
		// checks closed there: it either registers before failAll, which
		// fails them, or finds the store closed.
		s.notifyMu.Lock()
		defer s.notifyMu.Unlock()
		s.closeMu.Lock()
		s.mu.Lock()
		s.closed = true
		for _, r := range s.mu.live {
			r.snap.Close()
		}
		s.mu.live, s.mu.current = nil, nil
		s.mu.Unlock()
		s.watches.failAll(errClosed)
		s.closeErr = s.db.Close()
		s.closeMu.Unlock()
		if err := s.lock.release(); err != nil && s.closeErr == nil {
			s.closeErr = err
		}
	})
	return s.closeErr
}

// rememberOpen notes a transaction that holds watches not yet registered.
func (s *Store) rememberOpen(t *txn) {
	s.openMu.Lock()
	if s.open == nil {
		s.open = make(map[*txn]struct{})
	}
	s.open[t] = struct{}{}
	s.openMu.Unlock()
}

// forgetOpen drops a transaction that ended.
func (s *Store) forgetOpen(t *txn) {
	s.openMu.Lock()
	delete(s.open, t)
	s.openMu.Unlock()
}

// Dir returns the data directory ("" in memory).
func (s *Store) Dir() string { return s.dir }

// quietLogger drops Pebble's informational messages and keeps its errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)              {}
func (quietLogger) Errorf(format string, args ...any) { log.Printf("pebble: "+format, args...) }
func (quietLogger) Fatalf(format string, args ...any) { log.Fatalf("pebble: "+format, args...) }
