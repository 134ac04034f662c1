// Package pipeline assembles jobstage's stages — producers, optional
// producer-consumer stages, consumers — into a demand-driven pipeline over
// Go channels, in the style of Elixir's GenStage and Broadway.
//
// # Demand
//
// Each consumer subscribes with a max and a min demand. It asks for max
// jobs up front and, as its handlers finish, asks again for what it misses
// whenever the jobs it asked for and has not finished fall to min. Asks
// go into a ledger shared by the pipeline's producers:
//
//	consumers ──ask(n)──▶ ledger ──reserve(k ≤ demand − in flight)──▶ producer
//	    ▲                                                              │
//	    └──────── dispatcher ◀── stages (Filter, Map, NewStage) ◀────┘
//	                              accept(k) in one transaction
//
// A producer reserves k ≤ min(available demand, its batch limit), accepts
// up to k jobs in one transaction (waiting on the type's watch key if none
// are due), and gives back what it did not use. The dispatcher hands each
// job to a consumer and settles the demand. So the jobs a pipeline holds —
// buffered in channels or running — never exceed what its consumers asked
// for, channels never fill (each is sized for all the demand there is),
// and with no demand no producer touches the store.
//
// Express accepts (Options.Express) are the one exception, and a bounded
// one: while the consumers hold all the demand they asked for and the
// producer has a backlog, a job of a fairness key that had nothing ready
// is accepted at once, beyond the demand by at most Express jobs, which
// the consumers' next asks pay back; it would otherwise wait behind the
// backlog's next batch.
//
// Dispatchers: demand (the consumer that wants most), broadcast (every
// consumer, at the pace of the one that wants least) and partition (a hash
// of a key of the job; per-key order with one-at-a-time consumers).
//
// Package pipeline/gostreams runs go-streams flows as stages, and makes a
// producer a go-streams Source and a consumer a Sink.
//
// # Jobs in flight
//
// Every accepted job travels as a *consumer.Envelope: the lease, a context
// cancelled when the job must stop, a heartbeat that renews the lease, and
// an acknowledgement that commits the outcome (finish, or fail under the
// retry policy) once every consumer it went to has acknowledged it. A stage
// that drops a job acknowledges it and gives its demand back. The
// heartbeats of a job type's envelopes come from one consumer.Heartbeater,
// which renews the leases that fall due together in one transaction.
//
// # Crash recovery
//
// A pipeline runs the activity monitor (fdbq.Monitor) from Start to Stop:
// a job whose worker died — this process before a restart, another
// process — is pending again once its lease has gone unrenewed for the
// type's activity timeout, and a pipeline works it again. The pipelines
// of a process that work one queue share one monitor, and join one its
// owner adopted (AdoptMonitor: jobstage.Client and
// fxjobstage.MonitorModule do) instead of starting their own.
// Options.NoRecovery leaves it out.
//
// # Stopping
//
// Stop drains, progressively less gracefully, never losing a job:
//  1. producers stop accepting;
//  2. jobs accepted but not started by a handler go back to pending in one
//     transaction per queue, at once, not after the activity timeout;
//  3. running handlers get Options.DrainTimeout to finish and commit;
//  4. then their contexts are cancelled with consumer.ErrStopping and the
//     jobs of those that return go back to pending; a handler that ignores
//     its context is left to the activity monitor.
//
// A pipeline runs once. Stop is safe before Start (which then fails),
// twice and from several goroutines; the context given to it bounds it,
// and a Stop whose context ends cuts the drain short (step 4 at once).
package pipeline
