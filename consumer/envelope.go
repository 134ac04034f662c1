package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jobstage/jobstage/fdbq"
)

// ErrHalted is fdbq.ErrHalt, the one error of a job whose lock is gone
// (recycled, canceled, removed), under the name a handler looks for: its
// context's cause wraps it then. The handler should stop, since nothing it
// commits with the job will be kept. errors.Is(err, ErrHalted) and
// errors.Is(err, fdbq.ErrHalt) are one test, so a handler's error from
// Job.Progress and its context's cause tell a halt alike.
var ErrHalted = fdbq.ErrHalt

// ErrStopping is the cause a pipeline gives the contexts of its jobs when
// it stops and its drain deadline has passed: a handler interrupted by it
// has its job handed back to pending without counting the attempt.
var ErrStopping = errors.New("consumer: pipeline stopping")

// ErrReleased is the cause of an envelope's context when the job was handed
// back to pending without running (a stopping pipeline).
var ErrReleased = errors.New("consumer: job released to pending")

// Envelope is one accepted job in flight through a pipeline: the lease, a
// context that is cancelled when the job must stop, a heartbeat that keeps
// the lease alive until the job is acknowledged, and the acknowledgement
// that commits the outcome. A job delivered to several consumers (a
// broadcast) is acknowledged by each; the last acknowledgement commits:
// finish if all succeeded, fail with the first error otherwise.
type Envelope struct {
	Lease *fdbq.Lease

	q      *fdbq.Queue
	fin    Finisher
	ctx    context.Context
	cancel context.CancelCauseFunc

	acks  atomic.Int32 // acknowledgements still expected
	state atomic.Int32 // buffered, started, settled

	mu     sync.Mutex
	result json.RawMessage
	err    error
	// tracer traces the commit (traceWith); handled is the context of
	// the last handle span (nil: none), the finish span's parent. Only
	// its values are used: it may have ended.
	tracer  trace.Tracer
	handled context.Context

	// finishSpan (nil: not traced) spans the commit of the outcome,
	// finishHow names the outcome: set by the last acknowledgement,
	// ended by finish.
	finishSpan trace.Span
	finishHow  string

	hb     *Heartbeater  // renews the lease, if set
	hbStop chan struct{} // stops the envelope's own heartbeat, if it has one
	done   chan struct{}
	outErr error      // what committing the outcome returned
	ended  fdbq.Ended // what it did to the job, when it committed
	onDone func(*Envelope)
}

// Finisher commits job outcomes (fdbq.Queue.End). The default commits
// each in its own transaction; a BatchFinisher groups them.
type Finisher interface {
	End(ctx context.Context, l *fdbq.Lease, e fdbq.Ending) (fdbq.Ended, error)
}

// queueFinisher commits each outcome in its own transaction.
type queueFinisher struct{ q *fdbq.Queue }

func (f queueFinisher) End(ctx context.Context, l *fdbq.Lease, e fdbq.Ending) (fdbq.Ended, error) {
	return f.q.End(ctx, f.q.DB(), l, e)
}

// EnvelopeOptions configure NewEnvelope.
type EnvelopeOptions struct {
	// Acks is how many acknowledgements commit the job (1, or the number of
	// consumers of a broadcast).
	Acks int
	// Heartbeat is the interval of the lease's heartbeat; 0: a third of the
	// type's activity timeout, looked up by the caller.
	Heartbeat time.Duration
	// Heartbeater, if set, renews the lease (at its own interval, and
	// Heartbeat is not used) instead of a goroutine of the envelope's own.
	Heartbeater *Heartbeater
	// Finisher commits the outcome; nil: one transaction per job.
	Finisher Finisher
	// OnDone, if set, runs once the outcome is committed or the job was
	// released, before Done is closed (the pipeline counts jobs in flight
	// with it, so the count must drop before the consumer asks for more).
	OnDone func(*Envelope)
}

// NewEnvelope wraps an accepted lease and starts its heartbeat. parent
// bounds the job's life: when it ends, handlers are cancelled.
func NewEnvelope(parent context.Context, q *fdbq.Queue, l *fdbq.Lease, o EnvelopeOptions) *Envelope {
	if o.Acks < 1 {
		o.Acks = 1
	}
	ctx, cancel := context.WithCancelCause(parent)
	e := &Envelope{Lease: l, q: q, fin: o.Finisher, ctx: ctx, cancel: cancel, done: make(chan struct{}), onDone: o.OnDone}
	if e.fin == nil {
		e.fin = queueFinisher{q}
	}
	e.acks.Store(int32(o.Acks))
	switch {
	case o.Heartbeater != nil:
		e.hb = o.Heartbeater
		e.hb.add(e)
	case o.Heartbeat > 0:
		e.hbStop = make(chan struct{})
		go e.heartbeat(o.Heartbeat)
	}
	return e
}

// stopHeartbeat ends the lease's renewal; the caller settles the envelope,
// which happens once.
func (e *Envelope) stopHeartbeat() {
	if e.hb != nil {
		e.hb.remove(e)
	}
	if e.hbStop != nil {
		close(e.hbStop)
	}
}

// Context is cancelled when the job must stop: its lock is gone
// (ErrHalted), it was released, or the pipeline's context ended.
func (e *Envelope) Context() context.Context { return e.ctx }

// Done is closed once the outcome is committed (or the job released).
func (e *Envelope) Done() <-chan struct{} { return e.done }

// Err is what committing the outcome returned (nil, or fdbq.ErrHalt when
// the lock was gone); valid after Done.
func (e *Envelope) Err() error { return e.outErr }

// Ended is what committing the outcome did to the job (fdbq.Queue.End):
// whether it runs again, and when. Valid after Done, when Err is nil and
// the job was not released.
func (e *Envelope) Ended() fdbq.Ended { return e.ended }

// heartbeat renews the lease until the job is settled; a halt cancels the
// handlers.
func (e *Envelope) heartbeat(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-e.hbStop:
			return
		case <-e.ctx.Done():
			return
		case <-t.C:
			err := e.q.Heartbeat(e.ctx, e.q.DB(), e.Lease, fdbq.HeartbeatOptions{})
			if errors.Is(err, ErrHalted) {
				e.cancel(err) // ErrHalted, saying what became of the job
				return
			}
		}
	}
}

const (
	buffered int32 = iota
	started        // a handler began: it can no longer be released
	settled        // acknowledged or released
)

// Start marks the job as started by a handler. It returns false if the job
// was released or halted before: the handler must not run (but must still
// Ack).
func (e *Envelope) Start() bool {
	for {
		switch s := e.state.Load(); s {
		case settled:
			return false
		case started:
			return e.ctx.Err() == nil
		default:
			if e.state.CompareAndSwap(buffered, started) {
				return e.ctx.Err() == nil
			}
		}
	}
}

// Ack records one consumer's outcome; the last one commits it. A handler
// that was never started (its Start returned false) still acks, with the
// context's cause, so that broadcast counts stay right. It returns once
// the outcome is committed.
func (e *Envelope) Ack(result json.RawMessage, err error) { e.ack(result, err, nil) }

// ack is Ack. With then set it does not wait for the commit: it returns
// at once and calls then once the outcome is committed and the envelope
// settled (at once, for an acknowledgement that is not the last), from
// the finisher's goroutine or one of its own. A consumer's handler thus
// frees its slot without a goroutine waiting on each job's commit.
func (e *Envelope) ack(result json.RawMessage, err error, then func()) {
	e.mu.Lock()
	if err != nil && e.err == nil {
		e.err = err
	}
	if err == nil && e.result == nil {
		e.result = result
	}
	e.mu.Unlock()
	if e.acks.Add(-1) != 0 || e.state.Swap(settled) == settled {
		// Not the last acknowledgement, or released before any handler
		// started.
		if then != nil {
			then()
		}
		return
	}
	e.stopHeartbeat()
	e.finishSpan = e.startFinish()
	// The outcome is committed even when the pipeline is stopping: the
	// work was done; only a halted job has nothing to commit.
	ctx := context.WithoutCancel(e.ctx)
	var end *EndError
	chosen := errors.As(e.err, &end)
	var ending fdbq.Ending
	switch cause := context.Cause(e.ctx); {
	case errors.Is(cause, ErrHalted):
		e.outErr, e.finishHow = fdbq.ErrHalt, OutcomeHalted
		e.finish(then)
		return
	case e.err != nil && errors.Is(cause, ErrStopping) && !chosen:
		// Interrupted by the stop: the attempt is not the handler's
		// doing. An ending the handler chose is committed as chosen.
		e.finishHow = OutcomeStopped
		e.async(then, func() { e.outErr = e.q.Release(ctx, e.q.DB(), []*fdbq.Lease{e.Lease}) })
		return
	case chosen:
		ending = end.ending(e.q.Now())
	case e.err != nil:
		ending = fdbq.Ending{How: fdbq.AttemptFailed, Cause: e.err.Error()}
	default:
		ending = fdbq.Ending{How: fdbq.AttemptSucceeded, Result: e.result}
	}
	e.finishHow = ending.How.String()
	// ended takes End's answer: a result the job's record cannot hold
	// fails the attempt rather than leave the job running until the
	// monitor takes it back.
	ended := func(r fdbq.Ended, err error) (retry bool) {
		e.ended, e.outErr = r, err
		return ending.How == fdbq.AttemptSucceeded && errors.Is(err, fdbq.ErrDataTooLarge)
	}
	tooLarge := func() {
		e.finishHow = fdbq.AttemptFailed.String()
		e.ended, e.outErr = e.fin.End(ctx, e.Lease, fdbq.Ending{How: fdbq.AttemptFailed, Cause: "result not stored: " + e.outErr.Error()})
	}
	if af, ok := e.fin.(asyncFinisher); ok && then != nil {
		af.endAsync(ctx, e.Lease, ending, func(r fdbq.Ended, err error) {
			if ended(r, err) {
				e.async(then, tooLarge)
				return
			}
			e.finish(then)
		})
		return
	}
	e.async(then, func() {
		if ended(e.fin.End(ctx, e.Lease, ending)) {
			tooLarge()
		}
	})
}

// async runs commit, then finishes the envelope: at once when then is
// nil (Ack waits), else in a goroutine of its own.
func (e *Envelope) async(then func(), commit func()) {
	if then == nil {
		commit()
		e.finish(nil)
		return
	}
	go func() {
		commit()
		e.finish(then)
	}()
}

// finish settles the envelope once its outcome is committed, and calls
// then.
func (e *Envelope) finish(then func()) {
	e.endFinish()
	e.cancel(context.Canceled)
	e.settle()
	if then != nil {
		then()
	}
}

// settle runs OnDone and closes Done. OnDone runs synchronously, before the
// acknowledging handler returns: run after it, asynchronously, it could lag
// behind the consumer's next ask and let the jobs counted in flight
// overshoot the demand.
func (e *Envelope) settle() {
	if e.onDone != nil {
		e.onDone(e)
	}
	close(e.done)
}

// ReleaseUnstarted hands back to pending, in one transaction per job type,
// the envelopes no handler has started, and returns how many it released.
// A stopping pipeline releases the jobs it still buffers, so they are
// pending again at once instead of after the activity timeout. Envelopes a
// handler already started are left alone.
func ReleaseUnstarted(ctx context.Context, envs []*Envelope) (int, error) {
	byQueue := map[*fdbq.Queue][]*Envelope{}
	for _, e := range envs {
		if e.state.CompareAndSwap(buffered, settled) {
			e.stopHeartbeat()
			e.cancel(ErrReleased)
			byQueue[e.q] = append(byQueue[e.q], e)
		}
	}
	n := 0
	var errs []error
	for q, group := range byQueue {
		leases := make([]*fdbq.Lease, len(group))
		for i, e := range group {
			leases[i] = e.Lease
		}
		err := q.Release(ctx, q.DB(), leases)
		if err != nil {
			errs = append(errs, err)
		} else {
			n += len(group)
		}
		for _, e := range group {
			e.outErr = err
			e.settle()
		}
	}
	return n, errors.Join(errs...)
}

// PendingAcks is how many acknowledgements the job still expects.
func (e *Envelope) PendingAcks() int { return int(e.acks.Load()) }
