package pipeline

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/producer"
)

// express is a producer's express loop (Options.Express). It reads the
// zone index of the producer's type, the zones with ready jobs, whenever
// a zone is marked (the type's watch key moves: fdbq.ReadyZones), and
// when a fairness key's zone was marked since its last read while the
// consumers have no demand left for the producer's accepts, it accepts
// that key's first jobs at once, up to Options.Express beyond the demand,
// and sends them down the pipeline. Without it such a job waits until
// the consumers ask again and an accept of a full batch commits, behind
// the backlog of the keys being worked; a key with a backlog keeps its
// zones marked, so the express loop does not serve it.
//
// It is dormant while demand is left for the producer to reserve or one
// of the producer's accepts waits for jobs (either takes what becomes
// ready then), and otherwise makes one read-only transaction when it
// wakes and one a watch that fires, none while no zone is marked. Its
// read when demand runs out is compared with the last one, from before
// demand came back, so a key whose zone was marked in between is served
// if the producer's accepts left its jobs; after a waiting accept it
// reads a new baseline instead, since that accept took what was marked. Its accepts share the producer's accept group, so
// they never take a job a Pull picked. Store errors are retried after a
// jittered backoff; an accept that fails takes nothing, and the job is
// left to the producer's accepts.
func (p *Pipeline) express(ctx, jobCtx context.Context, pr *producer.Producer, hb *consumer.Heartbeater, fin consumer.Finisher) {
	q := pr.Queue()
	o := pr.Options()
	backoff := o.MinBackoff
	var prev *fdbq.ReadyZones // the last read
	for {
		// Dormant while demand is left to reserve, or an accept of the
		// producer waits for jobs, or its last took fewer than it asked
		// for (there was no backlog): the producer's accepts take what
		// becomes ready then.
		dry, turned := p.ledger.state()
		parked, unparked := pr.Parked()
		backlogged, filled := pr.Backlogged()
		if !dry || parked || !backlogged {
			if parked {
				// The waiting accept takes what is marked until it
				// stops waiting: the next read is a new baseline.
				prev = nil
			}
			select {
			case <-turned:
			case <-unparked:
			case <-filled:
			case <-ctx.Done():
				return
			}
			continue
		}
		rz, err := q.ReadyZones(ctx, pr.Type())
		if err == nil {
			backoff = o.MinBackoff
			if fresh := rz.Fresh(prev); len(fresh) == 0 || p.expressAccept(ctx, jobCtx, pr, hb, fin, fresh) {
				prev = rz
			}
			// Else demand came back meanwhile: the read stays the one to
			// compare with, so those keys are fresh again next time if
			// the producer's accept left their jobs.
			_, turned = p.ledger.state()
			_, unparked = pr.Parked()
			_, filled = pr.Backlogged()
			select {
			case <-rz.Watch.Ready():
				err = rz.Watch.Wait(ctx)
			case <-turned:
				rz.Watch.Cancel()
			case <-unparked:
				rz.Watch.Cancel()
			case <-filled:
				rz.Watch.Cancel()
			case <-ctx.Done():
				rz.Watch.Cancel()
				return
			}
		}
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, kv.ErrClosed):
			return
		case err != nil:
			// A read or a watch that failed: read again after a backoff.
			// That read is a new baseline: a key whose zone was marked
			// meanwhile is left to the producer's accepts.
			prev = nil
			t := time.NewTimer(backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1)))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(backoff*2, o.MaxBackoff)
		}
	}
}

// expressAccept accepts the first jobs of the fresh keys, as many as the
// ledger lends beyond the demand, and sends them down the pipeline. It
// reports false when it accepted nothing because the ledger lent nothing
// (demand came back, or the budget is spent).
func (p *Pipeline) expressAccept(ctx, jobCtx context.Context, pr *producer.Producer, hb *consumer.Heartbeater, fin consumer.Finisher, fresh []string) bool {
	k := p.ledger.borrow(p.opts.Express)
	if k == 0 {
		return false
	}
	leases, err := pr.AcceptKeys(ctx, fresh, k)
	p.ledger.unreserve(k - len(leases))
	if err == nil {
		p.send(jobCtx, pr, hb, fin, leases)
	}
	return true
}
