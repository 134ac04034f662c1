// Package consumer holds jobstage's consumer stages: typed handlers run up
// to a concurrency limit (GenStage's ConsumerSupervisor), with a heartbeat
// per job, cancellation on halt or timeout, panic recovery, and the commit
// of each outcome.
//
// A handler sees typed data and returns a typed result:
//
//	func(ctx context.Context, job *consumer.Job[Email]) (Receipt, error)
//
// The job's JSON data decodes into Email; the Receipt is stored as the
// job's JSON result; an error fails the attempt, which the job type's
// retry policy retries with backoff until its attempts are used up. New
// makes the consumer stage that runs the handler (Options: its
// concurrency, demand and per-job timeout); NewFunc runs one with nothing
// to return, func(ctx, *consumer.Job[Email]) error, whose jobs store no
// result. Package pipeline feeds them jobs from a producer.
//
// A handler chooses another end for its attempt by returning (or
// wrapping) one of three errors, each an *EndError: Cancel finishes the
// job canceled whatever attempts it has left (data that does not decode
// into the handler's type is canceled so, inside the middleware, which
// see that attempt as any other); Snooze gives it back to
// pending to run again later, the attempt not counted (Job.Snoozes counts
// the snoozes); RetryAt fails the attempt but runs the job again at a
// time of the handler's choosing. AttemptOutcome names how an attempt
// ended (the Outcome constants), as middleware and package metrics label
// it.
//
// The handler's context ends when the job's lock is gone (canceled,
// removed, recycled by the activity monitor: cause ErrHalted), when its
// per-job timeout passes, or when a stopping pipeline's drain deadline
// passes (cause ErrStopping: the job goes back to pending, the attempt not
// counted). A panic fails the attempt with the panic value and the stack
// in the job's error (a *PanicError).
//
// An outcome commits once every consumer the job went to has acknowledged
// it (Envelope): fdbq.Queue.End, which checks the job's lock, so the
// outcome of a job whose lock is gone is not kept (fdbq.ErrHalt).
// NewJob makes a Job outside any pipeline, to run a handler in a test or
// from code of one's own; Raw turns a typed handler into one over the
// job's raw JSON.
//
// Middleware are plain function wrappers (Logging, Metrics, Timeout,
// Recover) around an Attempt: they see the job's metadata (AttemptInfo)
// and the attempt's error, not its typed data or result, so they are not
// generic, and one is written once for handlers of every type:
//
//	consumer.New(send, consumer.Options{}, consumer.Logging(log), consumer.Recover())
//
// A BatchFinisher commits the outcomes of jobs that end together in one
// transaction.
//
// The Heartbeater and the BatchFinisher are long-running parts: their
// constructors return them stopped, Start starts them and Stop stops them,
// under the rule of every such part of jobstage (it runs once; Stop is
// safe before Start, twice and concurrently; a second Start fails naming
// the part). A pipeline starts and stops its own.
//
// The Example runs a handler that succeeds, fails and cancels in a
// pipeline; ExampleNewJob runs one without a pipeline; ExampleAttemptOutcome
// lists the outcomes.
package consumer
