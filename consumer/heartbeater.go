package consumer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/lifecycle"
	"github.com/jobstage/jobstage/kv"
)

// Heartbeater renews the leases of many envelopes from one goroutine, each
// at most Every after its previous heartbeat (or its accept), batching the
// heartbeats that fall due together into one transaction per queue. An
// envelope given one (EnvelopeOptions.Heartbeater) starts no goroutine or
// ticker of its own: at tens of thousands of jobs a second, one per job
// cost more than the heartbeats, which a job that runs for milliseconds
// never needs.
//
// It checks its envelopes four times per interval, and renews those whose
// last heartbeat is older than three quarters of it, so each lease is
// renewed between 3/4 and 1 interval after the previous renewal.
type Heartbeater struct {
	every, tick time.Duration
	life        lifecycle.Lifecycle
	ctx         context.Context
	cancel      context.CancelFunc
	done        chan struct{}

	mu   sync.Mutex
	envs map[*Envelope]time.Time // last renewal, or registration
}

// maxHeartbeatBatch bounds the leases renewed in one transaction.
const maxHeartbeatBatch = 256

// NewHeartbeater returns a stopped heartbeater that renews leases every
// interval (which must be positive) once started. Envelopes may be given
// it before Start; they are renewed from Start to Stop.
func NewHeartbeater(every time.Duration) *Heartbeater {
	ctx, cancel := context.WithCancel(context.Background())
	return &Heartbeater{
		every:  every,
		tick:   max(every/4, time.Millisecond),
		life:   lifecycle.Lifecycle{Name: "consumer.Heartbeater"},
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
		envs:   make(map[*Envelope]time.Time),
	}
}

// Every is the heartbeat interval.
func (h *Heartbeater) Every() time.Duration { return h.every }

// Start starts the heartbeats. A heartbeater runs once: Start fails if it
// was started or stopped before.
func (h *Heartbeater) Start(ctx context.Context) error {
	return h.life.Start(ctx, func(context.Context) error {
		go h.loop()
		return nil
	})
}

// Stop stops the heartbeats; it returns once none is in progress, or when
// ctx ends (ctx's error; the heartbeat in progress still ends). It is safe
// before Start (which then fails), twice, and from several goroutines.
func (h *Heartbeater) Stop(ctx context.Context) error {
	return h.life.Stop(ctx, func(_ context.Context, started bool) error {
		h.cancel()
		if started {
			<-h.done
		}
		return nil
	})
}

func (h *Heartbeater) add(e *Envelope) {
	h.mu.Lock()
	h.envs[e] = time.Now()
	h.mu.Unlock()
}

func (h *Heartbeater) remove(e *Envelope) {
	h.mu.Lock()
	delete(h.envs, e)
	h.mu.Unlock()
}

func (h *Heartbeater) loop() {
	defer close(h.done)
	t := time.NewTicker(h.tick)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
			h.beat()
		}
	}
}

// beat renews the leases that are due.
func (h *Heartbeater) beat() {
	now := time.Now()
	byQueue := map[*fdbq.Queue][]*Envelope{}
	h.mu.Lock()
	for e, last := range h.envs {
		if now.Sub(last) < h.every-h.tick || e.ctx.Err() != nil {
			continue
		}
		h.envs[e] = now
		byQueue[e.q] = append(byQueue[e.q], e)
	}
	h.mu.Unlock()
	for q, envs := range byQueue {
		for len(envs) > 0 {
			n := min(len(envs), maxHeartbeatBatch)
			h.renew(q, envs[:n])
			envs = envs[n:]
		}
	}
}

// haltedLease names the envelope whose lock was gone inside a batch, and
// the heartbeat's error (ErrHalted).
type haltedLease struct {
	e   *Envelope
	err error
}

func (h haltedLease) Error() string { return h.err.Error() }

// renew heartbeats envs in one transaction. An envelope whose lock is gone
// is halted (its handlers cancelled with ErrHalted) and left out, and the
// others are renewed without it; any other failure leaves them all to the
// next round, as a failed heartbeat of an envelope's own would.
func (h *Heartbeater) renew(q *fdbq.Queue, envs []*Envelope) {
	for len(envs) > 0 {
		err := q.DB().Transact(h.ctx, func(tx kv.Tx) error {
			for _, e := range envs {
				err := q.Heartbeat(h.ctx, tx, e.Lease, fdbq.HeartbeatOptions{})
				if errors.Is(err, ErrHalted) {
					return haltedLease{e, err}
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		var halted haltedLease
		if !errors.As(err, &halted) {
			return
		}
		halted.e.cancel(halted.err)
		h.remove(halted.e)
		rest := envs[:0:0]
		for _, e := range envs {
			if e != halted.e {
				rest = append(rest, e)
			}
		}
		envs = rest
	}
}
