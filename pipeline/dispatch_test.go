package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// TestBroadcastDeliversToAll: every consumer handles every job once, and
// the job finishes once, after all of them.
func TestBroadcastDeliversToAll(t *testing.T) {
	e := newEnv(t, envOptions{})
	const n, consumers = 30, 3
	all := jobIDs("b", n)
	e.add(t, newJobs(all, "")...)
	var mu sync.Mutex
	seen := make([]map[string]int, consumers)
	var cs []*consumer.Consumer
	for i := range consumers {
		seen[i] = map[string]int{}
		cs = append(cs, mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (string, error) {
			mu.Lock()
			seen[i][j.ID]++
			mu.Unlock()
			return fmt.Sprint("consumer", i), nil
		}, consumer.Options{Concurrency: 2, MaxDemand: 4}))
	}
	e.start(t, pipeline.From(e.producer(producer.Options{})).Dispatch(pipeline.BroadcastDispatcher()).To(cs...))
	for _, j := range e.waitFinished(t, all...) {
		if j.Outcome != fdbq.Succeeded || j.Attempts != 1 || !strings.HasPrefix(string(j.Result), `"consumer`) {
			t.Errorf("job %s: %s after %d attempts, result %s", j.ID, j.Outcome, j.Attempts, j.Result)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, m := range seen {
		for _, id := range all {
			if m[id] != 1 {
				t.Errorf("consumer %d handled %s %d times", i, id, m[id])
			}
		}
	}
}

// TestBroadcastFailure: when one consumer of a broadcast fails, the job
// fails with its error, even though the others succeeded first: the
// outcome is committed only after the last acknowledgement.
func TestBroadcastFailure(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.add(t, fdbq.NewJob{ID: "x", MaxAttempts: 1})
	othersDone := make(chan struct{}, 2)
	ok := func(ctx context.Context, j *consumer.Job[json.RawMessage]) (string, error) {
		othersDone <- struct{}{}
		return "ok", nil
	}
	stillRunning := make(chan fdbq.State, 1)
	failing := func(ctx context.Context, j *consumer.Job[json.RawMessage]) (string, error) {
		recv(t, othersDone, "the first consumer")
		recv(t, othersDone, "the second consumer")
		got, err := e.q.Get(ctx, e.db, "t", j.ID)
		if err != nil {
			return "", err
		}
		stillRunning <- got.State
		return "", errors.New("third consumer refused")
	}
	e.start(t, pipeline.From(e.producer(producer.Options{})).Dispatch(pipeline.BroadcastDispatcher()).To(
		mustConsumer(t, ok, consumer.Options{Concurrency: 1}),
		mustConsumer(t, ok, consumer.Options{Concurrency: 1}),
		mustConsumer(t, failing, consumer.Options{Concurrency: 1}),
	))
	j := e.waitFinished(t, "x")[0]
	if st := recv(t, stillRunning, "the failing consumer"); st != fdbq.Running {
		t.Errorf("job was %s after two of three acknowledgements", st)
	}
	if j.Outcome != fdbq.Failed || j.Error != "third consumer refused" {
		t.Fatalf("job: %s %q", j.Outcome, j.Error)
	}
}

type seqJob struct {
	Key string `json:"key"`
	Seq int    `json:"seq"`
}

// addSequences adds keys×seqs jobs, in random order, scheduled at strictly
// increasing times per key (interleaved across keys), all in the fake
// clock's past once it is advanced.
func addSequences(t *testing.T, e *env, keys, seqs int) []string {
	var jobs []fdbq.NewJob
	base := e.clock.Now()
	for k := range keys {
		for s := range seqs {
			key := fmt.Sprint("k", k)
			jobs = append(jobs, fdbq.NewJob{
				ID:          fmt.Sprintf("%s-%03d", key, s),
				Data:        json.RawMessage(fmt.Sprintf(`{"key":%q,"seq":%d}`, key, s)),
				ScheduledAt: base.Add(time.Duration(s*keys+(k*7)%keys) * time.Millisecond),
			})
		}
	}
	rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	e.add(t, jobs...)
	e.clock.Advance(time.Hour)
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func keyOf(l *fdbq.Lease) string {
	k, _, _ := strings.Cut(l.ID, "-")
	return k
}

// TestPartitionKeepsPerKeyOrder: under partition dispatch to copies of a
// one-at-a-time consumer, the jobs of one key run one at a time, in the
// order of their scheduled times, while keys run in parallel.
func TestPartitionKeepsPerKeyOrder(t *testing.T) {
	const keys, seqs, partitions = 10, 50, 4
	e := newEnv(t, envOptions{clock: newFakeClock()})
	addSequences(t, e, keys, seqs)

	var mu sync.Mutex
	order := map[string][]int{}
	active := map[string]int{}
	var overlaps []string
	running, maxRunning := 0, 0
	done := make(chan struct{})
	handled := 0
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[seqJob]) (int, error) {
		mu.Lock()
		k := j.Data.Key
		active[k]++
		if active[k] > 1 {
			overlaps = append(overlaps, j.ID)
		}
		order[k] = append(order[k], j.Data.Seq)
		running++
		maxRunning = max(maxRunning, running)
		mu.Unlock()
		// Give the scheduler a chance to run other partitions meanwhile.
		for range 10 {
			select {
			case <-ctx.Done():
			default:
			}
		}
		mu.Lock()
		active[k]--
		running--
		handled++
		if handled == keys*seqs {
			close(done)
		}
		mu.Unlock()
		return j.Data.Seq, nil
	}, consumer.Options{Concurrency: 1})
	e.start(t, pipeline.From(e.producer(producer.Options{})).
		Dispatch(pipeline.PartitionDispatcher(keyOf)).
		To(pipeline.Copies(c, partitions)...))
	recv(t, done, "all jobs")
	e.waitStore(t, "all finished", func() bool { return e.count(t, fdbq.Finished) == keys*seqs })

	mu.Lock()
	defer mu.Unlock()
	if len(overlaps) > 0 {
		t.Errorf("jobs ran alongside another job of their key: %v", overlaps)
	}
	for k := range keys {
		key := fmt.Sprint("k", k)
		got := order[key]
		if len(got) != seqs {
			t.Errorf("key %s: %d jobs handled, want %d", key, len(got), seqs)
			continue
		}
		for i, s := range got {
			if s != i {
				t.Errorf("key %s handled out of order: %v", key, got)
				break
			}
		}
	}
	t.Logf("at most %d handlers ran at once", maxRunning)
}

// TestPartitionMapsKeyToOneConsumer: each key is handled by exactly one
// partition, and the keys spread over several partitions.
func TestPartitionMapsKeyToOneConsumer(t *testing.T) {
	const keys, seqs, partitions = 10, 20, 4
	e := newEnv(t, envOptions{clock: newFakeClock()})
	all := addSequences(t, e, keys, seqs)
	var mu sync.Mutex
	owners := map[string]map[int]bool{}
	var cs []*consumer.Consumer
	for i := range partitions {
		cs = append(cs, mustConsumer(t, func(ctx context.Context, j *consumer.Job[seqJob]) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			if owners[j.Data.Key] == nil {
				owners[j.Data.Key] = map[int]bool{}
			}
			owners[j.Data.Key][i] = true
			return i, nil
		}, consumer.Options{Concurrency: 1}))
	}
	e.start(t, pipeline.From(e.producer(producer.Options{})).Dispatch(pipeline.PartitionDispatcher(keyOf)).To(cs...))
	e.waitStore(t, "all finished", func() bool { return e.count(t, fdbq.Finished) == int64(len(all)) })
	mu.Lock()
	defer mu.Unlock()
	used := map[int]bool{}
	for k, o := range owners {
		if len(o) != 1 {
			t.Errorf("key %s handled by partitions %v", k, o)
		}
		for i := range o {
			used[i] = true
		}
	}
	if len(owners) != keys {
		t.Errorf("%d keys handled, want %d", len(owners), keys)
	}
	if len(used) < 2 {
		t.Errorf("all keys went to partitions %v", used)
	}
}

// TestDemandDispatchSpreads: the demand dispatcher gives each job to the
// consumer with the most outstanding demand, so one-at-a-time consumers
// each get one of the first jobs: the handlers meet at a barrier that only
// opens when every consumer holds a job.
func TestDemandDispatchSpreads(t *testing.T) {
	e := newEnv(t, envOptions{})
	const consumers, n = 3, 30
	all := jobIDs("d", n)
	e.add(t, newJobs(all, "")...)
	arrived := make(chan int, n)
	barrier := make(chan struct{})
	var mu sync.Mutex
	counts := make([]int, consumers)
	var cs []*consumer.Consumer
	for i := range consumers {
		cs = append(cs, mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (int, error) {
			arrived <- i
			select {
			case <-barrier:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			mu.Lock()
			counts[i]++
			mu.Unlock()
			return i, nil
		}, consumer.Options{Concurrency: 1}))
	}
	e.start(t, pipeline.From(e.producer(producer.Options{})).To(cs...))
	first := map[int]bool{}
	for range consumers {
		first[recv(t, arrived, "a consumer at the barrier")] = true
	}
	if len(first) != consumers {
		t.Fatalf("the first %d jobs went to consumers %v", consumers, first)
	}
	close(barrier)
	e.waitFinished(t, all...)
	mu.Lock()
	defer mu.Unlock()
	for i, c := range counts {
		if c == 0 {
			t.Errorf("consumer %d handled nothing: %v", i, counts)
		}
	}
	t.Logf("jobs per consumer: %v", counts)
}
