//go:build fdb

package fdb

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/apple/foundationdb/bindings/go/src/fdb"

	"github.com/jobstage/jobstage/kv"
)

// APIVersion is the FoundationDB API version the adapter selects. The
// bindings are compiled against headers of this version; a libfdb_c of
// release 7.3 or later serves it.
const APIVersion = 730

// Options configure a Store.
type Options struct {
	// TransactionTimeout, if positive, has FoundationDB cancel every
	// transaction of the Store that is still running after this long; its
	// operations then fail with transaction_timed_out
	// (kv.ErrTransactionTimedOut). It is rounded up to whole milliseconds.
	TransactionTimeout time.Duration
}

var (
	apiOnce sync.Once
	apiErr  error
)

// selectAPIVersion selects APIVersion once per process: the C library
// accepts a single selection, and MustAPIVersion would panic where Open
// should return an error.
func selectAPIVersion() error {
	apiOnce.Do(func() {
		err := fdb.APIVersion(APIVersion)
		if v, gerr := fdb.GetAPIVersion(); err != nil && gerr == nil && v == APIVersion {
			// Selected earlier by other code of this process: same version,
			// nothing to do.
			err = nil
		}
		apiErr = err
	})
	return apiErr
}

// The bindings cache one fdb.Database per cluster file path, and its Close
// both evicts and destroys it, so two Stores on one path would share a
// handle that the first Close frees under the second. Stores therefore
// share handles through this reference count instead.
var (
	handlesMu sync.Mutex
	handles   = map[string]*handle{}
)

type handle struct {
	db   fdb.Database
	refs int
}

func acquire(clusterFile string) (fdb.Database, error) {
	handlesMu.Lock()
	defer handlesMu.Unlock()
	if h := handles[clusterFile]; h != nil {
		h.refs++
		return h.db, nil
	}
	db, err := fdb.OpenDatabase(clusterFile)
	if err != nil {
		return fdb.Database{}, err
	}
	handles[clusterFile] = &handle{db: db, refs: 1}
	return db, nil
}

func release(clusterFile string) {
	handlesMu.Lock()
	defer handlesMu.Unlock()
	h := handles[clusterFile]
	h.refs--
	if h.refs == 0 {
		delete(handles, clusterFile)
		h.db.Close()
	}
}

// Store is a kv.Backend on a FoundationDB cluster.
type Store struct {
	clusterFile string
	db          fdb.Database
	opts        Options

	mu     sync.Mutex
	closed bool
	// live holds the open transactions and pending watches, which Close
	// fails.
	live map[aborter]struct{}
}

// aborter is an open transaction or a pending watch.
type aborter interface {
	abort(cause error)
}

var _ kv.Backend = (*Store)(nil)

// Open connects to the cluster named by clusterFile; an empty clusterFile
// means FoundationDB's default cluster file (the FDB_CLUSTER_FILE
// environment variable, else the platform's default path).
//
// The first Open of the process selects API version 730 and starts the
// FoundationDB network thread, which then runs until the process exits:
// the C library cannot restart it, so Close does not stop it.
func Open(clusterFile string, opts Options) (*Store, error) {
	if err := selectAPIVersion(); err != nil {
		return nil, fmt.Errorf("kv/fdb: select API version %d: %w", APIVersion, toKV(err))
	}
	db, err := acquire(clusterFile)
	if err != nil {
		return nil, fmt.Errorf("kv/fdb: open cluster file %q: %w", clusterFile, toKV(err))
	}
	return &Store{
		clusterFile: clusterFile,
		db:          db,
		opts:        opts,
		live:        make(map[aborter]struct{}),
	}, nil
}

// Begin implements kv.Backend. When ctx ends, the transaction is cancelled
// (unless it has committed by then), so that blocked reads and the commit
// return.
func (s *Store) Begin(ctx context.Context) (kv.Transaction, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The lock keeps Close from destroying the database handle while a
	// transaction is being created on it.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, kv.ErrClosed
	}
	tr, err := s.db.CreateTransaction()
	if err != nil {
		return nil, toKV(err)
	}
	if d := s.opts.TransactionTimeout; d > 0 {
		ms := (d + time.Millisecond - 1) / time.Millisecond
		if err := tr.Options().SetTimeout(int64(ms)); err != nil {
			tr.Cancel()
			return nil, toKV(err)
		}
	}
	t := &txn{s: s, tr: tr, ctx: ctx}
	t.reader = reader{t: t, rt: tr}
	// Holding t.mu makes a hook that fires at once wait until stop is set.
	t.mu.Lock()
	t.stop = context.AfterFunc(ctx, func() { t.abort(ctx.Err()) })
	t.mu.Unlock()
	s.live[t] = struct{}{}
	return t, nil
}

// Close implements kv.Backend: open transactions are cancelled (their
// operations fail with an error matching both kv.ErrClosed and
// kv.ErrTransactionCancelled), pending watches fail with kv.ErrClosed, and
// the database handle is released once no other Store of the process uses
// the same cluster file. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	live := s.live
	s.live = nil
	s.mu.Unlock()

	for a := range live {
		a.abort(kv.ErrClosed)
	}
	release(s.clusterFile)
	return nil
}

// track registers a pending watch; false if the Store is closed.
func (s *Store) track(a aborter) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.live[a] = struct{}{}
	return true
}

func (s *Store) forget(a aborter) {
	s.mu.Lock()
	delete(s.live, a)
	s.mu.Unlock()
}
