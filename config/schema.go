package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// kind is the shape of a key's value.
type kind int

const (
	kindString    kind = iota
	kindInt            // int or int64
	kindBool           //
	kindFloat          // float64, finite
	kindDuration       // Go duration string, never negative
	kindStrings        // list of strings
	kindStringMap      // map of string to string
	kindObject         // struct
	kindOptional       // pointer to struct: absent is nil
	kindMap            // map of name to struct
	kindList           // list of structs
)

// field is one key of the schema. The schema is the single description of
// the file: decoding, defaults, environment overrides, lint and Docs all
// walk it. Each field is bound at init to the Config struct field whose
// yaml tag is its key, which gives it its kind.
type field struct {
	key string
	doc string
	// def is the default as YAML text, applied when the key is absent;
	// defDoc, when set, is how Docs shows a default computed from other
	// keys.
	def    string
	defDoc string
	enum   []string
	min    *int64 // bounds of an integer, when set
	max    *int64
	fields []*field // of an object, optional object, map or list element
	// reject names keys that are not part of the schema but are common
	// mistakes, with the message to give.
	reject map[string]string

	kind  kind
	typ   reflect.Type
	index []int
}

// roleNames returns the values a token's role may take: the HTTP API's
// roles.
func roleNames() []string {
	var names []string
	for _, r := range httpapi.Roles() {
		names = append(names, string(r))
	}
	return names
}

func leaf(key, doc string) *field { return &field{key: key, doc: doc} }

func object(key, doc string, fields ...*field) *field {
	return &field{key: key, doc: doc, fields: fields}
}

func (f *field) byDefault(def string) *field { f.def = def; return f }
func (f *field) computed(doc string) *field  { f.defDoc = doc; return f }
func (f *field) oneOf(v ...string) *field    { f.enum = v; return f }
func (f *field) atLeast(n int64) *field      { f.min = &n; return f }
func (f *field) atMost(n int64) *field       { f.max = &n; return f }
func (f *field) rejecting(key, msg string) *field {
	if f.reject == nil {
		f.reject = map[string]string{}
	}
	f.reject[key] = msg
	return f
}

func (f *field) child(key string) *field {
	for _, c := range f.fields {
		if c.key == key {
			return c
		}
	}
	return nil
}

// dur shows d as a default: 1h rather than 1h0m0s.
func dur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
func num(n int64) string { return strconv.FormatInt(n, 10) }

var schema = object("", "",
	object("store", "Where jobs are stored.",
		leaf("backend", "The store: `embedded` (a directory on this machine, FoundationDB's transaction semantics) or `fdb` (a FoundationDB cluster; needs a binary built with `-tags fdb`).").
			byDefault(BackendEmbedded).oneOf(BackendEmbedded, BackendFDB),
		leaf("path", "Directory of the embedded store, relative to the working directory; created if missing. Only one process can open it.").
			byDefault(DefaultStorePath),
		leaf("cluster_file", "FoundationDB cluster file (backend `fdb` only); empty: the client's default (`/etc/foundationdb/fdb.cluster`)."),
		leaf("prefix", "First element of every key jobstage writes, on either backend, so that several deployments can share one store.").
			byDefault(DefaultPrefix),
		leaf("event_retention", "How long the event log of a followed type (`GET /v1/events`) keeps an event; a client that reconnects within it (and within a minute of leaving) misses nothing. More than 0.").
			byDefault(dur(fdbq.DefaultEventRetention)),
		leaf("history_retention", "How long a type's history (jobs finished and attempts retried per minute: `GET /v1/types/{type}/history`, the web UI's activity) keeps a minute. At least 1m.").
			byDefault(dur(fdbq.DefaultHistoryRetention)),
	),
	object("types", "Job types, by name. A type must be declared here to be enqueued or worked; a type with no keys (`name: {}`) takes every default. A name is 1 to 128 ASCII letters, digits, `_`, `-` and `.`, starting with a letter or a digit: it is also a metric label, a segment of the HTTP API's paths and of these environment variables.",
		leaf("activity_timeout", "A running job whose worker has not sent a heartbeat for this long is taken back by the activity monitor and retried. At least 100ms.").
			byDefault(dur(fdbq.DefaultActivityTimeout)),
		object("retry", "How often and when a failed job runs again.",
			leaf("max_attempts", "Attempts a job gets in all; after the last one fails the job finishes as failed. 1: no retries.").
				byDefault(num(fdbq.DefaultMaxAttempts)),
			leaf("backoff", "How the delay before a retry grows with the attempt: `exponential` (base·2^(attempt−1), jittered), `linear` (base·attempt) or `constant` (base).").
				byDefault(string(fdbq.Exponential)).oneOf(string(fdbq.Exponential), string(fdbq.Linear), string(fdbq.Constant)),
			leaf("base", "The first delay.").byDefault(dur(fdbq.DefaultBackoffBase)),
			leaf("max", "Cap on one delay; 0: none.").byDefault(dur(fdbq.DefaultBackoffMax)),
		),
		leaf("retention", "How long finished jobs are kept; 0 keeps them forever.").
			byDefault(dur(fdbq.DefaultRetention)),
		leaf("zones", "How many zones the jobs of one fairness key are spread over, by a hash of their ids; an accept merges the first entries of a key's zones, so priority and order hold across them. 0: "+num(fdbq.DefaultZones)+". At most "+num(fdbq.MaxZones)+". A change applies to jobs added from then on.").
			byDefault("0"),
		leaf("max_running", "Bound on the type's running jobs across every process; 0: none.").
			byDefault("0"),
		keyPolicy(object("keys", "Policies of named fairness keys (a job's `key`), by key. A key is 1 to "+num(fdbq.MaxKeySize)+" bytes of UTF-8 without control characters; at most "+num(fdbq.MaxKeyPolicies)+" policies.")),
		keyPolicy(object("key_default", "The policy of every key not under `keys`; its `weight` is also that of the jobs without a key.")),
		leaf("paused", "Paused types are not handed to workers; jobs can still be added and nothing is lost. true pauses the type at start; false leaves a pause made at run time (`jobstage pause`) in place until `jobstage resume`. The type's other settings are applied at every start.").
			byDefault("false"),
	),
	object("pipelines", "Pipelines, by name: each works one declared type with one handler.",
		leaf("type", "The job type worked; it must be declared under `types`. Required."),
		leaf("concurrency", "Handlers running at once.").
			byDefault(num(consumer.DefaultConcurrency)).atLeast(1),
		leaf("max_demand", "Jobs the pipeline asks for up front; those beyond `concurrency` wait, already accepted, so that a handler finds its next job at once.").
			computed("2 × concurrency").atLeast(1),
		leaf("min_demand", "The level of outstanding demand at which the pipeline asks for more; below `max_demand`.").
			computed("max_demand / 2").atLeast(1),
		leaf("timeout", "Bound on one attempt; when it passes the handler is stopped (an exec command is killed) and the attempt fails. 0: none.").
			byDefault("0s"),
		leaf("express", "Jobs the pipeline takes at once, in an accept of their own, when a fairness key's jobs become ready while it works other keys' backlog: from the demand left, or beyond the demand when the backlog uses it up (at most this many more). Such a key's first jobs start without waiting for the backlog's next batch. 0: none.").
			byDefault(num(pipeline.DefaultExpress)).atLeast(0),
		leaf("batch_limit", "Jobs one accept takes at most, in one transaction.").
			byDefault(num(producer.DefaultBatchLimit)).atLeast(1).atMost(producer.MaxBatchLimit),
		leaf("acceptors", "Accepts the pipeline keeps in flight at once, each for its share of the demand. More keep jobs coming while one commits, which a store far away (FoundationDB) needs; on the embedded store one accept loop keeps up with the handlers, and a job of a fairness key newly ready behind another key's backlog then starts sooner, since fewer accepts of the backlog are in flight to pick it up (see Fairness in the README).").
			byDefault(num(producer.DefaultAcceptors)).atLeast(1).atMost(producer.MaxAcceptors),
		object("handler", "What runs each job: exactly one of `exec`, `http` and `go`.",
			object("exec", "Runs a command per job: the job's data as JSON on stdin; its id, type and attempt in the environment; exit status 0 succeeds with stdout as the result, anything else fails with the tail of stderr.",
				leaf("command", "The command and its arguments, run directly, never through a shell. Required. The program must be there when the config is loaded: a bare name is looked up in `$PATH`, a path must be an executable file (a relative one is taken from `dir` when that is set)."),
				leaf("dir", "Working directory, which must exist; empty: jobstage's own."),
				leaf("env", "Environment variables set in the command's environment."),
				leaf("pass_env", "Names of variables of jobstage's environment passed on to the command. It gets only these, `PATH`, `HOME`, `LANG`, `LC_*`, `TZ`, `TMPDIR`, `env` and the job's variables; a token's `value_env` is never passed on and may not be named."),
				leaf("max_output", "Bound on the bytes of stdout taken as the job's result; at most 90000, the limit a job's data, result and error share (a longer output fails the attempt).").
					byDefault(num(DefaultMaxOutput)).atLeast(1),
			),
			object("http", "POSTs each job as JSON to a URL: a 2xx status succeeds with the response body as the result, any other status fails.",
				leaf("url", "An http or https URL. Required."),
				leaf("headers", "Headers sent with each request."),
				leaf("timeout", "Bound on one request.").byDefault(dur(DefaultHTTPTimeout)),
			),
			leaf("go", "The name of a Go handler registered by the application that embeds jobstage (`server.Options.Handlers`); `jobstage serve` itself registers none."),
		),
	),
	object("schedules", "Periodic jobs, by schedule name: at each tick a job of `type` is added, with the id `NAME@TIME` (the tick's instant in UTC), in the transaction that records the tick, so each tick has one job however many servers run. A name follows the rules of type names, at most "+num(fdbq.MaxScheduleNameSize)+" bytes. Schedules are kept in the store: one removed from this file keeps running until `jobstage schedules delete NAME`.",
		leaf("type", "The job type each tick adds; it must be declared under `types`. Required."),
		leaf("cron", "A cron expression on the wall clock of `timezone`: five fields (minute hour day-of-month month day-of-week), six with seconds first, or `@yearly`, `@monthly`, `@weekly`, `@daily`, `@hourly`. Each matching wall time ticks once: a time repeated when clocks go back ticks at its first occurrence, times skipped when clocks go forward tick once at the jump. Exactly one of `cron` and `every`."),
		leaf("timezone", "IANA time zone of `cron` (`Europe/Paris`); empty: UTC."),
		leaf("every", "A fixed interval instead of `cron`: ticks at the multiples of it since the Unix epoch, at least 1s.").
			byDefault("0s"),
		leaf("data", "The job's data: JSON text (`data: '{\"report\": \"daily\"}'`); empty: null."),
		leaf("priority", "The job's priority: higher runs first among due jobs.").byDefault("0"),
		leaf("key", "The job's fairness key; empty: none."),
		leaf("max_attempts", "Overrides the type's `retry.max_attempts` for the job; 0: the type's.").byDefault("0").atLeast(0),
		leaf("missed", "What is done with ticks missed while no server ran (handled more than `grace` late): `once` (one job for the latest), `skip` (none) or `each` (one for each, the latest `missed_limit`).").
			byDefault("once").oneOf("once", "skip", "each"),
		leaf("missed_limit", "Bound on the missed ticks `each` adds; 0: "+num(fdbq.DefaultMissedLimit)+". At most "+num(fdbq.MaxMissedLimit)+".").
			byDefault("0").atLeast(0),
		leaf("grace", "How late a tick may be handled and still count as on time; 0: "+dur(fdbq.DefaultGrace)+". At most 24h.").
			byDefault("0s"),
	),
	object("http", "The HTTP API (clients, external workers, health and metrics).",
		leaf("listen", "Address to listen on, host:port. Without tokens only a loopback address is allowed.").
			byDefault(DefaultListen),
		object("tokens", "Bearer tokens and the role each grants. With none, every request is allowed and the API serves only on loopback.",
			leaf("name", "Names the token in logs. Required, unique."),
			leaf("role", "`admin` (everything), `producer` (enqueue and inspect jobs), `worker` (accept, heartbeat, finish and fail jobs) or `metrics` (read the metrics endpoint, nothing else: a scraper's token). Required.").
				oneOf(roleNames()...),
			leaf("value_env", "Environment variable that holds the secret. Exactly one of `value_env` and `value_file`."),
			leaf("value_file", "File that holds the secret; surrounding whitespace is dropped."),
		).rejecting("value", "inline secrets are not allowed; put the token in an environment variable (value_env) or a file (value_file)"),
		object("tls", "Serve HTTPS: both files, or neither for plain HTTP.",
			leaf("cert_file", "PEM certificate (chain) file."),
			leaf("key_file", "PEM private key file."),
		),
		leaf("max_body_bytes", "Bound on a request body; larger requests get 413.").
			byDefault(num(DefaultMaxBodyBytes)).atLeast(1),
		leaf("read_header_timeout", "Bound on reading a request's headers; a client that has not sent them by then is disconnected. More than 0.").
			byDefault(dur(DefaultReadHeaderTimeout)),
		leaf("read_timeout", "Bound on reading a whole request, headers and body; a client that has not sent its body by then is disconnected. At least `read_header_timeout`.").
			byDefault(dur(DefaultReadTimeout)),
		leaf("request_timeout", "Bound on one request, from its headers to its answer; past it the request is answered 503 `not_ready` (once its body has been read: a body still arriving at `read_timeout` is cut off with no answer) and a client that does not read the answer is disconnected. The long polls (accept, wait) get their wait, at most 60s, more. More than 0.").
			byDefault(dur(DefaultRequestTimeout)),
		leaf("idle_timeout", "How long a kept-alive connection may wait for its next request. More than 0.").
			byDefault(dur(DefaultIdleTimeout)),
		leaf("max_connections", "Bound on the connections open at once; past it a new connection waits to be accepted until one closes.").
			byDefault(num(DefaultMaxConnections)).atLeast(1),
		leaf("max_event_streams", "Bound on the event streams (`GET /v1/events`) served at once; past it a new one is answered 503 `busy`.").
			byDefault(num(httpapi.DefaultMaxStreams)).atLeast(1),
		leaf("session_ttl", "How long a web UI login lasts: the session cookie names its token and its end, signed with the token's secret (it does not hold the secret). More than 0.").
			byDefault(dur(httpapi.DefaultSessionTTL)),
	),
	object("metrics", "Prometheus metrics.",
		leaf("path", "Path of the metrics endpoint on the HTTP API's listener. An explicit empty string (`\"\"`) turns it off: no route is served. With `http.tokens` the endpoint needs an `admin` or `metrics` token (the metrics name every type and pipeline and show the traffic); without tokens it is open to loopback clients, like the whole API.").
			byDefault(DefaultMetricsPath),
	),
	object("shutdown", "How the server stops, on SIGTERM or SIGINT: the HTTP API stops taking requests and closes the connections still open, jobs accepted but not started go back to pending, and running handlers get `drain_timeout` to finish; a second signal stops at once.",
		leaf("drain_timeout", "How long running handlers get to finish when the server stops; then they are interrupted and their jobs retried. More than 0, at most 1h.").
			byDefault(dur(DefaultDrainTimeout)),
	),
	object("tracing", "OpenTelemetry traces, exported over OTLP; without this key none are. A job stores the trace context it was enqueued in (a request's `traceparent` header, or the enqueue's span) and its handler's spans continue that trace; an exec command gets it in `TRACEPARENT` and `TRACESTATE`. The spans are `jobstage.enqueue`, `jobstage.accept`, `jobstage.handle` (one per attempt) and `jobstage.finish`, with the job's type, id and attempt as `jobstage.job.type`, `jobstage.job.id` and `jobstage.job.attempt`. Spans still buffered are sent when the server stops.",
		leaf("endpoint", "The OTLP collector, host:port (`localhost:4317` for grpc, `localhost:4318` for http). Required."),
		leaf("protocol", "`grpc`, or `http` (protobuf over HTTP, to `/v1/traces`).").
			byDefault(DefaultTracingProtocol).oneOf(ProtocolGRPC, ProtocolHTTP),
		leaf("insecure", "Send without TLS (a collector on this machine or a private network).").
			byDefault("false"),
		leaf("headers", "Headers sent with each export, such as an API key (`${VAR}` keeps it out of the file)."),
		leaf("sample_ratio", "The share of new traces recorded, from 0 to 1; a trace continued from a caller's `traceparent` is recorded when the caller's was.").
			byDefault("1"),
		leaf("service_name", "The `service.name` of the spans.").
			byDefault(DefaultTracingServiceName),
	),
	object("logging", "Logs (log/slog), on standard error.",
		leaf("level", "`debug`, `info`, `warn` or `error`.").
			byDefault("info").oneOf("debug", "info", "warn", "error"),
		leaf("format", "`text` or `json`.").
			byDefault("text").oneOf("text", "json"),
	),
)

// keyPolicy gives f the keys of a fairness key's policy (KeyPolicy).
func keyPolicy(f *field) *field {
	f.fields = []*field{
		leaf("weight", "The key's share of accepts among the keys with ready jobs: a key of weight 2 is chosen twice as often as one of 1. 0: 1. At most "+num(fdbq.MaxKeyWeight)+".").
			byDefault("0"),
		leaf("max_running", "Bound on the key's running jobs across every process; 0: none.").
			byDefault("0"),
		leaf("max_starts", "Jobs of the key that start in each `per`; 0: no bound. Needs `per`.").
			byDefault("0"),
		leaf("per", "The window of `max_starts`, at least 1ms when `max_starts` is set.").
			byDefault("0s"),
		leaf("zones", "Overrides the type's `zones` for the key; 0: the type's. At most "+num(fdbq.MaxZones)+".").
			byDefault("0"),
	}
	return f
}

func init() {
	bind(schema, reflect.TypeFor[Config]())
}

// bind ties f's fields to the fields of struct type t by yaml tag, and
// panics if the two disagree: the schema and the Config types must
// describe the same keys.
func bind(f *field, t reflect.Type) {
	tags := map[string]bool{}
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("yaml")
		if tag == "" || tag == "-" {
			continue
		}
		tags[tag] = true
		c := f.child(tag)
		if c == nil {
			panic(fmt.Sprintf("config: %s.%s (yaml %q) is not in the schema", t.Name(), sf.Name, tag))
		}
		c.index, c.typ = sf.Index, sf.Type
		c.kind = kindOf(sf.Type)
		switch c.kind {
		case kindObject:
			bind(c, sf.Type)
		case kindOptional, kindMap, kindList:
			bind(c, sf.Type.Elem())
		default:
			if len(c.fields) > 0 {
				panic(fmt.Sprintf("config: schema key %q has fields but %s.%s is a %v", tag, t.Name(), sf.Name, sf.Type))
			}
		}
	}
	for _, c := range f.fields {
		if !tags[c.key] {
			panic(fmt.Sprintf("config: schema key %q has no field in %s", c.key, t.Name()))
		}
	}
}

func kindOf(t reflect.Type) kind {
	if t == reflect.TypeFor[time.Duration]() {
		return kindDuration
	}
	switch t.Kind() {
	case reflect.String:
		return kindString
	case reflect.Int, reflect.Int64:
		return kindInt
	case reflect.Bool:
		return kindBool
	case reflect.Float64:
		return kindFloat
	case reflect.Struct:
		return kindObject
	case reflect.Pointer:
		if t.Elem().Kind() == reflect.Struct {
			return kindOptional
		}
	case reflect.Slice:
		switch t.Elem().Kind() {
		case reflect.String:
			return kindStrings
		case reflect.Struct:
			return kindList
		}
	case reflect.Map:
		if t.Key().Kind() == reflect.String {
			switch t.Elem().Kind() {
			case reflect.String:
				return kindStringMap
			case reflect.Struct:
				return kindMap
			}
		}
	}
	panic(fmt.Sprintf("config: no schema kind for %v", t))
}

// what is how problems and Docs name a kind.
func (k kind) what() string {
	switch k {
	case kindString:
		return "string"
	case kindInt:
		return "integer"
	case kindBool:
		return "boolean"
	case kindFloat:
		return "number"
	case kindDuration:
		return "duration"
	case kindStrings:
		return "list of strings"
	case kindStringMap:
		return "map of strings"
	case kindList:
		return "list"
	case kindMap:
		return "map"
	default:
		return "mapping"
	}
}
