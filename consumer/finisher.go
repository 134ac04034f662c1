package consumer

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/internal/lifecycle"
	"github.com/jobstage/jobstage/kv"
)

// BatchFinisher commits the outcomes of jobs that end together in one
// transaction: while one batch commits, the next gathers. Each outcome is
// still checked against its own lock; one whose lock is gone gets
// fdbq.ErrHalt and is left out, without failing the others.
type BatchFinisher struct {
	q    *fdbq.Queue
	max  int
	life lifecycle.Lifecycle
	reqs chan *finishReq
	stop chan struct{}
	done chan struct{}
	once sync.Once

	// mu guards closing and sending: an outcome is taken (sending
	// counts it) only before Stop, and the loop, or Stop before Start,
	// receives every one taken, so each is answered.
	mu      sync.Mutex
	closing bool
	sending sync.WaitGroup
}

type finishReq struct {
	ctx    context.Context
	lease  *fdbq.Lease
	ending fdbq.Ending
	ended  fdbq.Ended // set by the transaction that commits
	// done is called once with the outcome's answer, from a goroutine
	// of the batch's.
	done func(fdbq.Ended, error)
}

// asyncFinisher is a Finisher that commits without a goroutine waiting
// for each outcome: done is called once with the answer.
type asyncFinisher interface {
	endAsync(ctx context.Context, l *fdbq.Lease, e fdbq.Ending, done func(fdbq.Ended, error))
}

var (
	_ Finisher      = (*BatchFinisher)(nil)
	_ asyncFinisher = (*BatchFinisher)(nil)
)

// ErrFinisherClosed: the finisher was stopped before the outcome was
// committed; the job stays running until the activity monitor retries it.
var ErrFinisherClosed = errors.New("consumer: finisher closed")

// NewBatchFinisher returns a stopped finisher that commits up to max
// outcomes per transaction (default 256) once started. Outcomes given it
// wait for Start, and fail with ErrFinisherClosed after Stop.
func NewBatchFinisher(q *fdbq.Queue, max int) *BatchFinisher {
	if max <= 0 {
		max = 256
	}
	return &BatchFinisher{q: q, max: max, life: lifecycle.Lifecycle{Name: "consumer.BatchFinisher"},
		reqs: make(chan *finishReq, max), stop: make(chan struct{}), done: make(chan struct{})}
}

// End implements Finisher.
func (b *BatchFinisher) End(ctx context.Context, l *fdbq.Lease, e fdbq.Ending) (fdbq.Ended, error) {
	type answer struct {
		ended fdbq.Ended
		err   error
	}
	ch := make(chan answer, 1)
	b.endAsync(ctx, l, e, func(ended fdbq.Ended, err error) { ch <- answer{ended, err} })
	a := <-ch
	return a.ended, a.err
}

// endAsync gives the finisher an outcome to commit; done gets the answer
// (ErrFinisherClosed after Stop).
func (b *BatchFinisher) endAsync(ctx context.Context, l *fdbq.Lease, e fdbq.Ending, done func(fdbq.Ended, error)) {
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		done(fdbq.Ended{}, ErrFinisherClosed)
		return
	}
	b.sending.Add(1)
	b.mu.Unlock()
	b.reqs <- &finishReq{ctx: ctx, lease: l, ending: e, done: done}
	b.sending.Done()
}

// Start starts committing. A finisher runs once: Start fails if it was
// started or stopped before.
func (b *BatchFinisher) Start(ctx context.Context) error {
	return b.life.Start(ctx, func(context.Context) error {
		go b.loop()
		return nil
	})
}

// Stop commits what was submitted and stops the finisher; it returns once
// that is done, or when ctx ends (ctx's error; the commits go on). It is
// safe before Start (which then fails), twice, and from several
// goroutines.
func (b *BatchFinisher) Stop(ctx context.Context) error {
	// From now on no outcome is taken; the loop commits those it was
	// given and returns.
	b.once.Do(func() {
		b.mu.Lock()
		b.closing = true
		b.mu.Unlock()
		close(b.stop)
	})
	return b.life.Stop(ctx, func(_ context.Context, started bool) error {
		if started {
			<-b.done
			return nil
		}
		// No loop ran, nor will: the outcomes given fail.
		go func() {
			b.sending.Wait()
			close(b.reqs)
		}()
		for r := range b.reqs {
			r.done(fdbq.Ended{}, ErrFinisherClosed)
		}
		close(b.done)
		return nil
	})
}

func (b *BatchFinisher) loop() {
	defer close(b.done)
	batch := make([]*finishReq, 0, b.max)
	var carry *finishReq // taken, and left for the next batch by the byte budget
	for {
		if carry != nil {
			batch, carry = append(batch[:0], carry), nil
		} else {
			select {
			case r := <-b.reqs:
				batch = append(batch[:0], r)
			case <-b.stop:
				// Every outcome taken before Stop is in the channel or on
				// its way: commit them, one by one, and return.
				go func() {
					b.sending.Wait()
					close(b.reqs)
				}()
				for r := range b.reqs {
					b.commit([]*finishReq{r})
				}
				return
			}
		}
		size := batch[0].size()
	gather:
		for len(batch) < b.max {
			select {
			case r := <-b.reqs:
				if size += r.size(); size > maxBatchBytes {
					carry = r
					break gather
				}
				batch = append(batch, r)
			default:
				break gather
			}
		}
		b.commit(batch)
	}
}

// maxBatchBytes bounds the bytes of job records one batch of outcomes
// rewrites, well inside FoundationDB's 10 MB transaction limit (and its
// advice of 1 MB): outcomes with large data or results commit in more
// transactions.
const maxBatchBytes = 1 << 20

// size estimates the bytes the outcome's transaction writes: the job's
// record with its data, result and error, and its index entries.
func (r *finishReq) size() int {
	return len(r.lease.Data) + len(r.lease.Progress) + len(r.ending.Result) + len(r.ending.Cause) + 512
}

// skipError carries the request that failed inside a batch transaction.
type skipError struct {
	r   *finishReq
	err error
}

func (e *skipError) Error() string { return e.err.Error() }

// commit writes a batch; a request whose own operation fails (a lost
// lock) is answered with its error and the rest is committed without it.
func (b *BatchFinisher) commit(batch []*finishReq) {
	for len(batch) > 0 {
		err := b.q.DB().Transact(context.Background(), func(tx kv.Tx) error {
			for _, r := range batch {
				var err error
				r.ended, err = b.q.End(r.ctx, tx, r.lease, r.ending)
				if err != nil && !kv.IsRetryable(err) {
					return &skipError{r: r, err: err}
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if errors.Is(err, kv.ErrTransactionTooLarge) && len(batch) > 1 {
			// The estimate fell short: commit each half on its own.
			half := len(batch) / 2
			b.commit(batch[:half:half])
			b.commit(batch[half:])
			return
		}
		var skip *skipError
		if errors.As(err, &skip) {
			skip.r.answer(skip.err)
			rest := batch[:0]
			for _, r := range batch {
				if r != skip.r {
					rest = append(rest, r)
				}
			}
			batch = rest
			continue
		}
		// The answers settle the jobs' envelopes, which takes a while for
		// a large batch: a goroutine of the batch's gives them, and the
		// loop gathers the next batch meanwhile.
		answered := slices.Clone(batch)
		go func() {
			for _, r := range answered {
				r.answer(err)
			}
		}()
		return
	}
}

// answer gives r's requester the outcome's answer.
func (r *finishReq) answer(err error) { r.done(r.ended, err) }
