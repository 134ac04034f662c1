package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
)

type num struct {
	N int `json:"n"`
}

func TestOptionsDefaults(t *testing.T) {
	h := func(ctx context.Context, j *consumer.Job[num]) (int, error) { return 0, nil }
	c, err := consumer.New(h, consumer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := c.Options()
	if o.Concurrency != consumer.DefaultConcurrency || o.MaxDemand != 2*o.Concurrency || o.MinDemand != o.MaxDemand/2 {
		t.Fatalf("defaults: %+v", o)
	}
	c, err = consumer.New(h, consumer.Options{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if o := c.Options(); o.MaxDemand != 2 || o.MinDemand != 1 {
		t.Fatalf("concurrency 1: %+v", o)
	}
	if _, err := consumer.New(h, consumer.Options{MaxDemand: 4, MinDemand: 4}); err == nil {
		t.Fatal("min demand equal to max demand accepted")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Must did not panic on bad options")
		}
	}()
	consumer.Must(consumer.New(h, consumer.Options{MaxDemand: 2, MinDemand: 3}))
}

// TestServeKeepsArrivalOrder: a one-at-a-time consumer runs its jobs in
// the order they arrived, even when several are waiting at once (partition
// dispatch may deliver more than a consumer asked for).
func TestServeKeepsArrivalOrder(t *testing.T) {
	q := newQueue(t, nil)
	const n = 300
	ls := leases(t, q, n)
	var order []int
	c, err := consumer.New(func(ctx context.Context, j *consumer.Job[num]) (int, error) {
		order = append(order, j.Data.N) // one handler at a time
		return j.Data.N, nil
	}, consumer.Options{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	in := make(chan *consumer.Envelope, n)
	var envs []*consumer.Envelope
	for _, l := range ls {
		e := consumer.NewEnvelope(context.Background(), q, l, consumer.EnvelopeOptions{})
		envs = append(envs, e)
		in <- e
	}
	close(in)
	serve(t, c, in)
	for i, got := range order {
		if got != i {
			t.Fatalf("handled out of arrival order: %v", order)
		}
	}
	if len(order) != n {
		t.Fatalf("handled %d of %d", len(order), n)
	}
	for _, e := range envs {
		select {
		case <-e.Done():
		default:
			t.Fatalf("envelope %s not done after Serve returned", e.Lease.ID)
		}
		if e.Err() != nil {
			t.Fatalf("envelope %s: %v", e.Lease.ID, e.Err())
		}
	}
	if j := get(t, q, "j007"); j.Outcome != fdbq.Succeeded || string(j.Result) != "7" {
		t.Fatalf("job j007: %s %s", j.Outcome, j.Result)
	}
}

// TestServeDemand: the consumer asks for MaxDemand up front, and for what
// it misses when its outstanding demand falls to MinDemand (or below:
// outcomes committed together are counted together); it never has more
// than MaxDemand jobs asked for and not finished.
func TestServeDemand(t *testing.T) {
	q := newQueue(t, nil)
	const n, maxD, minD, conc = 24, 6, 2, 3
	ls := leases(t, q, n)
	var mu sync.Mutex
	running, peak := 0, 0
	c, err := consumer.New(func(ctx context.Context, j *consumer.Job[num]) (int, error) {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		return 0, nil
	}, consumer.Options{Concurrency: conc, MaxDemand: maxD, MinDemand: minD})
	if err != nil {
		t.Fatal(err)
	}
	in := make(chan *consumer.Envelope, n)
	asks := make(chan int, n)
	served := make(chan struct{})
	go func() {
		defer close(served)
		c.Serve(in, func(k int) { asks <- k })
	}()
	sent, asked := 0, 0
	var got []int
	var envs []*consumer.Envelope
	for sent < n {
		k := recv(t, asks, "an ask")
		got = append(got, k)
		asked += k
		if sent > 0 && (k < maxD-minD || k > maxD) {
			t.Errorf("asked for %d after the first ask, want %d (max−min demand) to %d", k, maxD-minD, maxD)
		}
		done := 0
		for _, e := range envs {
			select {
			case <-e.Done():
				done++
			default:
			}
		}
		if asked-done > maxD {
			t.Errorf("asked for %d in all with %d finished: more than max demand %d outstanding", asked, done, maxD)
		}
		for range k {
			if sent == n {
				break
			}
			e := consumer.NewEnvelope(context.Background(), q, ls[sent], consumer.EnvelopeOptions{})
			envs = append(envs, e)
			in <- e
			sent++
		}
	}
	close(in)
	recv(t, served, "Serve to return")
	if got[0] != maxD {
		t.Errorf("first ask %d, want max demand %d", got[0], maxD)
	}
	if peak > conc {
		t.Errorf("%d handlers at once, concurrency %d", peak, conc)
	}
	page, err := q.List(context.Background(), q.DB(), "t", fdbq.ListOptions{State: fdbq.Finished, Limit: n})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != n {
		t.Fatalf("%d finished, want %d", len(page.Jobs), n)
	}
}

// TestServeSkipsReleased: an envelope released before a handler took it
// is acknowledged without running the handler.
func TestServeSkipsReleased(t *testing.T) {
	q := newQueue(t, nil)
	ls := leases(t, q, 2)
	ran := make(chan string, 2)
	c, err := consumer.New(func(ctx context.Context, j *consumer.Job[num]) (int, error) {
		ran <- j.ID
		return 0, nil
	}, consumer.Options{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	e0 := consumer.NewEnvelope(context.Background(), q, ls[0], consumer.EnvelopeOptions{})
	e1 := consumer.NewEnvelope(context.Background(), q, ls[1], consumer.EnvelopeOptions{})
	if n, err := consumer.ReleaseUnstarted(context.Background(), []*consumer.Envelope{e1}); n != 1 || err != nil {
		t.Fatalf("release: %d, %v", n, err)
	}
	in := make(chan *consumer.Envelope, 2)
	in <- e0
	in <- e1
	close(in)
	serve(t, c, in)
	close(ran)
	var got []string
	for id := range ran {
		got = append(got, id)
	}
	if fmt.Sprint(got) != "[j000]" {
		t.Fatalf("handlers ran on %v", got)
	}
	if j := get(t, q, "j001"); j.State != fdbq.Pending || j.Attempts != 0 {
		t.Fatalf("released job: %s with %d attempts", j.State, j.Attempts)
	}
}

// TestPanicBecomesError: a consumer turns a handler's panic into a failed
// attempt whose error has the value and the stack.
func TestPanicBecomesError(t *testing.T) {
	q := newQueue(t, nil)
	ls := leases(t, q, 1)
	c, err := consumer.New(func(ctx context.Context, j *consumer.Job[num]) (int, error) {
		var none []int
		return none[j.Data.N], nil // a runtime panic, not a deliberate one
	}, consumer.Options{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	serveLeases(t, c, q, ls[:1], consumer.EnvelopeOptions{})
	j := get(t, q, "j000")
	if j.Outcome != fdbq.Failed {
		t.Fatalf("outcome %s", j.Outcome)
	}
	for _, want := range []string{"index out of range", "goroutine ", "consumer_test.go"} {
		if !strings.Contains(j.Error, want) {
			t.Errorf("error lacks %q:\n%s", want, j.Error)
		}
	}
}

// TestResultEncoding: results are stored as JSON; a result that does not
// encode fails the attempt.
func TestResultEncoding(t *testing.T) {
	q := newQueue(t, nil)
	ls := leases(t, q, 2)
	c, err := consumer.New(func(ctx context.Context, j *consumer.Job[num]) (any, error) {
		if j.Data.N == 1 {
			return func() {}, nil
		}
		return map[string]any{"n": j.Data.N, "ok": true}, nil
	}, consumer.Options{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	serveLeases(t, c, q, ls, consumer.EnvelopeOptions{})
	var r map[string]any
	if j := get(t, q, "j000"); json.Unmarshal(j.Result, &r) != nil || r["ok"] != true {
		t.Errorf("result %s", j.Result)
	}
	if j := get(t, q, "j001"); j.Outcome != fdbq.Failed || !strings.Contains(j.Error, "encode result") {
		t.Errorf("unencodable result: %s %q", j.Outcome, j.Error)
	}
}

// TestProgress records progress through the job.
func TestProgress(t *testing.T) {
	q := newQueue(t, nil)
	ls := leases(t, q, 2)
	progressErr := make(chan error, 1)
	c, err := consumer.New(func(ctx context.Context, j *consumer.Job[num]) (int, error) {
		if j.Data.N == 1 {
			// The job is canceled under the handler: progress is refused.
			if err := q.Cancel(ctx, q.DB(), "t", j.ID); err != nil {
				return 0, err
			}
			progressErr <- j.Progress(ctx, map[string]int{"done": 1})
			return 0, nil
		}
		return 0, j.Progress(ctx, map[string]int{"done": 50})
	}, consumer.Options{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	serveLeases(t, c, q, ls, consumer.EnvelopeOptions{})
	if j := get(t, q, "j000"); string(j.Progress) != `{"done":50}` || j.Outcome != fdbq.Succeeded {
		t.Errorf("progress %s, outcome %s", j.Progress, j.Outcome)
	}
	if err := <-progressErr; !errors.Is(err, fdbq.ErrHalt) {
		t.Errorf("progress of a canceled job: %v, want ErrHalt", err)
	}
}

// TestResultTooLargeFailsTheAttempt: a result that would take the job past
// its size limit fails the attempt with the reason, at once.
func TestResultTooLargeFailsTheAttempt(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			q := newQueue(t, nil)
			ls := leases(t, q, 2)
			c, err := consumer.New(func(ctx context.Context, j *consumer.Job[num]) (string, error) {
				if j.Data.N == 1 {
					return strings.Repeat("x", fdbq.MaxDataSize), nil
				}
				return "small", nil
			}, consumer.Options{Concurrency: 2})
			if err != nil {
				t.Fatal(err)
			}
			o := consumer.EnvelopeOptions{}
			if batch {
				f := consumer.NewBatchFinisher(q, 16)
				if err := f.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				defer f.Stop(context.Background())
				o.Finisher = f
			}
			serveLeases(t, c, q, ls, o)
			if j := get(t, q, "j000"); j.Outcome != fdbq.Succeeded || string(j.Result) != `"small"` {
				t.Errorf("small result: %s %s", j.Outcome, j.Result)
			}
			j := get(t, q, "j001")
			if j.State != fdbq.Finished || j.Outcome != fdbq.Failed || !strings.Contains(j.Error, "result not stored") || !strings.Contains(j.Error, "too large") {
				t.Errorf("oversized result: %s %s %q", j.State, j.Outcome, j.Error)
			}
		})
	}
}

// TestRawRunsTypedHandler: a typed handler adapted with Raw decodes the
// job's data, encodes its result and can report progress.
func TestRawRunsTypedHandler(t *testing.T) {
	q := newQueue(t, nil)
	ls := leases(t, q, 2)
	typed := func(ctx context.Context, j *consumer.Job[num]) (map[string]int, error) {
		if err := j.Progress(ctx, map[string]int{"seen": j.Data.N}); err != nil {
			return nil, err
		}
		if j.Data.N == 1 {
			return nil, errors.New("odd one out")
		}
		return map[string]int{"double": 2 * j.Data.N}, nil
	}
	c, err := consumer.New(consumer.Raw(typed), consumer.Options{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	serveLeases(t, c, q, ls, consumer.EnvelopeOptions{})
	if j := get(t, q, "j000"); j.Outcome != fdbq.Succeeded || string(j.Result) != `{"double":0}` || string(j.Progress) != `{"seen":0}` {
		t.Errorf("j000: %s %s %s", j.Outcome, j.Result, j.Progress)
	}
	if j := get(t, q, "j001"); j.Outcome != fdbq.Failed || j.Error != "odd one out" {
		t.Errorf("j001: %s %q", j.Outcome, j.Error)
	}
}

// Jobs wait for a handler in turns by fairness key: a job of a key with
// nothing else waiting starts next, not behind another key's buffered
// backlog, jobs without a key take turns as one key, and within a key
// jobs start in arrival order. A consumer of Concurrency 1 starts them
// all in arrival order.
func TestServeTakesTurnsByKey(t *testing.T) {
	q := newQueue(t, nil)
	ctx := context.Background()
	// run serves, through a consumer of the concurrency given, jobs
	// arriving in this order: 40 of key "a", one of "b", 5 without a key,
	// 10 more of "a"; it returns their ids in the order they started, and
	// the jobs.
	run := func(concurrency int) ([]string, []fdbq.NewJob) {
		t.Helper()
		var jobs []fdbq.NewJob
		add := func(key string, n int) {
			for range n {
				jobs = append(jobs, fdbq.NewJob{Type: "t", ID: fmt.Sprintf("c%d-%03d", concurrency, len(jobs)), Key: key, MaxAttempts: 1})
			}
		}
		add("a", 40)
		add("b", 1)
		add("", 5)
		add("a", 10)
		if _, err := q.AddBatch(ctx, q.DB(), jobs); err != nil {
			t.Fatal(err)
		}
		byID := map[string]*fdbq.Lease{}
		for len(byID) < len(jobs) {
			ls, err := q.Accept(ctx, "t", fdbq.AcceptOptions{Max: len(jobs)})
			if err != nil || len(ls) == 0 {
				t.Fatalf("accepted %d of %d (%v)", len(byID), len(jobs), err)
			}
			for _, l := range ls {
				byID[l.ID] = l
			}
		}
		// Each handler says it started, then waits for its release. The
		// test releases one handler at a time and waits for the start
		// that takes its place, so only one handler slot is ever free:
		// the starts arrive in the order Serve hands the jobs out, not
		// in the order the handlers' goroutines happen to run.
		starts := make(chan string, len(jobs))
		release := make(chan struct{})
		c, err := consumer.NewFunc(func(ctx context.Context, j *consumer.Job[json.RawMessage]) error {
			starts <- j.ID
			<-release
			return nil
		}, consumer.Options{Concurrency: concurrency, MaxDemand: 2 * len(jobs)})
		if err != nil {
			t.Fatal(err)
		}
		in := make(chan *consumer.Envelope) // a send returns once Serve has the envelope
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Serve(in, func(int) {})
		}()
		for _, j := range jobs {
			in <- consumer.NewEnvelope(ctx, q, byID[j.ID], consumer.EnvelopeOptions{})
		}
		close(in) // every envelope is in Serve's queue
		var started []string
		for range concurrency {
			started = append(started, recv(t, starts, "a handler to start"))
		}
		for len(started) < len(jobs) {
			release <- struct{}{}
			started = append(started, recv(t, starts, fmt.Sprintf("start %d of %d", len(started)+1, len(jobs))))
		}
		close(release)
		recv(t, done, "Serve to return")
		return started, jobs
	}

	// At most 4 handlers took jobs before the rest arrived; then the keys
	// take turns (turns_internal_test.go has the exact order): "b" is
	// among the first starts after those, and the jobs without a key
	// alternate with those of "a".
	started, jobs := run(4)
	at := map[string]int{}
	for i, id := range started {
		at[id] = i
	}
	if i := at[jobs[40].ID]; i > 4+2+3 {
		t.Fatalf("the job of key b started %dth, behind the backlog of key a: %v", i+1, started)
	}
	if i := at[jobs[45].ID]; i > 4+2*5+1+3 {
		t.Fatalf("the last job without a key started %dth, not in turn with key a: %v", i+1, started)
	}

	started, jobs = run(1)
	for i, id := range started {
		if id != jobs[i].ID {
			t.Fatalf("a consumer of concurrency 1 started %s %dth, want arrival order: %v", id, i+1, started)
		}
	}
}
