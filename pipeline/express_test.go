package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// backlogEnv is a pipeline whose consumer's demand (2) is held by two
// jobs of a backlogged key "a" whose handlers block until released,
// with a third handler slot free: a job of another key starts only if it
// is accepted beyond the demand.
type backlogEnv struct {
	*env
	p       atomic.Pointer[pipeline.Pipeline]
	started chan string
	release chan struct{}
	// over counts handler starts that saw the pipeline hold more jobs
	// than its demand plus the express budget.
	over atomic.Int64
}

func newBacklogEnv(t *testing.T, express int, po producer.Options) *backlogEnv {
	e := &backlogEnv{env: newEnv(t, envOptions{}), started: make(chan string, 1000), release: make(chan struct{})}
	var backlog []fdbq.NewJob
	for i := range 40 {
		backlog = append(backlog, fdbq.NewJob{ID: fmt.Sprint("a", i), Key: "a"})
	}
	e.add(t, backlog...)
	const maxDemand = 2
	budget := express
	if budget == 0 {
		budget = pipeline.DefaultExpress
	}
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (bool, error) {
		if n := e.p.Load().InFlight(); n > maxDemand+max(budget, 0) {
			e.over.Add(1)
		}
		e.started <- j.ID
		if j.Key == "a" {
			select {
			case <-e.release:
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
		return true, nil
	}, consumer.Options{Concurrency: 3, MaxDemand: maxDemand, MinDemand: 1})
	p, err := pipeline.From(e.producer(po)).To(c).
		WithOptions(pipeline.Options{NoRecovery: true, Express: express}).Build()
	if err != nil {
		t.Fatal(err)
	}
	e.p.Store(p) // before a handler can read it
	startBuilt(t, p)
	for range maxDemand {
		if id := recv(t, e.started, "a job of the backlog"); id[0] != 'a' {
			t.Fatalf("started %s before the backlog", id)
		}
	}
	if express >= 0 {
		// The express loop's first read of the zones, the baseline a new
		// key's mark is told from: the one watch of the type's watch key,
		// since no accept of the producer waits.
		e.spy.waitArmed(t, 1)
	}
	return e
}

// waitDemand waits until the consumers' demand not yet met is n: the
// asks that follow the jobs that ended have reached the pipeline.
func (e *backlogEnv) waitDemand(t *testing.T, n int) {
	t.Helper()
	p := e.p.Load()
	for {
		changed := pipeline.DemandChanged(p) // before the read: no change falls between
		if p.Demand() == n {
			return
		}
		recv(t, changed, fmt.Sprintf("demand %d (now %d)", n, p.Demand()))
	}
}

// TestExpressStartsANewKeyWhileTheBacklogHoldsTheDemand: with the
// consumer's demand used up by a backlogged key, a job of a new key is
// accepted at once by the express loop, beyond the demand, and starts
// while the backlog's handlers still hold it; without the express loop it
// would wait for the consumer to ask again.
func TestExpressStartsANewKeyWhileTheBacklogHoldsTheDemand(t *testing.T) {
	e := newBacklogEnv(t, 0, producer.Options{})
	for i := range 5 {
		id := fmt.Sprint("b", i)
		e.add(t, fdbq.NewJob{ID: id, Key: fmt.Sprint("b", i)})
		if got := recv(t, e.started, "the new key's job"); got != id {
			t.Fatalf("started %s, want %s", got, id)
		}
		e.waitFinished(t, id)
	}
	if n := e.over.Load(); n > 0 {
		t.Fatalf("%d starts saw more jobs held than the demand and the express budget", n)
	}
	close(e.release)
}

// TestExpressDoesNotWaitForTheAcceptInFlight: a job of a new key added
// while the producer's accept of the backlog is on its way to commit (it
// read the zones before the job was added) and the consumers have asked
// again meanwhile starts at once, by an express accept from the demand
// left, not with the producer's next accept after the one in flight.
func TestExpressDoesNotWaitForTheAcceptInFlight(t *testing.T) {
	// One accept loop: its accept in flight is the producer's only one.
	e := newBacklogEnv(t, 0, producer.Options{Acceptors: 1})
	// The producer's next accept, of the backlog's next job, is held
	// back at its commit until the end of the test.
	hold := e.spy.holdCommit(queueKey(tagActive, "t"))
	defer close(hold.release)
	e.release <- struct{}{} // one of the two ends: the consumer asks for one more
	recv(t, hold.held, "the producer's accept held at its commit")
	e.release <- struct{}{} // the other ends: the consumer asks again
	e.waitDemand(t, 2)
	e.add(t, fdbq.NewJob{ID: "b0", Key: "b"})
	if got := recv(t, e.started, "the new key's job"); got != "b0" {
		t.Fatalf("started %s, want b0", got)
	}
	e.waitFinished(t, "b0")
	if n := e.over.Load(); n > 0 {
		t.Fatalf("%d starts saw more jobs held than the demand and the express budget", n)
	}
	close(e.release)
}

// TestExpressBudget: however many new keys come, the pipeline holds at
// most its demand and Options.Express jobs more, and every job is worked
// once the backlog's handlers let go.
func TestExpressBudget(t *testing.T) {
	seed := jobtest.Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed))
	for _, express := range []int{1, 3} {
		t.Run(fmt.Sprint("express=", express), func(t *testing.T) {
			e := newBacklogEnv(t, express, producer.Options{})
			var ids []string
			for i := range 30 {
				var batch []fdbq.NewJob
				for range 1 + rng.IntN(3) {
					id := fmt.Sprint("k", i, "-", len(batch))
					batch = append(batch, fdbq.NewJob{ID: id, Key: fmt.Sprint("k", rng.IntN(10))})
					ids = append(ids, id)
				}
				e.add(t, batch...)
			}
			close(e.release)
			e.waitFinished(t, ids...)
			if n := e.over.Load(); n > 0 {
				t.Fatalf("%d starts saw more jobs held than the demand and the express budget %d", n, express)
			}
		})
	}
}

// TestExpressServesAKeyAgain: a key whose jobs the pipeline took gets its
// next one in the zone that held them, while the backlog holds the
// demand: it is served at once like a new key, not passed over because
// the zone's mark stayed from before (an accept that empties a zone
// clears its mark). Each of the key's jobs is followed by a job of a new
// key, which tells that the express loop has read the zones since.
func TestExpressServesAKeyAgain(t *testing.T) {
	e := newBacklogEnv(t, 0, producer.Options{})
	for i := range 3 * fdbq.DefaultZones {
		b, c := fmt.Sprint("b", i), fmt.Sprint("c", i)
		e.add(t, fdbq.NewJob{ID: b, Key: "b"})
		e.add(t, fdbq.NewJob{ID: c, Key: c})
		for recv(t, e.started, "a job of b or c") != c {
		}
		// c's start tells that the express loop read the zones after b
		// was added: b was taken then, by the same accept or before.
		if st := e.get(t, b).State; st == fdbq.Pending {
			t.Fatalf("%s of key b, with nothing of b ready before it, is still pending after %s started", b, c)
		}
		e.waitFinished(t, b, c)
		for len(e.started) > 0 {
			<-e.started
		}
	}
	close(e.release)
}
