package pipeline_test

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/kv/tuple"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// waitLimit bounds every wait of these tests: a wait that takes longer
// fails the test instead of hanging it.
const waitLimit = 20 * time.Second

// fakeClock is a manual clock for queues whose scheduled times a test
// controls. It counts its reads, so a test can tell that nothing consulted
// the clock (no timer fired, no poll ran) while a pipeline sat idle.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	reads atomic.Int64
	real  bool // follow the real clock instead of now
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.UnixMilli(1_700_000_000_000)} }

// countingClock is the real clock, with reads counted.
func countingClock() *fakeClock { return &fakeClock{real: true} }

func (c *fakeClock) Now() time.Time {
	c.reads.Add(1)
	if c.real {
		return time.Now()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// spyBackend wraps a store and reports every committed transaction that
// set a watch on a job type's watch key: that is the last thing an
// acceptor does before it parks, so a test knows when a producer waits.
type spyBackend struct {
	kv.Backend
	watchKeys map[string]bool // the watch keys of the types watched
	mu        sync.Mutex
	armed     int
	changed   chan struct{} // closed and replaced when armed changes
	hold      atomic.Pointer[commitHold]
}

// commitHold holds back the commit of the first transaction that sets a
// key containing match, until release is closed; held is closed once it
// waits there.
type commitHold struct {
	match   []byte
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

// holdCommit holds back the first commit of a transaction that sets a key
// containing match (see commitHold).
func (b *spyBackend) holdCommit(match []byte) *commitHold {
	h := &commitHold{match: match, held: make(chan struct{}), release: make(chan struct{})}
	b.hold.Store(h)
	return h
}

func (b *spyBackend) Begin(ctx context.Context) (kv.Transaction, error) {
	tx, err := b.Backend.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &spyTx{Transaction: tx, b: b}, nil
}

// armedWatches is how many acceptor watches have been set so far, and a
// channel closed when that changes.
func (b *spyBackend) armedWatches() (int, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.armed, b.changed
}

// waitArmed waits until at least n acceptor watches have been set.
func (b *spyBackend) waitArmed(t testing.TB, n int) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		got, ch := b.armedWatches()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("only %d acceptor watches set, want %d", got, n)
		}
	}
}

type spyTx struct {
	kv.Transaction
	b       *spyBackend
	watched bool
	matched bool // set a key the commit hold matches
}

// Transact runs fn in t itself, so that its writes pass through t.
func (t *spyTx) Transact(_ context.Context, fn func(kv.Tx) error) error { return fn(t) }

// wrote notes a key set, for the commit hold.
func (t *spyTx) wrote(key []byte) {
	if h := t.b.hold.Load(); h != nil && bytes.Contains(key, h.match) {
		t.matched = true
	}
}

func (t *spyTx) Set(key, value []byte) { t.wrote(key); t.Transaction.Set(key, value) }
func (t *spyTx) SetVersionstampedKey(key, value []byte) {
	t.wrote(key)
	t.Transaction.SetVersionstampedKey(key, value)
}
func (t *spyTx) SetVersionstampedValue(key, value []byte) {
	t.wrote(key)
	t.Transaction.SetVersionstampedValue(key, value)
}

func (t *spyTx) Watch(key []byte) kv.Watch {
	if t.b.watchKeys[string(key)] {
		t.watched = true
	}
	return t.Transaction.Watch(key)
}

func (t *spyTx) Commit() error {
	if h := t.b.hold.Load(); t.matched && h != nil {
		first := false
		h.once.Do(func() { first = true })
		if first {
			close(h.held)
			<-h.release
		}
	}
	err := t.Transaction.Commit()
	if err == nil && t.watched {
		t.b.mu.Lock()
		t.b.armed++
		close(t.b.changed)
		t.b.changed = make(chan struct{})
		t.b.mu.Unlock()
	}
	return err
}

// Key tags of fdbq's data model (fdbq/doc.go): the watch key acceptors
// wait on, the change key every job change bumps, and the running index.
const (
	tagWatch  = 3
	tagChange = 4
	tagActive = 12 // the running index: an accept sets its entries
)

func queueKey(tag int, typ string) []byte {
	return tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{tag, typ})
}

// env is a queue over a fresh in-memory store, its clock and its spy.
type env struct {
	q     *fdbq.Queue
	db    *kv.DB
	clock *fakeClock
	spy   *spyBackend
}

type envOptions struct {
	clock    *fakeClock // default: the real clock, counted
	dir      string     // on-disk store at dir; default in memory
	settings *fdbq.TypeSettings
	types    []string // default {"t"}
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	var st *embedded.Store
	var err error
	if o.dir != "" {
		st, err = embedded.Open(o.dir, embedded.Options{})
	} else {
		st, err = embedded.Open("", embedded.Options{InMemory: true})
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(o.types) == 0 {
		o.types = []string{"t"}
	}
	spy := &spyBackend{Backend: st, watchKeys: map[string]bool{}, changed: make(chan struct{})}
	for _, typ := range o.types {
		spy.watchKeys[string(queueKey(tagWatch, typ))] = true
	}
	db := kv.NewDB(spy, kv.Options{})
	t.Cleanup(func() { db.Close() })
	if o.clock == nil {
		o.clock = countingClock()
	}
	q := fdbq.New(db, fdbq.Options{Now: o.clock.Now})
	s := fdbq.DefaultTypeSettings()
	if o.settings != nil {
		s = *o.settings
	}
	for _, typ := range o.types {
		if err := q.SetType(context.Background(), db, typ, s); err != nil {
			t.Fatal(err)
		}
	}
	return &env{q: q, db: db, clock: o.clock, spy: spy}
}

// add enqueues jobs of type "t" with the given ids and JSON data.
func (e *env) add(t testing.TB, jobs ...fdbq.NewJob) {
	t.Helper()
	for i := range jobs {
		if jobs[i].Type == "" {
			jobs[i].Type = "t"
		}
	}
	if _, err := e.q.AddBatch(context.Background(), e.db, jobs); err != nil {
		t.Fatal(err)
	}
}

func (e *env) get(t testing.TB, id string) *fdbq.Job {
	t.Helper()
	j, err := e.q.Get(context.Background(), e.db, "t", id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (e *env) count(t testing.TB, s fdbq.State) int64 {
	t.Helper()
	n, err := e.q.Count(context.Background(), e.db, "t", s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitStore waits until cond holds, re-checking it after each change to a
// job of type "t".
func (e *env) waitStore(t testing.TB, what string, cond func() bool) {
	t.Helper()
	jobtest.WaitStore(t, e.db, "t", waitLimit, what, cond)
}

// waitFinished waits until every job in ids has finished, and returns them.
func (e *env) waitFinished(t testing.TB, ids ...string) []*fdbq.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	res, err := e.q.Wait(ctx, "t", ids, fdbq.Finished)
	if err != nil {
		t.Fatalf("waiting for %d jobs to finish: %v", len(ids), err)
	}
	out := make([]*fdbq.Job, len(res))
	for i, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if r.Job.State != fdbq.Finished {
			t.Fatalf("job %s is %s, not finished", ids[i], r.Job.State)
		}
		out[i] = r.Job
	}
	return out
}

// start builds and starts a pipeline from a producer of "t" to cs, and
// stops it at the end of the test.
func (e *env) start(t testing.TB, b *pipeline.Builder) *pipeline.Pipeline {
	t.Helper()
	p, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	startBuilt(t, p)
	return p
}

// startBuilt starts p and stops it at the end of the test.
func startBuilt(t testing.TB, p *pipeline.Pipeline) {
	t.Helper()
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		limit := waitLimit
		if t.Failed() {
			// Handlers of a failed test may still block; cut the drain
			// short (Stop cancels them when ctx ends) and move on.
			limit = time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		if err := p.Stop(ctx); err != nil && !t.Failed() {
			t.Errorf("stop: %v", err)
		}
	})
}

func (e *env) producer(o producer.Options) *producer.Producer { return producer.New(e.q, "t", o) }

func mustConsumer[T, R any](t testing.TB, h consumer.Handler[T, R], o consumer.Options, mw ...consumer.Middleware) *consumer.Consumer {
	t.Helper()
	c, err := consumer.New(h, o, mw...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// recv receives from ch or fails the test after waitLimit.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	return jobtest.Recv(t, ch, waitLimit, what)
}

// jobIDs returns "prefix0" … "prefix(n-1)".
func jobIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

func newJobs(idList []string, data string) []fdbq.NewJob {
	out := make([]fdbq.NewJob, len(idList))
	for i, id := range idList {
		out[i] = fdbq.NewJob{ID: id}
		if data != "" {
			out[i].Data = []byte(data)
		}
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for concurrent writers and readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
