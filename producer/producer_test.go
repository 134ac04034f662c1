package producer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
	"github.com/jobstage/jobstage/producer"
)

const waitLimit = 20 * time.Second

// quiet drops the warnings of tests that provoke store errors on purpose.
var quiet = slog.New(slog.DiscardHandler)

// failingBackend fails the next `fails` transactions with a
// non-retryable error, as a broken store would.
type failingBackend struct {
	kv.Backend
	fails atomic.Int32
}

var errBroken = errors.New("store unavailable")

func (b *failingBackend) Begin(ctx context.Context) (kv.Transaction, error) {
	if b.fails.Add(-1) >= 0 {
		return nil, errBroken
	}
	return b.Backend.Begin(ctx)
}

func newQueue(t testing.TB) (*fdbq.Queue, *failingBackend) {
	t.Helper()
	st, err := embedded.Open("", embedded.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	fb := &failingBackend{Backend: st}
	db := kv.NewDB(fb, kv.Options{})
	t.Cleanup(func() { db.Close() })
	q := fdbq.New(db, fdbq.Options{})
	if err := q.SetType(context.Background(), db, "t", fdbq.DefaultTypeSettings()); err != nil {
		t.Fatal(err)
	}
	return q, fb
}

func add(t testing.TB, q *fdbq.Queue, jobs ...fdbq.NewJob) {
	t.Helper()
	for i := range jobs {
		jobs[i].Type = "t"
	}
	if _, err := q.AddBatch(context.Background(), q.DB(), jobs); err != nil {
		t.Fatal(err)
	}
}

func addN(t testing.TB, q *fdbq.Queue, n int) {
	t.Helper()
	var jobs []fdbq.NewJob
	for i := range n {
		jobs = append(jobs, fdbq.NewJob{ID: fmt.Sprintf("j%03d", i)})
	}
	add(t, q, jobs...)
}

type pullResult struct {
	leases []*fdbq.Lease
	err    error
}

func pullAsync(ctx context.Context, p *producer.Producer, n int) <-chan pullResult {
	ch := make(chan pullResult, 1)
	go func() {
		ls, err := p.Pull(ctx, n)
		ch <- pullResult{ls, err}
	}()
	return ch
}

func recv(t testing.TB, ch <-chan pullResult) pullResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitLimit):
		t.Fatal("Pull did not return")
		panic("unreachable")
	}
}

func TestPullBatchLimit(t *testing.T) {
	q, _ := newQueue(t)
	addN(t, q, 10)
	p := producer.New(q, "t", producer.Options{BatchLimit: 3})
	if p.Type() != "t" || p.Queue() != q || p.BatchLimit() != 3 || p.Options().MinBackoff != producer.DefaultMinBackoff {
		t.Fatalf("accessors: %s %d %+v", p.Type(), p.BatchLimit(), p.Options())
	}
	ctx := context.Background()
	for _, tc := range []struct{ ask, want int }{{5, 3}, {2, 2}, {0, 1}, {-4, 1}, {100, 3}} {
		tx0 := q.DB().Stats().Transactions.Load()
		ls, err := p.Pull(ctx, tc.ask)
		if err != nil || len(ls) != tc.want {
			t.Fatalf("Pull(%d): %d jobs, %v; want %d", tc.ask, len(ls), err, tc.want)
		}
		if n := q.DB().Stats().Transactions.Load() - tx0; n != 1 {
			t.Errorf("Pull(%d) took %d transactions, want 1", tc.ask, n)
		}
		for _, l := range ls {
			if l.State != fdbq.Running || l.Lock == "" {
				t.Fatalf("lease %s: %s lock %q", l.ID, l.State, l.Lock)
			}
		}
	}
	if n, _ := q.Count(ctx, q.DB(), "t", fdbq.Running); n != 10 {
		t.Fatalf("%d running, want 10", n)
	}
}

// TestPullWaitsForAdd: with nothing due, Pull waits on the type's watch
// key and returns the job an Add makes pending, with one more transaction
// for the accept.
func TestPullWaitsForAdd(t *testing.T) {
	q, _ := newQueue(t)
	p := producer.New(q, "t", producer.Options{})
	tx0 := q.DB().Stats().Transactions.Load()
	res := pullAsync(context.Background(), p, 10)
	add(t, q, fdbq.NewJob{ID: "late"})
	r := recv(t, res)
	if r.err != nil || len(r.leases) != 1 || r.leases[0].ID != "late" {
		t.Fatalf("Pull: %v, %v", r.leases, r.err)
	}
	// The accept that found nothing, the add, the accept that found it.
	if n := q.DB().Stats().Transactions.Load() - tx0; n > 3 {
		t.Errorf("%d transactions, want at most 3", n)
	}
}

// TestPullWaitsForSchedule: a job scheduled in the near future is
// accepted once due, through the timer for the next scheduled job.
func TestPullWaitsForSchedule(t *testing.T) {
	q, _ := newQueue(t)
	at := time.Now().Add(150 * time.Millisecond)
	add(t, q, fdbq.NewJob{ID: "soon", ScheduledAt: at})
	p := producer.New(q, "t", producer.Options{})
	tx0 := q.DB().Stats().Transactions.Load()
	r := recv(t, pullAsync(context.Background(), p, 1))
	if r.err != nil || len(r.leases) != 1 {
		t.Fatalf("Pull: %v, %v", r.leases, r.err)
	}
	if now := time.Now(); now.Before(at.Truncate(time.Millisecond)) {
		t.Fatalf("accepted at %v, before its scheduled time %v", now, at)
	}
	if n := q.DB().Stats().Transactions.Load() - tx0; n > 3 {
		t.Errorf("%d transactions while waiting for a scheduled job: polling?", n)
	}
}

func TestPullPausedType(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	if err := q.Pause(ctx, q.DB(), "t"); err != nil {
		t.Fatal(err)
	}
	addN(t, q, 2)
	p := producer.New(q, "t", producer.Options{})
	res := pullAsync(ctx, p, 5)
	// Pause leaves the jobs pending; Resume wakes the waiting Pull.
	if n, _ := q.Count(ctx, q.DB(), "t", fdbq.Pending); n != 2 {
		t.Fatalf("%d pending under pause", n)
	}
	if err := q.Resume(ctx, q.DB(), "t"); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, res); r.err != nil || len(r.leases) != 2 {
		t.Fatalf("Pull after resume: %d, %v", len(r.leases), r.err)
	}
}

func TestPullContext(t *testing.T) {
	q, _ := newQueue(t)
	p := producer.New(q, "t", producer.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	res := pullAsync(ctx, p, 1)
	cancel()
	if r := recv(t, res); !errors.Is(r.err, context.Canceled) || r.leases != nil {
		t.Fatalf("cancelled Pull: %v, %v", r.leases, r.err)
	}
	// Nothing was taken by the cancelled Pull.
	addN(t, q, 1)
	if r := recv(t, pullAsync(context.Background(), p, 1)); r.err != nil || len(r.leases) != 1 {
		t.Fatalf("Pull: %v, %v", r.leases, r.err)
	}
}

func TestPullUnknownType(t *testing.T) {
	q, _ := newQueue(t)
	var errs atomic.Int32
	p := producer.New(q, "nope", producer.Options{OnError: func(error) { errs.Add(1) }})
	if r := recv(t, pullAsync(context.Background(), p, 1)); !errors.Is(r.err, fdbq.ErrUnknownType) {
		t.Fatalf("Pull of an unknown type: %v", r.err)
	}
	if errs.Load() != 0 {
		t.Fatal("an unknown type was retried")
	}
}

func TestPullClosedStore(t *testing.T) {
	q, _ := newQueue(t)
	p := producer.New(q, "t", producer.Options{MaxBackoff: time.Millisecond})
	q.DB().Close()
	// Pull gives up on a closed store only if the store reports it as
	// kv.ErrClosed, as the FoundationDB adapter does.
	if err := q.DB().Transact(context.Background(), func(kv.Tx) error { return nil }); !errors.Is(err, kv.ErrClosed) {
		t.Skipf("the embedded store reports a closed store as %v, which does not match kv.ErrClosed", err)
	}
	if r := recv(t, pullAsync(context.Background(), p, 1)); !errors.Is(r.err, kv.ErrClosed) {
		t.Fatalf("Pull on a closed store: %v", r.err)
	}
}

// TestPullBacksOff: store errors are reported and retried after a backoff;
// Pull then returns the jobs.
func TestPullBacksOff(t *testing.T) {
	q, fb := newQueue(t)
	addN(t, q, 3)
	var seen []error
	p := producer.New(q, "t", producer.Options{
		MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond, Logger: quiet,
		OnError: func(err error) { seen = append(seen, err) },
	})
	fb.fails.Store(5)
	r := recv(t, pullAsync(context.Background(), p, 3))
	if r.err != nil || len(r.leases) != 3 {
		t.Fatalf("Pull after store errors: %d, %v", len(r.leases), r.err)
	}
	if len(seen) != 5 {
		t.Fatalf("OnError saw %d errors, want 5", len(seen))
	}
	for _, err := range seen {
		if !errors.Is(err, errBroken) {
			t.Fatalf("OnError saw %v", err)
		}
	}
	// A backoff ends with ctx too.
	fb.fails.Store(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	p = producer.New(q, "t", producer.Options{MinBackoff: time.Hour, Logger: quiet, OnError: func(error) { cancel() }})
	if r := recv(t, pullAsync(ctx, p, 1)); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Pull cancelled in its backoff: %v", r.err)
	}
	fb.fails.Store(0)
}

func TestRelease(t *testing.T) {
	q, _ := newQueue(t)
	addN(t, q, 4)
	p := producer.New(q, "t", producer.Options{})
	ctx := context.Background()
	ls, err := p.Pull(ctx, 4)
	if err != nil || len(ls) != 4 {
		t.Fatalf("Pull: %d, %v", len(ls), err)
	}
	if err := p.Release(ctx, ls[:3]); err != nil {
		t.Fatal(err)
	}
	for i, l := range ls {
		j, err := q.Get(ctx, q.DB(), "t", l.ID)
		if err != nil {
			t.Fatal(err)
		}
		want, attempts := fdbq.Pending, 0
		if i == 3 {
			want, attempts = fdbq.Running, 1
		}
		if j.State != want || j.Attempts != attempts {
			t.Errorf("job %s: %s with %d attempts, want %s with %d", l.ID, j.State, j.Attempts, want, attempts)
		}
	}
}

// TestBacklogged: a producer tells whether its last Pull found as many
// jobs as it asked for at once (a backlog), and whether one of its Pulls
// waits for jobs; the channels it gives are closed when either changes.
func TestBacklogged(t *testing.T) {
	q, _ := newQueue(t)
	p := producer.New(q, "t", producer.Options{})
	ctx := context.Background()
	pull := func(n, want int) {
		t.Helper()
		ls, err := p.Pull(ctx, n)
		if err != nil || len(ls) != want {
			t.Fatalf("pull %d: %d jobs, %v; want %d", n, len(ls), err, want)
		}
	}
	if b, _ := p.Backlogged(); b {
		t.Fatal("a new producer is backlogged")
	}
	add(t, q, fdbq.NewJob{ID: "1"}, fdbq.NewJob{ID: "2"}, fdbq.NewJob{ID: "3"})
	_, filled := p.Backlogged()
	pull(2, 2)
	if b, _ := p.Backlogged(); !b {
		t.Fatal("not backlogged after a pull that found all it asked for")
	}
	select {
	case <-filled:
	default:
		t.Fatal("the change was not told")
	}
	pull(5, 1)
	if b, _ := p.Backlogged(); b {
		t.Fatal("backlogged after a pull that found fewer than it asked for")
	}

	// A pull of one that waits for its job is no backlog, though it got
	// all it asked for.
	_, turned := p.Parked()
	got := make(chan error, 1)
	go func() {
		_, err := p.Pull(ctx, 1)
		got <- err
	}()
	select {
	case <-turned:
	case <-time.After(waitLimit):
		t.Fatal("the pull did not wait")
	}
	if parked, _ := p.Parked(); !parked {
		t.Fatal("not parked while a pull waits")
	}
	add(t, q, fdbq.NewJob{ID: "4"})
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if b, _ := p.Backlogged(); b {
		t.Fatal("backlogged after a pull that waited for its job")
	}
	if parked, _ := p.Parked(); parked {
		t.Fatal("parked after the pull returned")
	}
}

// The jobs a producer accepts name it while they run: by default its
// host and pid; a holder fdbq refuses is replaced by the default rather
// than failing every accept.
func TestProducerHolder(t *testing.T) {
	q, _ := newQueue(t)
	ctx := context.Background()
	add(t, q, fdbq.NewJob{ID: "a"}, fdbq.NewJob{ID: "b"}, fdbq.NewJob{ID: "c"})
	def := producer.DefaultHolder()
	if err := fdbq.ValidateHolder(def); err != nil || !strings.HasSuffix(def, fmt.Sprintf("/%d", os.Getpid())) {
		t.Fatalf("DefaultHolder() = %q (%v), want host/pid", def, err)
	}
	for _, tc := range []struct{ holder, want string }{{"", def}, {"billing-7", "billing-7"}, {"bad\x1b[2J", def}} {
		p := producer.New(q, "t", producer.Options{Holder: tc.holder, Logger: slog.New(slog.DiscardHandler)})
		ls, err := p.Pull(ctx, 1)
		if err != nil || len(ls) != 1 {
			t.Fatalf("pull: %v %v", ls, err)
		}
		j, err := q.Get(ctx, q.DB(), "t", ls[0].ID)
		if err != nil || j.Holder != tc.want {
			t.Errorf("holder %q: the job's holder is %q (%v), want %q", tc.holder, j.Holder, err, tc.want)
		}
	}
}
