package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/kv/tuple"
)

// Config is a jobstage deployment: where jobs are stored, the job types,
// the pipelines that work them, the HTTP API, metrics and logging. Parse
// and Load return it with defaults applied, environment overrides taken
// and secrets resolved.
type Config struct {
	Store     Store               `yaml:"store"`
	Types     map[string]Type     `yaml:"types"`     // key: job type name
	Pipelines map[string]Pipeline `yaml:"pipelines"` // key: pipeline name
	Schedules map[string]Schedule `yaml:"schedules"` // key: schedule name
	HTTP      HTTP                `yaml:"http"`
	Metrics   Metrics             `yaml:"metrics"`
	Logging   Logging             `yaml:"logging"`
	Shutdown  Shutdown            `yaml:"shutdown"`
	// Tracing exports OpenTelemetry traces; nil (no tracing key): none.
	Tracing *Tracing `yaml:"tracing"`
}

// Backends of Store.
const (
	BackendEmbedded = "embedded"
	BackendFDB      = "fdb"
)

// Store says where jobs are kept.
type Store struct {
	// Backend is BackendEmbedded (the default) or BackendFDB.
	Backend string `yaml:"backend"`
	// Path is the embedded store's directory; default DefaultStorePath.
	Path string `yaml:"path"`
	// ClusterFile is FoundationDB's cluster file; empty: the client's
	// default.
	ClusterFile string `yaml:"cluster_file"`
	// Prefix is the first element of every key jobstage writes, so that
	// several deployments can share one store; default DefaultPrefix.
	Prefix string `yaml:"prefix"`
	// EventRetention is how long a followed type's event log keeps an
	// event (GET /v1/events); default fdbq.DefaultEventRetention.
	EventRetention time.Duration `yaml:"event_retention"`
	// HistoryRetention is how long a type's history (GET
	// /v1/types/{type}/history) keeps a minute; default
	// fdbq.DefaultHistoryRetention.
	HistoryRetention time.Duration `yaml:"history_retention"`
}

// KeyPrefix returns the tuple-encoded key prefix for fdbq.Options.Prefix;
// with the default Prefix it equals fdbq.DefaultPrefix.
func (s Store) KeyPrefix() []byte {
	return tuple.Tuple{s.Prefix}.MustPack()
}

// Type is a job type's settings.
type Type struct {
	// ActivityTimeout: a running job whose worker has not heartbeated for
	// this long is taken back and retried.
	ActivityTimeout time.Duration `yaml:"activity_timeout"`
	Retry           Retry         `yaml:"retry"`
	// Retention is how long finished jobs are kept; 0 keeps them forever.
	Retention time.Duration `yaml:"retention"`
	// Paused types are not accepted by workers; adds still work.
	Paused bool `yaml:"paused"`
	// Zones is how many zones the jobs of one fairness key are spread
	// over (0: fdbq.DefaultZones).
	Zones int `yaml:"zones"`
	// MaxRunning bounds the type's running jobs across every process
	// (0: no bound).
	MaxRunning int `yaml:"max_running"`
	// Keys are the policies of named fairness keys; KeyDefault is every
	// other key's, and gives the weight of the jobs without a key.
	Keys       map[string]KeyPolicy `yaml:"keys"`
	KeyDefault KeyPolicy            `yaml:"key_default"`
}

// KeyPolicy is how the jobs of one fairness key share a type
// (fdbq.KeyPolicy).
type KeyPolicy struct {
	// Weight is the key's share of accepts among the keys with ready jobs
	// (0: 1).
	Weight int `yaml:"weight"`
	// MaxRunning bounds the key's running jobs (0: no bound).
	MaxRunning int `yaml:"max_running"`
	// MaxStarts jobs of the key start in each Per (0: no bound).
	MaxStarts int           `yaml:"max_starts"`
	Per       time.Duration `yaml:"per"`
	// Zones overrides the type's Zones for the key (0: the type's).
	Zones int `yaml:"zones"`
}

// Policy returns p as the jobs layer's key policy.
func (p KeyPolicy) Policy() fdbq.KeyPolicy {
	return fdbq.KeyPolicy{Weight: p.Weight, MaxRunning: p.MaxRunning, MaxStarts: p.MaxStarts, Per: p.Per, Zones: p.Zones}
}

// Settings returns t as the jobs layer's settings.
func (t Type) Settings() fdbq.TypeSettings {
	return fdbq.TypeSettings{
		ActivityTimeout: t.ActivityTimeout,
		Retry:           t.Retry.Policy(),
		Paused:          t.Paused,
		Retention:       t.Retention,
		Zones:           t.Zones,
		MaxRunning:      t.MaxRunning,
		Keys:            keyPolicies(t.Keys),
		KeyDefault:      t.KeyDefault.Policy(),
	}
}

// keyPolicies returns m as the jobs layer's key policies; nil for nil.
func keyPolicies(m map[string]KeyPolicy) map[string]fdbq.KeyPolicy {
	if m == nil {
		return nil
	}
	out := make(map[string]fdbq.KeyPolicy, len(m))
	for k, p := range m {
		out[k] = p.Policy()
	}
	return out
}

// Schedule is a periodic job: a job of Type added at each tick of Cron
// (in Timezone) or of Every (fdbq.Schedule).
type Schedule struct {
	Type     string        `yaml:"type"`
	Cron     string        `yaml:"cron"`
	Timezone string        `yaml:"timezone"`
	Every    time.Duration `yaml:"every"`
	// Data is the job's data, JSON text.
	Data        string        `yaml:"data"`
	Priority    int           `yaml:"priority"`
	Key         string        `yaml:"key"`
	MaxAttempts int           `yaml:"max_attempts"`
	Missed      string        `yaml:"missed"`
	MissedLimit int           `yaml:"missed_limit"`
	Grace       time.Duration `yaml:"grace"`
}

// Schedule returns s, named name, as the jobs layer's schedule, or what is
// wrong with its missed-tick policy.
func (s Schedule) Schedule(name string) (fdbq.Schedule, error) {
	m, err := fdbq.ParseMissed(s.Missed)
	if err != nil {
		return fdbq.Schedule{}, err
	}
	var data json.RawMessage
	if s.Data != "" {
		data = json.RawMessage(s.Data)
	}
	return fdbq.Schedule{Name: name, Cron: s.Cron, Timezone: s.Timezone, Every: s.Every,
		Job:    fdbq.NewJob{Type: s.Type, Data: data, Priority: s.Priority, Key: s.Key, MaxAttempts: s.MaxAttempts},
		Missed: m, MissedLimit: s.MissedLimit, Grace: s.Grace}, nil
}

// Retry is a type's retry policy.
type Retry struct {
	// MaxAttempts is how many attempts a job gets in all; 1: no retries.
	MaxAttempts int `yaml:"max_attempts"`
	// Backoff is one of fdbq's backoffs: exponential, linear or constant.
	Backoff string `yaml:"backoff"`
	// Base is the first delay; Max caps one delay (0: no cap).
	Base time.Duration `yaml:"base"`
	Max  time.Duration `yaml:"max"`
}

// Policy returns r as the jobs layer's retry policy.
func (r Retry) Policy() fdbq.RetryPolicy {
	return fdbq.RetryPolicy{MaxAttempts: r.MaxAttempts, Backoff: fdbq.Backoff(r.Backoff), Base: r.Base, Max: r.Max}
}

// Pipeline works one job type with one handler.
type Pipeline struct {
	// Type is the job type worked; it must be declared under types.
	Type string `yaml:"type"`
	// Concurrency bounds the handlers running at once.
	Concurrency int `yaml:"concurrency"`
	// MaxDemand is how many jobs the pipeline asks for up front; MinDemand
	// the level at which it asks again (consumer.Options).
	MaxDemand int `yaml:"max_demand"`
	MinDemand int `yaml:"min_demand"`
	// Timeout bounds one attempt; 0: none.
	Timeout time.Duration `yaml:"timeout"`
	// Express is how many jobs the pipeline takes at once for fairness
	// keys whose jobs become ready while it works other keys' backlog,
	// beyond the demand when that is used up (pipeline.Options.Express);
	// 0: none.
	Express int `yaml:"express"`
	// BatchLimit bounds the jobs one accept takes; Acceptors is how many
	// accepts the pipeline keeps in flight (producer.Options).
	BatchLimit int     `yaml:"batch_limit"`
	Acceptors  int     `yaml:"acceptors"`
	Handler    Handler `yaml:"handler"`
}

// Handler is a pipeline's built-in handler; exactly one field is set.
type Handler struct {
	Exec *ExecHandler `yaml:"exec"`
	HTTP *HTTPHandler `yaml:"http"`
	// Go names a Go handler that the application embedding jobstage
	// registered with the server (server.Options.Handlers).
	Go string `yaml:"go"`
}

// ExecHandler runs a command per job: the job's data as JSON on stdin,
// its id, type and attempt in the environment; exit status 0 succeeds with
// stdout as the result, anything else fails with the tail of stderr.
type ExecHandler struct {
	// Command is the argv; it is run directly, never through a shell.
	Command []string `yaml:"command"`
	// Dir is the working directory; empty: jobstage's own.
	Dir string `yaml:"dir"`
	// Env is set in the command's environment.
	Env map[string]string `yaml:"env"`
	// PassEnv names variables of jobstage's environment passed on to the
	// command besides handlers.BaseEnv; a token's value_env never is.
	PassEnv []string `yaml:"pass_env"`
	// MaxOutput bounds the bytes of stdout kept as the result; default
	// DefaultMaxOutput.
	MaxOutput int `yaml:"max_output"`
}

// HTTPHandler POSTs each job as JSON to a URL: a 2xx status succeeds with
// the body as the result, any other fails.
type HTTPHandler struct {
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
	// Timeout bounds one request; default DefaultHTTPTimeout.
	Timeout time.Duration `yaml:"timeout"`
}

// HTTP configures the HTTP API.
type HTTP struct {
	// Listen is the address to listen on; default DefaultListen.
	Listen string `yaml:"listen"`
	// Tokens are the bearer tokens accepted. With none, the API serves
	// only on a loopback address.
	Tokens []Token `yaml:"tokens"`
	TLS    TLS     `yaml:"tls"`
	// MaxBodyBytes bounds request bodies; default DefaultMaxBodyBytes.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// ReadHeaderTimeout bounds reading a request's headers;
	// default DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, headers and body;
	// default DefaultReadTimeout.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// RequestTimeout bounds one request, from its headers to its answer,
	// except that the long polls (accept, wait) get their wait (at most
	// 60 s) more; default DefaultRequestTimeout.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// IdleTimeout bounds how long a kept-alive connection waits for its
	// next request; default DefaultIdleTimeout.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxConnections bounds the connections open at once; past it new
	// ones wait to be accepted. Default DefaultMaxConnections.
	MaxConnections int `yaml:"max_connections"`
	// MaxEventStreams bounds the event streams (GET /v1/events) served
	// at once. Default httpapi.DefaultMaxStreams.
	MaxEventStreams int `yaml:"max_event_streams"`
	// SessionTTL is how long a web UI login lasts. Default
	// httpapi.DefaultSessionTTL.
	SessionTTL time.Duration `yaml:"session_ttl"`
}

// Token is a bearer token and the role it grants.
type Token struct {
	Name string `yaml:"name"`
	// Role is httpapi.RoleAdmin, RoleProducer, RoleWorker or RoleMetrics
	// (the metrics endpoint only: a scraper's token): the HTTP API's roles,
	// by the same names.
	Role httpapi.Role `yaml:"role"`
	// Value is the secret, read from ValueEnv or ValueFile; it is never
	// written in the file itself.
	Value string `yaml:"-"`
	// ValueEnv names the environment variable that holds the secret.
	ValueEnv string `yaml:"value_env"`
	// ValueFile names the file that holds the secret (surrounding
	// whitespace is dropped).
	ValueFile string `yaml:"value_file"`
}

// TLS names the certificate and key files; both empty serves plain HTTP.
type TLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Metrics configures the Prometheus endpoint.
type Metrics struct {
	// Path serves the metrics on the HTTP API's listener; default
	// DefaultMetricsPath. An explicit empty string turns the endpoint off.
	// With tokens configured the endpoint needs an admin or a metrics
	// token; without, it is open to loopback clients, like the API.
	Path string `yaml:"path"`
}

// Shutdown configures how a server stops.
type Shutdown struct {
	// DrainTimeout is how long running handlers get to finish when the
	// server stops, before they are interrupted and their jobs retried;
	// default DefaultDrainTimeout.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
}

// Protocols of Tracing.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http"
)

// Tracing configures the export of OpenTelemetry traces over OTLP.
type Tracing struct {
	// Endpoint is the collector's host:port.
	Endpoint string `yaml:"endpoint"`
	// Protocol is ProtocolGRPC (the default) or ProtocolHTTP
	// (protobuf over HTTP, at /v1/traces).
	Protocol string `yaml:"protocol"`
	// Insecure sends without TLS.
	Insecure bool `yaml:"insecure"`
	// Headers are sent with each export (an API key, say).
	Headers map[string]string `yaml:"headers"`
	// SampleRatio is the share of new traces recorded, 0 to 1; a trace
	// continued from a caller follows the caller's choice.
	SampleRatio float64 `yaml:"sample_ratio"`
	// ServiceName is the service.name of the spans' resource.
	ServiceName string `yaml:"service_name"`
}

// Logging configures the log/slog logger.
type Logging struct {
	// Level is debug, info (the default), warn or error.
	Level string `yaml:"level"`
	// Format is text (the default) or json.
	Format string `yaml:"format"`
}

// Defaults that are not the jobs layer's (those are fdbq's Default*).
const (
	DefaultStorePath    = "./jobstage-data"
	DefaultPrefix       = "jobstage"
	DefaultListen       = "127.0.0.1:8080"
	DefaultMaxBodyBytes = 1 << 20
	DefaultMaxOutput    = 64 << 10
	DefaultHTTPTimeout  = 30 * time.Second
	DefaultMetricsPath  = "/metrics"

	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultRequestTimeout    = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxConnections    = 1024
	DefaultDrainTimeout      = 30 * time.Second

	DefaultTracingProtocol    = ProtocolGRPC
	DefaultTracingServiceName = "jobstage"
)

// ErrInvalid is wrapped by the error Load returns for a config with
// problems.
var ErrInvalid = errors.New("config: invalid")

// Error is a config's problems, all of them.
type Error struct {
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	if len(e.Problems) == 1 {
		b.WriteString("config: ")
		b.WriteString(e.Problems[0].String())
		return b.String()
	}
	fmt.Fprintf(&b, "config: %d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n\t")
		b.WriteString(p.String())
	}
	return b.String()
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// Load reads the config file at path with the process's environment:
// defaults applied, environment overrides taken and secrets resolved. A
// config with any problem is refused with an *Error that lists every one
// (errors.Is(err, ErrInvalid)). Variables named like overrides that match
// no key are problems too.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, probs := parse(path, data, os.LookupEnv, os.Environ())
	if len(probs) > 0 {
		return nil, &Error{Problems: probs}
	}
	return c, nil
}

// Lint returns every problem of the config file at path, read with the
// process's environment as Load reads it; none means Load accepts it.
func Lint(path string) []Problem {
	data, err := os.ReadFile(path)
	if err != nil {
		return []Problem{{File: path, Message: err.Error()}}
	}
	_, probs := parse(path, data, os.LookupEnv, os.Environ())
	return probs
}

// Parse parses a config from data, naming it name in problems, with env
// looking up environment variables (os.LookupEnv in Load; nil: none are
// set). It returns the config, or nil and every problem found, sorted by
// position. Unlike Load it cannot list the environment, so it does not
// report override variables that match no key.
func Parse(name string, data []byte, env func(string) (string, bool)) (*Config, []Problem) {
	return parse(name, data, env, nil)
}
