package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/lifecycle"
	"github.com/jobstage/jobstage/producer"
)

// Builder declares a pipeline:
//
//	p, err := pipeline.From(producer.New(q, "email", producer.Options{})).
//		Via(pipeline.Filter(notSpam)).
//		To(consumer.Must(consumer.New(sendEmail, consumer.Options{Concurrency: 16}))).
//		Build()
type Builder struct {
	producers  []*producer.Producer
	stages     []Stage
	consumers  []*consumer.Consumer
	dispatcher Dispatcher
	opts       Options
	err        error
}

// Options tune a pipeline.
type Options struct {
	// DrainTimeout bounds how long Stop waits for running handlers before
	// it cancels their contexts (their jobs then go back to pending);
	// default 30 s (Broadway's shutdown default). The ctx given to Stop
	// bounds the whole stop.
	DrainTimeout time.Duration
	// Heartbeat is the interval of each accepted job's heartbeat; default a
	// third of the type's activity timeout. Start refuses one that is not
	// below the activity timeout of a producer's type.
	Heartbeat time.Duration
	// BatchFinish commits outcomes of jobs that end together in one
	// transaction (consumer.BatchFinisher).
	BatchFinish bool
	Logger      *slog.Logger
	// OnEnded, if set, is called with each job once its outcome is
	// committed or it was released (consumer.Envelope's Err and Ended say
	// what happened), before the pipeline counts it out of flight: so
	// when Stop returns, it was called for every job the pipeline held.
	// It must not block (metrics.Metrics.Ended counts retries).
	OnEnded func(*consumer.Envelope)
	// NoRecovery leaves out the activity monitor (fdbq.Monitor) a
	// pipeline otherwise runs while it runs: the crash recovery that makes
	// the jobs of a worker that died (this process, an earlier run of it,
	// another process) pending again after their activity timeout. Set it
	// where a monitor runs already (jobstage.Client, `jobstage serve`).
	// The pipelines of a process that work one queue share one monitor.
	NoRecovery bool
	// Monitor configures the monitor a pipeline starts; the pipelines
	// that share it use the first one's.
	Monitor fdbq.MonitorOptions
	// Express is how many jobs an express accept takes, and how many
	// beyond its consumers' demand the pipeline may hold from them: when
	// a fairness key's jobs become ready (its zone is marked) while the
	// producer works a backlog, its express loop accepts the key's first
	// jobs at once, rather than with the producer's next accept of a full
	// batch (after the one in flight) or at the consumers' next ask,
	// behind the keys with a backlog. It takes from the demand left, or
	// borrows beyond it, which a consumer's next ask pays back. Default
	// DefaultExpress; negative: none. Under demand dispatch only: the
	// other dispatchers keep an order or a pace that jobs out of turn
	// would break.
	Express int
}

// DefaultExpress is Options.Express's default.
const DefaultExpress = 8

// From starts a pipeline at one or more producers.
func From(producers ...*producer.Producer) *Builder {
	b := &Builder{producers: producers, dispatcher: DemandDispatcher()}
	if len(producers) == 0 {
		b.err = errors.New("pipeline: no producer")
	}
	for _, p := range producers {
		if p.Queue() != producers[0].Queue() {
			b.err = errors.New("pipeline: producers must share one queue")
		}
	}
	return b
}

// Via adds producer-consumer stages between the producers and consumers.
func (b *Builder) Via(stages ...Stage) *Builder {
	b.stages = append(b.stages, stages...)
	return b
}

// Dispatch chooses how jobs are spread over the consumers; default
// DemandDispatcher.
func (b *Builder) Dispatch(d Dispatcher) *Builder {
	b.dispatcher = d
	return b
}

// WithOptions sets the pipeline's options.
func (b *Builder) WithOptions(o Options) *Builder {
	b.opts = o
	return b
}

// To ends the pipeline at consumers. The same consumer may be given more
// than once: each occurrence is a separate subscription.
func (b *Builder) To(consumers ...*consumer.Consumer) *Builder {
	b.consumers = append(b.consumers, consumers...)
	return b
}

// Copies returns c n times, for To: n subscriptions of one consumer, as
// partition dispatch needs one per partition.
func Copies(c *consumer.Consumer, n int) []*consumer.Consumer {
	out := make([]*consumer.Consumer, n)
	for i := range out {
		out[i] = c
	}
	return out
}

// Build validates the declaration and returns a stopped pipeline.
func (b *Builder) Build() (*Pipeline, error) {
	if b.err != nil {
		return nil, b.err
	}
	if len(b.consumers) == 0 {
		return nil, errors.New("pipeline: no consumer")
	}
	for i, c := range b.consumers {
		for _, pr := range b.producers {
			if k := c.Kind(); k != "" && k != pr.Type() {
				return nil, fmt.Errorf("pipeline: consumer %d works jobs of kind %q (its data type's Kind), but a producer accepts type %q", i, k, pr.Type())
			}
		}
	}
	if b.dispatcher.kind == partitionDispatch {
		if b.dispatcher.key == nil {
			return nil, errors.New("pipeline: partition dispatcher without a key function")
		}
		for i, c := range b.consumers {
			if c.Options().Concurrency != 1 {
				return nil, fmt.Errorf("pipeline: partition dispatch keeps per-key order by running each consumer one job at a time; consumer %d has concurrency %d (give several consumers, e.g. pipeline.Copies, for parallelism)", i, c.Options().Concurrency)
			}
		}
	}
	o := b.opts
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Express == 0 {
		o.Express = DefaultExpress
	}
	if o.Monitor.Logger == nil {
		o.Monitor.Logger = o.Logger
	}
	pb := *b
	if pb.dispatcher.kind == partitionDispatch {
		// Per-key order needs the jobs accepted in index order: a window of
		// due jobs picked from at random would let a key's later job
		// overtake an earlier one left for the next batch, and so would
		// two accepts in flight at once.
		pb.producers = make([]*producer.Producer, len(b.producers))
		for i, pr := range b.producers {
			po := pr.Options()
			po.Window, po.Acceptors = 1, 1
			pb.producers[i] = producer.New(pr.Queue(), pr.Type(), po)
		}
	}
	return &Pipeline{b: pb, opts: o, life: lifecycle.Lifecycle{Name: "pipeline.Pipeline"}, inflight: make(map[*consumer.Envelope]struct{})}, nil
}

// Pipeline runs producers, stages and consumers. Start it, and Stop it to
// drain: producers stop accepting, jobs accepted but not started go back
// to pending at once, and running handlers get DrainTimeout to finish.
// A pipeline runs once.
type Pipeline struct {
	b    Builder
	opts Options
	life lifecycle.Lifecycle

	mu       sync.Mutex
	inflight map[*consumer.Envelope]struct{}
	// keys counts the envelopes in flight by the jobs' fairness keys.
	prodStop  context.CancelFunc
	jobCancel context.CancelCauseFunc
	prodWG    sync.WaitGroup
	stageWG   sync.WaitGroup
	consWG    sync.WaitGroup
	ledger    *ledger
	finisher  *consumer.BatchFinisher
	// heartbeaters renew the leases of each producer's jobs, one per job
	// type: one goroutine each, not one per job.
	heartbeaters map[string]*consumer.Heartbeater
	heads        chan *consumer.Envelope
	monitor      *sharedMonitor // nil under NoRecovery
}

// Start starts the pipeline. It looks up the producers' job types (the
// heartbeat interval comes from their activity timeouts) and fails if one
// is not registered; the pipeline may then be started again. Start fails
// if the pipeline was started or stopped before.
func (p *Pipeline) Start(ctx context.Context) error {
	return p.life.Start(ctx, p.start)
}

func (p *Pipeline) start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	heartbeats, err := p.heartbeatIntervals(ctx)
	if err != nil {
		return err
	}
	q := p.b.producers[0].Queue()
	if !p.opts.NoRecovery {
		m, err := acquireMonitor(ctx, q, p.opts.Monitor)
		if err != nil {
			return fmt.Errorf("pipeline: start the activity monitor: %w", err)
		}
		p.monitor = m
	}
	p.heartbeaters = map[string]*consumer.Heartbeater{}
	for typ, every := range heartbeats {
		h := consumer.NewHeartbeater(every)
		if err := h.Start(ctx); err != nil {
			return err // not reached: a new heartbeater starts
		}
		p.heartbeaters[typ] = h
	}

	if p.opts.BatchFinish {
		p.finisher = consumer.NewBatchFinisher(q, 0)
		if err := p.finisher.Start(ctx); err != nil {
			return err // not reached: a new finisher starts
		}
	}
	p.startFlow()

	prodCtx, prodStop := context.WithCancel(context.WithoutCancel(ctx))
	jobCtx, jobCancel := context.WithCancelCause(context.WithoutCancel(ctx))
	p.prodStop, p.jobCancel = prodStop, jobCancel
	for _, pr := range p.b.producers {
		// Several accept loops per producer keep accepts in flight while
		// one commits: one loop alone delivers at most a batch per commit
		// latency, however fast the handlers are.
		for range pr.Acceptors() {
			p.prodWG.Add(1)
			go func(pr *producer.Producer) {
				defer p.prodWG.Done()
				p.produce(prodCtx, jobCtx, pr, p.heartbeaters[pr.Type()])
			}(pr)
		}
		if p.opts.Express > 0 && p.b.dispatcher.kind == demandDispatch {
			p.prodWG.Add(1)
			go func(pr *producer.Producer) {
				defer p.prodWG.Done()
				p.express(prodCtx, jobCtx, pr, p.heartbeaters[pr.Type()], p.fin())
			}(pr)
		}
	}
	return nil
}

// heartbeatIntervals looks up each producer's job type and returns, by
// type, how often its jobs' leases are renewed: Options.Heartbeat, else a
// third of the type's activity timeout. A type that cannot be read (one
// not registered) fails the start.
func (p *Pipeline) heartbeatIntervals(ctx context.Context) (map[string]time.Duration, error) {
	heartbeats := map[string]time.Duration{}
	for _, pr := range p.b.producers {
		info, err := pr.Queue().GetType(ctx, pr.Queue().DB(), pr.Type())
		if err != nil {
			return nil, fmt.Errorf("pipeline: producer of %q: %w", pr.Type(), err)
		}
		hb := p.opts.Heartbeat
		if hb <= 0 {
			hb = info.Settings.ActivityTimeout / 3
		}
		if hb >= info.Settings.ActivityTimeout {
			// The monitor would take every running job back between two
			// heartbeats, and another worker would run it too.
			return nil, fmt.Errorf("pipeline: Options.Heartbeat %v is not below the activity timeout %v of type %q: running jobs would be taken back and run twice", hb, info.Settings.ActivityTimeout, pr.Type())
		}
		heartbeats[pr.Type()] = hb
	}
	return heartbeats, nil
}

// startFlow makes the ledger and p.heads, where the producers send the
// jobs they accept, and starts the goroutines the jobs flow through from
// there: one per stage, chained in order, one per consumer, and the
// dispatcher from the last stage to the consumers. The stages and the
// dispatcher count in p.stageWG, the consumers in p.consWG.
//
// REQUIRES: p.mu is held.
func (p *Pipeline) startFlow() {
	broadcast := p.b.dispatcher.kind == broadcastDispatch
	p.ledger = newLedger(len(p.b.consumers), broadcast)
	capacity := max(p.opts.Express, 0)
	for _, c := range p.b.consumers {
		capacity += c.Options().MaxDemand
	}
	// Every channel can hold all the demand there is, and what express
	// accepts borrow beyond it, so a send never blocks: backpressure
	// comes from demand, not from full channels.
	p.heads = make(chan *consumer.Envelope, capacity)
	last := p.heads
	for _, s := range p.b.stages {
		out := make(chan *consumer.Envelope, capacity)
		p.stageWG.Add(1)
		go func(s Stage, in <-chan *consumer.Envelope, out chan<- *consumer.Envelope) {
			defer p.stageWG.Done()
			defer close(out)
			s.run(in, out, p.ledger.drop)
		}(s, last, out)
		last = out
	}
	ins := make([]chan *consumer.Envelope, len(p.b.consumers))
	for i, c := range p.b.consumers {
		ins[i] = make(chan *consumer.Envelope, capacity)
		p.consWG.Add(1)
		go func(i int, c *consumer.Consumer) {
			defer p.consWG.Done()
			c.Serve(ins[i], func(n int) { p.ledger.ask(i, n) })
		}(i, c)
	}
	p.stageWG.Add(1)
	go func() {
		defer p.stageWG.Done()
		p.dispatch(last, ins)
	}()
}

// produce is one producer's loop: reserve demand, accept that many jobs,
// send them down the pipeline.
func (p *Pipeline) produce(ctx, jobCtx context.Context, pr *producer.Producer, hb *consumer.Heartbeater) {
	fin := p.fin()
	for {
		k := p.ledger.reserve(ctx, pr.BatchLimit())
		if k == 0 {
			return
		}
		leases, err := pr.Pull(ctx, k)
		p.ledger.unreserve(k - len(leases))
		if err != nil {
			if ctx.Err() == nil {
				p.opts.Logger.Error("pipeline: producer stopped", "type", pr.Type(), "err", err)
			}
			return
		}
		p.send(jobCtx, pr, hb, fin, leases)
	}
}

// send sends accepted jobs down the pipeline.
func (p *Pipeline) send(jobCtx context.Context, pr *producer.Producer, hb *consumer.Heartbeater, fin consumer.Finisher, leases []*fdbq.Lease) {
	acks := 1
	if p.b.dispatcher.kind == broadcastDispatch {
		acks = len(p.b.consumers)
	}
	for _, l := range leases {
		e := consumer.NewEnvelope(jobCtx, pr.Queue(), l, consumer.EnvelopeOptions{
			Acks: acks, Heartbeater: hb, Finisher: fin, OnDone: p.done,
		})
		p.track(e)
		p.heads <- e
	}
}

// fin is the finisher envelopes commit their outcomes through (nil: each
// its own).
func (p *Pipeline) fin() consumer.Finisher {
	if p.finisher != nil {
		return p.finisher
	}
	return nil
}

func (p *Pipeline) track(e *consumer.Envelope) {
	p.mu.Lock()
	p.inflight[e] = struct{}{}
	p.mu.Unlock()
}

// done is each envelope's OnDone.
func (p *Pipeline) done(e *consumer.Envelope) {
	if p.opts.OnEnded != nil {
		p.opts.OnEnded(e)
	}
	p.untrack(e)
}

func (p *Pipeline) untrack(e *consumer.Envelope) {
	p.mu.Lock()
	delete(p.inflight, e)
	p.mu.Unlock()
}

// InFlight is how many accepted jobs the pipeline holds: buffered or
// running, not yet committed.
func (p *Pipeline) InFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.inflight)
}

// Demand is the demand the consumers hold and have not received jobs for.
func (p *Pipeline) Demand() int {
	p.mu.Lock()
	l := p.ledger // set by Start, under p.mu
	p.mu.Unlock()
	if l == nil {
		return 0
	}
	w, _ := l.snapshot()
	return w
}

// dispatch routes jobs from the last stage to the consumers.
func (p *Pipeline) dispatch(in <-chan *consumer.Envelope, outs []chan *consumer.Envelope) {
	defer func() {
		for _, o := range outs {
			close(o)
		}
	}()
	d := p.b.dispatcher
	for e := range in {
		switch d.kind {
		case broadcastDispatch:
			p.ledger.deliverAll()
			for _, o := range outs {
				o <- e
			}
		case partitionDispatch:
			i := d.partition(e.Lease, len(outs))
			p.ledger.deliverTo(i)
			outs[i] <- e
		default:
			outs[p.ledger.deliverMost()] <- e
		}
	}
}

// Stop drains the pipeline: producers stop accepting; jobs accepted but
// not started are handed back to pending at once; running handlers get
// DrainTimeout (or until ctx ends, if sooner) to finish, then their
// contexts are cancelled and their jobs handed back. Stop returns when
// everything stopped or ctx ended. It is safe before Start (which then
// fails), twice, and from several goroutines.
func (p *Pipeline) Stop(ctx context.Context) error {
	return p.life.Stop(ctx, func(hurry context.Context, started bool) error {
		if !started {
			return nil
		}
		return p.drain(hurry)
	})
}

// drain stops what start started. hurry ends when a Stop gives up
// waiting: the handlers are cancelled then, without their drain timeout.
func (p *Pipeline) drain(hurry context.Context) error {
	stopHurry := context.AfterFunc(hurry, func() { p.jobCancel(consumer.ErrStopping) })
	defer stopHurry()
	var errs []error
	p.prodStop()
	p.prodWG.Wait()
	close(p.heads)

	p.mu.Lock()
	envs := make([]*consumer.Envelope, 0, len(p.inflight))
	for e := range p.inflight {
		envs = append(envs, e)
	}
	p.mu.Unlock()
	releaseCtx, cancel := context.WithTimeout(context.Background(), p.opts.DrainTimeout)
	if _, err := consumer.ReleaseUnstarted(releaseCtx, envs); err != nil {
		errs = append(errs, fmt.Errorf("pipeline: release buffered jobs: %w", err))
	}
	cancel()

	done := make(chan struct{})
	go func() {
		p.stageWG.Wait()
		p.consWG.Wait()
		close(done)
	}()
	t := time.NewTimer(p.opts.DrainTimeout)
	select {
	case <-done:
		t.Stop()
	case <-t.C:
		// Past the deadline: cancel the handlers; their jobs go back to
		// pending as they return. One that ignores its context is left
		// behind, and its job to the activity monitor.
		p.jobCancel(consumer.ErrStopping)
		grace := time.NewTimer(time.Second)
		select {
		case <-done:
			grace.Stop()
		case <-grace.C:
			errs = append(errs, errors.New("pipeline: handlers still running after their contexts were cancelled; the activity monitor will retry their jobs"))
		}
	}
	// The finisher's and the heartbeaters' Stop wait only for the commit
	// or heartbeat in progress (and the finisher's for the outcomes the
	// handlers gave it, all of them by now).
	if p.finisher != nil {
		errs = append(errs, p.finisher.Stop(context.Background()))
	}
	for _, h := range p.heartbeaters {
		errs = append(errs, h.Stop(context.Background()))
	}
	if p.monitor != nil {
		errs = append(errs, p.monitor.release(context.Background()))
	}
	return errors.Join(errs...)
}

// Run starts the pipeline, waits for ctx to end, and stops it.
func (p *Pipeline) Run(ctx context.Context) error {
	if err := p.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), p.opts.DrainTimeout+5*time.Second)
	defer cancel()
	return p.Stop(stopCtx)
}
