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
// when a fairness key's zone was marked since its last read, it accepts
// that key's first jobs at once, up to Options.Express of them, and
// sends them down the pipeline. Without it such a job waits for the
// producer's next accept of a full batch to commit — after the ones in
// flight, which read the zones before the job was added — or, with the
// consumers' demand used up, until they ask again, behind the backlog of
// the keys being worked. A key with a backlog keeps its zones marked, so
// the express loop does not serve it.
//
// It takes from the demand left when there is some (the producer's
// accepts in flight reserved what they needed before they read the
// zones), and otherwise borrows beyond the demand, which the consumers'
// next ask pays back. It is dormant while one of the producer's accepts
// waits for jobs (that accept takes what becomes ready) or the last
// accept took fewer than it asked for (there is no backlog to wait
// behind), and otherwise makes one read-only transaction when it wakes
// and one a watch that fires, none while no zone is marked. After a
// waiting accept it reads a new baseline, since that accept took what
// was marked. A read whose fresh keys found the budget spent stays the
// one to compare with, and the loop reads again when demand comes back,
// so those keys are served if the producer's accepts left their jobs.
// Its accepts share the producer's accept group, so they never take a
// job a Pull picked. Store errors are retried after a jittered backoff;
// an accept that fails takes nothing, and the job is left to the
// producer's accepts.
func (p *Pipeline) express(ctx, jobCtx context.Context, pr *producer.Producer, hb *consumer.Heartbeater, fin consumer.Finisher) {
	q := pr.Queue()
	o := pr.Options()
	backoff := o.MinBackoff
	var prev *fdbq.ReadyZones // the last read
	for {
		parked, unparked := pr.Parked()
		backlogged, filled := pr.Backlogged()
		if parked || !backlogged {
			if parked {
				// The waiting accept takes what is marked until it
				// stops waiting: the next read is a new baseline.
				prev = nil
			}
			select {
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
			var refused <-chan struct{} // the budget was spent: closed when demand comes back
			if fresh := rz.Fresh(prev); len(fresh) == 0 {
				prev = rz
			} else if refused = p.expressAccept(ctx, jobCtx, pr, hb, fin, fresh); refused == nil {
				prev = rz
			}
			// Else the read stays the one to compare with, so those keys
			// are fresh again when demand comes back, if the producer's
			// accepts left their jobs.
			_, unparked = pr.Parked()
			_, filled = pr.Backlogged()
			select {
			case <-rz.Watch.Ready():
				err = rz.Watch.Wait(ctx)
			case <-refused:
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
// ledger lends, and sends them down the pipeline. When the ledger lent
// nothing (the budget is spent) it accepts nothing and returns a channel
// closed when demand comes back; otherwise nil.
func (p *Pipeline) expressAccept(ctx, jobCtx context.Context, pr *producer.Producer, hb *consumer.Heartbeater, fin consumer.Finisher, fresh []string) <-chan struct{} {
	k, refused := p.ledger.borrow(p.opts.Express)
	if k == 0 {
		return refused
	}
	leases, err := pr.AcceptKeys(ctx, fresh, k)
	p.ledger.unreserve(k - len(leases))
	if err == nil {
		p.send(jobCtx, pr, hb, fin, leases)
	}
	return nil
}
