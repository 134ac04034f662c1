// Package metrics exposes jobstage's Prometheus metrics. Names carry the
// jobstage_ prefix and base units (seconds); counters end in _total. Job
// metrics are labelled by job type and outcome, never by job id, so that a
// series exists per type, not per job.
//
// # Metrics
//
// Counted as jobs move (handles on *Metrics, nil-safe: a nil *Metrics
// counts nothing, so code and tests can pass nil):
//
//	jobstage_jobs_enqueued_total{type}                  jobs added (Enqueued: the HTTP API)
//	jobstage_jobs_accepted_total{type}                  jobs accepted by a pipeline (Stage) or an external worker (Accepted)
//	jobstage_job_queue_wait_seconds{type}               histogram: from due (scheduled time) to accepted
//	jobstage_jobs_finished_total{type,outcome}          attempts ended, by outcome (below)
//	jobstage_job_run_duration_seconds{type,outcome}     histogram: one attempt's handler time
//	jobstage_handlers_running{type}                     handlers running in this process now
//	jobstage_jobs_retried_total{type}                   failed attempts that will run again
//	jobstage_jobs_recycled_total{type,outcome}          running jobs the activity monitor took back: outcome
//	                                                    retried (pending again) or failed (out of attempts)
//	jobstage_jobs_expired_total{type}                   finished jobs removed after their retention
//	jobstage_jobs_sweep_skipped_total{type}             due jobs a sweep could not change (a record or index
//	                                                    entry that cannot be read, a record that cannot be
//	                                                    stored) and left as they are: counted at every sweep
//	                                                    while they last, so a rate above 0 is a job stuck
//	jobstage_http_requests_total{route,status}          HTTP requests by route pattern and status code
//	jobstage_http_request_duration_seconds{route}       histogram
//
// Read when Prometheus scrapes:
//
//	jobstage_jobs_pending{type}                         pending jobs (the store's O(1) counters)
//	jobstage_jobs_running{type}                         running jobs, in every process
//	jobstage_oldest_pending_age_seconds{type}           how long the longest-due pending job has
//	                                                    waited (0: none due); see fdbq.Queue.OldestDue
//	jobstage_types_unreadable                           registered types whose settings cannot be read
//	                                                    (their jobs are neither accepted nor swept)
//	jobstage_queue_scrape_errors_total                  scrapes whose store read failed or timed out
//	jobstage_producer_demand{pipeline,type}             demand a pipeline's consumers hold unmet
//	jobstage_pipeline_buffered_jobs{pipeline,type}      jobs a pipeline accepted and has not
//	                                                    committed: buffered or running
//	jobstage_store_transactions_total                   transaction attempts (kv.Stats)
//	jobstage_store_commits_total                        attempts that committed
//	jobstage_store_conflicts_total                      attempts that failed with not_committed (1020)
//	jobstage_store_retries_total{code}                  attempts retried, by FoundationDB error code
//
// and the Go runtime's (go_*) and the process's (process_*) collectors.
//
// # Outcomes
//
// jobstage_jobs_finished_total counts what each handler attempt did, as
// the handler's Middleware sees it (consumer.AttemptOutcome, one
// vocabulary with package consumer), not the job's final state:
// succeeded; failed (the handler returned an error, or RetryAt); timeout
// (its per-job timeout passed); panicked (it panicked: the panic becomes
// the attempt's error, with its stack); canceled (the handler returned
// consumer.Cancel, or its data did not decode); snoozed (it returned
// consumer.Snooze); halted (the job's lock was gone: canceled, removed or
// recycled, and nothing the attempt did was committed); stopped (a
// stopping pipeline cut it short: the job went back to pending, the
// attempt not counted). Whether a failed attempt's job runs again is
// known once its outcome commits: Ended (pipeline.Options.OnEnded) counts
// jobstage_jobs_retried_total from what fdbq.Queue.End said, so a job's
// own retry policy and RetryAt count as they ran; an external worker's
// fail is counted from the same answer (ExternalOutcome).
//
// # Labels
//
// Label values come from data: type names (some read from the store),
// pipeline names, route patterns, outcomes. Every one goes through Label,
// so that none can panic (Prometheus refuses label values that are not
// UTF-8): a value that is not UTF-8 or holds control characters is
// reported quoted, as Go quotes it ("\xff" under the label `"\xff"`). A
// type whose name fdbq refuses, registered by an earlier version, has its
// counts reported so, and no oldest pending age (jobstage_oldest_pending_age_seconds
// 0), since fdbq looks up no job of it.
//
// # Scrapes
//
// The store is read at scrape time in one read-only transaction bounded by
// ScrapeTimeout: the type registry with its counters, and one key per
// priority band of each type's ready index, and the first of its scheduled
// index, for the oldest job. A scrape that fails reports the other metrics
// and counts the failure; it never panics. A type whose settings cannot be
// read fails no scrape: it is counted in jobstage_types_unreadable and its
// jobs are reported.
//
// # Examples
//
// The Example counts a pipeline's jobs and reads the store's counts from
// a registry; Metrics.Handler serves such a registry to Prometheus.
package metrics
