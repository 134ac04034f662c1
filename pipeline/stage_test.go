package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

type greeting struct {
	To string `json:"to"`
}

// TestFilterAndMap: filtered jobs finish at once with {"filtered":true}
// and never reach the handler (their demand goes back, so a queue of
// mostly filtered jobs still drains through a consumer of small demand);
// Map rewrites what the handler sees; a Map error fails the attempt.
func TestFilterAndMap(t *testing.T) {
	e := newEnv(t, envOptions{})
	const n = 60
	var jobs []fdbq.NewJob
	var kept, dropped []string
	expected := map[string]string{}
	for i := range n {
		id := fmt.Sprintf("g%02d", i)
		jobs = append(jobs, fdbq.NewJob{ID: id, Data: json.RawMessage(fmt.Sprintf(`{"to":"user%d"}`, i)), MaxAttempts: 1})
		if i%5 == 0 {
			kept = append(kept, id)
			expected[id] = fmt.Sprintf("hello USER%d", i)
		} else {
			dropped = append(dropped, id)
		}
	}
	jobs = append(jobs, fdbq.NewJob{ID: "unmappable", Data: json.RawMessage(`{"to":""}`), MaxAttempts: 1})
	e.add(t, jobs...)

	var mu sync.Mutex
	seen := map[string]string{}
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[greeting]) (string, error) {
		mu.Lock()
		seen[j.ID] = j.Data.To
		mu.Unlock()
		return "hello " + j.Data.To, nil
	}, consumer.Options{Concurrency: 1, MaxDemand: 2})
	filter := pipeline.Filter(func(l *fdbq.Lease) bool {
		return l.ID == "unmappable" || strings.HasSuffix(l.ID, "0") || strings.HasSuffix(l.ID, "5")
	})
	mapper := pipeline.Map(func(ctx context.Context, l *fdbq.Lease) error {
		var g greeting
		if err := json.Unmarshal(l.Data, &g); err != nil {
			return err
		}
		if g.To == "" {
			return errors.New("no recipient")
		}
		b, err := json.Marshal(greeting{To: strings.ToUpper(g.To)})
		l.Data = b
		return err
	})
	e.start(t, pipeline.From(e.producer(producer.Options{})).Via(filter, mapper).To(c))

	all := append(append([]string{"unmappable"}, kept...), dropped...)
	e.waitStore(t, "all finished", func() bool { return e.count(t, fdbq.Finished) == int64(len(all)) })
	for _, id := range dropped {
		j := e.get(t, id)
		if j.Outcome != fdbq.Succeeded || string(j.Result) != `{"filtered":true}` || j.Attempts != 1 {
			t.Errorf("filtered job %s: %s %s after %d attempts", id, j.Outcome, j.Result, j.Attempts)
		}
	}
	for _, id := range kept {
		j := e.get(t, id)
		if want := fmt.Sprintf("%q", expected[id]); j.Outcome != fdbq.Succeeded || string(j.Result) != want {
			t.Errorf("kept job %s: %s %s, want %s", id, j.Outcome, j.Result, want)
		}
	}
	if j := e.get(t, "unmappable"); j.Outcome != fdbq.Failed || j.Error != "no recipient" {
		t.Errorf("job Map refused: %s %q", j.Outcome, j.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	var got []string
	for id := range seen {
		got = append(got, id)
	}
	sort.Strings(got)
	if fmt.Sprint(got) != fmt.Sprint(kept) {
		t.Errorf("handler saw %v, want %v", got, kept)
	}
}

// TestMiddlewareInPipeline: Logging, Metrics, Timeout and Recover
// wrapped around a handler, outermost first.
func TestMiddlewareInPipeline(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.add(t,
		fdbq.NewJob{ID: "ok", MaxAttempts: 1},
		fdbq.NewJob{ID: "fail", MaxAttempts: 1},
		fdbq.NewJob{ID: "slow", MaxAttempts: 1},
		fdbq.NewJob{ID: "panic", MaxAttempts: 1},
	)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	type observation struct {
		typ, outcome string
		d            time.Duration
	}
	var mu sync.Mutex
	var obs []observation
	const timeout = 100 * time.Millisecond
	c := mustConsumer(t, func(ctx context.Context, j *consumer.Job[json.RawMessage]) (string, error) {
		switch j.ID {
		case "fail":
			return "", errors.New("it went wrong")
		case "slow":
			<-ctx.Done()
			return "", ctx.Err()
		case "panic":
			panic("kaboom")
		}
		return "fine", nil
	}, consumer.Options{Concurrency: 4},
		consumer.Logging(log),
		consumer.Metrics(func(typ, outcome string, d time.Duration) {
			mu.Lock()
			obs = append(obs, observation{typ, outcome, d})
			mu.Unlock()
		}),
		consumer.Timeout(timeout),
		consumer.Recover(),
	)
	e.start(t, pipeline.From(e.producer(producer.Options{})).To(c))
	got := e.waitFinished(t, "ok", "fail", "slow", "panic")
	if got[0].Outcome != fdbq.Succeeded {
		t.Errorf("ok: %s %q", got[0].Outcome, got[0].Error)
	}
	if got[1].Outcome != fdbq.Failed || got[1].Error != "it went wrong" {
		t.Errorf("fail: %s %q", got[1].Outcome, got[1].Error)
	}
	if got[2].Outcome != fdbq.Failed || !strings.Contains(got[2].Error, "deadline exceeded") {
		t.Errorf("slow: %s %q", got[2].Outcome, got[2].Error)
	}
	if got[3].Outcome != fdbq.Failed || !strings.Contains(got[3].Error, "kaboom") || !strings.Contains(got[3].Error, "goroutine ") {
		t.Errorf("panic: %s %q", got[3].Outcome, got[3].Error)
	}

	mu.Lock()
	outcomes := map[string]int{}
	for _, o := range obs {
		if o.typ != "t" {
			t.Errorf("metrics type %q", o.typ)
		}
		outcomes[o.outcome]++
		if o.outcome == consumer.OutcomeTimeout && o.d < timeout {
			t.Errorf("timed-out attempt measured %v, under the %v timeout", o.d, timeout)
		}
	}
	mu.Unlock()
	want := map[string]int{consumer.OutcomeSucceeded: 1, consumer.OutcomeFailed: 1, consumer.OutcomePanicked: 1, consumer.OutcomeTimeout: 1}
	if fmt.Sprint(outcomes) != fmt.Sprint(want) {
		t.Errorf("metrics outcomes %v, want %v", outcomes, want)
	}

	out := logs.String()
	for _, want := range []string{
		`msg="job started" type=t id=ok attempt=1`,
		`msg="job succeeded" type=t id=ok`,
		`msg="job failed" type=t id=fail attempt=1`,
		`err="it went wrong"`,
		`msg="job failed" type=t id=slow`,
		`msg="job failed" type=t id=panic`,
		`kaboom`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}
