// Package gostreams adapts jobstage to github.com/reugn/go-streams: a
// producer as a go-streams Source, a consumer as a Sink, and a go-streams
// Flow as a pipeline stage. It is a package of its own so that a program
// that does not use go-streams does not link it.
//
// go-streams moves `any` over channels and has no demand, context or
// errors; jobstage's envelopes carry those across: each element is a
// *consumer.Envelope (the job, its context, its acknowledgement), and
// demand is the capacity of the bounded channels.
//
// A go-streams flow used here must emit every envelope it receives — as
// the element itself or inside a []any (flow.Batch) — because jobstage
// cannot see a job a flow drops: it would stay accepted until the pipeline
// stops and releases it. To drop jobs, use pipeline.Filter.
//
// The Example runs jobs from a Source through a Map and a Batch into a
// Sink; ExampleViaFlow runs the same flows as stages of a pipeline.
package gostreams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/reugn/go-streams"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// ViaFlow runs a go-streams Flow (flow.Map, flow.Batch, …) as a pipeline
// stage. Elements that come out as []any are flattened, so a flow.Batch
// paces jobs in groups. An element that is not an envelope is a
// programming error: it is logged and dropped.
//
// The stage feeds the flow's In and reads its Out; it never calls the
// flow's Via or To. A flow that does its work there rather than between In
// and Out does not do it here: flow.Throttler paces elements only in Via
// and To, so under ViaFlow it passes them unpaced, and its quota goroutine
// never ends.
func ViaFlow(f streams.Flow) pipeline.Stage {
	return pipeline.NewStage(func(in <-chan *consumer.Envelope, out chan<- *consumer.Envelope, drop func()) {
		go func() {
			defer close(f.In())
			for e := range in {
				f.In() <- e
			}
		}()
		for v := range f.Out() {
			forwardAny(v, out)
		}
	})
}

func forwardAny(v any, out chan<- *consumer.Envelope) {
	switch x := v.(type) {
	case *consumer.Envelope:
		out <- x
	case []any:
		for _, y := range x {
			forwardAny(y, out)
		}
	default:
		slog.Error("gostreams: a go-streams flow emitted a value that is not a *consumer.Envelope; dropped", "type", fmt.Sprintf("%T", v))
	}
}

// Source is a jobstage producer as a go-streams Source: its Out channel
// emits *consumer.Envelope values, at most Demand of them unacknowledged at
// once (the bounded channel and the count of jobs in flight are the
// demand). Acknowledge each envelope (a Sink of this package does), or the
// source stops emitting once Demand jobs are in flight.
type Source struct {
	p      *producer.Producer
	demand int
	out    chan any
	slots  chan struct{} // one token per job that may be in flight
	cancel context.CancelFunc
	done   chan struct{}
}

var _ streams.Source = (*Source)(nil)

// NewSource starts pulling jobs from p for as long as ctx lasts. Close
// stops it and releases the jobs it accepted that nobody started.
func NewSource(ctx context.Context, p *producer.Producer, demand int) (*Source, error) {
	if demand <= 0 {
		return nil, errors.New("gostreams: source demand must be positive")
	}
	info, err := p.Queue().GetType(ctx, p.Queue().DB(), p.Type())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Source{p: p, demand: demand, out: make(chan any, demand), slots: make(chan struct{}, demand), cancel: cancel, done: make(chan struct{})}
	for i := 0; i < demand; i++ {
		s.slots <- struct{}{}
	}
	go s.loop(ctx, info.Settings.ActivityTimeout/3)
	return s, nil
}

func (s *Source) loop(ctx context.Context, hb time.Duration) {
	defer close(s.done)
	defer close(s.out)
	var inflight sync.Map
	defer func() {
		var envs []*consumer.Envelope
		inflight.Range(func(k, _ any) bool {
			envs = append(envs, k.(*consumer.Envelope))
			return true
		})
		_, _ = consumer.ReleaseUnstarted(context.WithoutCancel(ctx), envs)
	}()
	for {
		// Take all free slots: that is the demand.
		n := 0
		select {
		case <-s.slots:
			n = 1
		case <-ctx.Done():
			return
		}
	more:
		for n < s.p.BatchLimit() {
			select {
			case <-s.slots:
				n++
			default:
				break more
			}
		}
		leases, err := s.p.Pull(ctx, n)
		for i := len(leases); i < n; i++ {
			s.slots <- struct{}{}
		}
		if err != nil {
			return
		}
		for _, l := range leases {
			e := consumer.NewEnvelope(context.WithoutCancel(ctx), s.p.Queue(), l, consumer.EnvelopeOptions{
				Heartbeat: hb,
				OnDone: func(e *consumer.Envelope) {
					inflight.Delete(e)
					s.slots <- struct{}{}
				},
			})
			inflight.Store(e, struct{}{})
			s.out <- e
		}
	}
}

// Out implements streams.Outlet.
func (s *Source) Out() <-chan any { return s.out }

// Via implements streams.Source.
func (s *Source) Via(f streams.Flow) streams.Flow {
	go func() {
		defer close(f.In())
		for v := range s.out {
			f.In() <- v
		}
	}()
	return f
}

// Close stops pulling; jobs accepted but not started go back to pending.
func (s *Source) Close() {
	s.cancel()
	<-s.done
}

// Sink is a go-streams Sink that runs a jobstage consumer on the envelopes
// it receives, acknowledging each.
type Sink struct {
	in   chan any
	done chan struct{}
}

var _ streams.Sink = (*Sink)(nil)

// NewSink starts a sink running c's handler, up to its concurrency.
func NewSink(c *consumer.Consumer) *Sink {
	s := &Sink{in: make(chan any), done: make(chan struct{})}
	envs := make(chan *consumer.Envelope, c.Options().MaxDemand)
	go func() {
		defer close(envs)
		for v := range s.in {
			forwardAny(v, envs)
		}
	}()
	go func() {
		defer close(s.done)
		c.Serve(envs, func(int) {})
	}()
	return s
}

// In implements streams.Inlet.
func (s *Sink) In() chan<- any { return s.in }

// AwaitCompletion implements streams.Sink.
func (s *Sink) AwaitCompletion() { <-s.done }
