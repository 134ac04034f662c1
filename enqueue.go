package jobstage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/tracing"
)

// EnqueueOptions are the options of one enqueue; zero fields keep the
// kind's defaults.
type EnqueueOptions struct {
	// ID is the job's id; empty: a random one. Enqueuing an id that
	// exists adds the job again (fdbq.Queue.Add): sending the same enqueue
	// twice does not make two jobs.
	ID string
	// At: not before this time; zero: now.
	At time.Time
	// Priority overrides the kind's Defaults.Priority when not 0.
	Priority int
	// MaxAttempts overrides the kind's retry policy's attempts when not 0.
	MaxAttempts int
	// Key is the jobs' fairness key (fdbq.NewJob.Key); empty: none.
	Key string
	// Unique makes the job unique by its args (fdbq.Unique), overriding
	// the kind's Defaults.Unique; the returned job's Added says whether
	// it was added, or is the duplicate found, or the duplicate replaced.
	Unique *fdbq.Unique
}

// Enqueue adds a job of args's kind, with args as its JSON data, in a
// transaction of its own. A kind no one registered yet is registered with
// its defaults in the same transaction. o may be nil.
func Enqueue[T Args](ctx context.Context, c *Client, args T, o *EnqueueOptions) (*fdbq.Job, error) {
	return EnqueueTx(ctx, c.db, c, args, o)
}

// EnqueueTx is Enqueue inside tr: the caller's transaction (a kv.Tx),
// where the job commits with the caller's other writes or not at all, or
// c.DB().
func EnqueueTx[T Args](ctx context.Context, tr kv.Transactor, c *Client, args T, o *EnqueueOptions) (*fdbq.Job, error) {
	jobs, err := EnqueueManyTx(ctx, tr, c, []T{args}, o)
	if err != nil {
		return nil, err
	}
	return jobs[0], nil
}

// EnqueueMany adds a job for each of args, in one transaction; o applies
// to each (an ID in o is refused: ids are per job).
func EnqueueMany[T Args](ctx context.Context, c *Client, args []T, o *EnqueueOptions) ([]*fdbq.Job, error) {
	return EnqueueManyTx(ctx, c.db, c, args, o)
}

// EnqueueManyTx is EnqueueMany inside tr (see EnqueueTx).
func EnqueueManyTx[T Args](ctx context.Context, tr kv.Transactor, c *Client, args []T, o *EnqueueOptions) ([]*fdbq.Job, error) {
	kind, d, err := kindOf[T]()
	if err != nil {
		return nil, err
	}
	if o == nil {
		o = &EnqueueOptions{}
	}
	if o.ID != "" && len(args) > 1 {
		return nil, fmt.Errorf("jobstage: EnqueueOptions.ID names one job, and %d are enqueued", len(args))
	}
	// The jobs store the enqueue span's context: their handlers' spans
	// are its children, in the caller's trace.
	ctx, span := c.tracer.Start(ctx, tracing.SpanEnqueue, trace.WithSpanKind(trace.SpanKindProducer))
	tc := tracing.FromContext(ctx)
	jobs := make([]fdbq.NewJob, len(args))
	for i, a := range args {
		data, err := json.Marshal(a)
		if err != nil {
			err = fmt.Errorf("jobstage: encode the args of a %s job: %w", kind, err)
			tracing.EndEnqueue(span, kind, nil, err)
			return nil, err
		}
		jobs[i] = fdbq.NewJob{Type: kind, ID: o.ID, Data: data, ScheduledAt: o.At, Priority: d.Priority, Key: o.Key, MaxAttempts: o.MaxAttempts, Unique: d.Unique, Trace: tc}
		if o.Unique != nil {
			jobs[i].Unique = o.Unique
		}
		if o.Priority != 0 {
			jobs[i].Priority = o.Priority
		}
	}
	var out []*fdbq.Job
	err = tr.Transact(ctx, func(tx kv.Tx) error {
		return c.addDeclaring(ctx, tx, map[string]Defaults{kind: d}, func() error {
			var err error
			out, err = c.q.AddBatch(ctx, tx, jobs)
			return err
		})
	})
	tracing.EndEnqueue(span, kind, out, err)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// addDeclaring runs add in tx; when it fails because a kind is not
// registered (the first add of an unknown type fails before it writes),
// it registers the kinds of kinds that are not, with their Defaults, and
// runs add again. A kind that exists keeps its settings.
func (c *Client) addDeclaring(ctx context.Context, tx kv.Tx, kinds map[string]Defaults, add func() error) error {
	err := add()
	if !errors.Is(err, fdbq.ErrUnknownType) {
		return err
	}
	for kind, d := range kinds {
		if err := c.declareUnknown(ctx, tx, kind, d); err != nil {
			return err
		}
	}
	return add()
}

// declareUnknown registers kind with its Defaults in tr, unless it is
// registered already (then its settings, an operator's or a config's,
// stay).
func (c *Client) declareUnknown(ctx context.Context, tr kv.Transactor, kind string, d Defaults) error {
	_, err := c.q.GetType(ctx, tr, kind)
	if !errors.Is(err, fdbq.ErrUnknownType) {
		return err
	}
	s, err := d.settings()
	if err != nil {
		return fmt.Errorf("jobstage: the Defaults of kind %s: %w", kind, err)
	}
	return c.q.DeclareType(ctx, tr, kind, s)
}
