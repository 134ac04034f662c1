package config_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/config"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/pipeline"
	"github.com/jobstage/jobstage/producer"
)

// env returns a lookup over vars, for Parse.
func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

func mustParse(t *testing.T, src string, vars map[string]string) *config.Config {
	t.Helper()
	c, probs := config.Parse("test.yaml", []byte(src), env(vars))
	for _, p := range probs {
		t.Errorf("problem: %s", p)
	}
	if c == nil {
		t.Fatal("no config")
	}
	return c
}

func TestQuickstart(t *testing.T) {
	data, err := os.ReadFile("../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := mustParse(t, string(data), nil)
	if c.Store.Backend != config.BackendEmbedded || c.Store.Path != "./jobstage-data" {
		t.Errorf("store = %+v", c.Store)
	}
	if !bytes.Equal(c.Store.KeyPrefix(), fdbq.DefaultPrefix) {
		t.Errorf("KeyPrefix = %q, want fdbq.DefaultPrefix %q", c.Store.KeyPrefix(), fdbq.DefaultPrefix)
	}
	p, ok := c.Pipelines["echo"]
	if !ok {
		t.Fatalf("pipelines = %v", c.Pipelines)
	}
	if _, ok := c.Types[p.Type]; !ok {
		t.Errorf("pipeline type %q is not declared", p.Type)
	}
	if p.Handler.Exec == nil || !reflect.DeepEqual(p.Handler.Exec.Command, []string{"cat"}) || p.Handler.HTTP != nil {
		t.Errorf("handler = %+v", p.Handler)
	}
	if p.Concurrency != 4 || p.MaxDemand != 8 || p.MinDemand != 4 || p.Timeout != 10*time.Second {
		t.Errorf("pipeline = %+v", p)
	}
	if p.Handler.Exec.MaxOutput != config.DefaultMaxOutput {
		t.Errorf("max_output = %d", p.Handler.Exec.MaxOutput)
	}
	if c.HTTP.Listen != "127.0.0.1:8080" || c.Metrics.Path != "/metrics" || c.HTTP.MaxBodyBytes != config.DefaultMaxBodyBytes {
		t.Errorf("http = %+v, metrics = %+v", c.HTTP, c.Metrics)
	}
	if err := c.Types["echo"].Settings().Validate(); err != nil {
		t.Error(err)
	}
}

func TestQuickstartLoads(t *testing.T) {
	if probs := config.Lint("../examples/quickstart.yaml"); len(probs) > 0 {
		t.Errorf("lint: %v", probs)
	}
	if _, err := config.Load("../examples/quickstart.yaml"); err != nil {
		t.Error(err)
	}
}

func TestDefaults(t *testing.T) {
	c := mustParse(t, "", nil)
	want := config.Config{
		Store: config.Store{Backend: "embedded", Path: config.DefaultStorePath, Prefix: config.DefaultPrefix, EventRetention: fdbq.DefaultEventRetention,
			HistoryRetention: fdbq.DefaultHistoryRetention},
		HTTP: config.HTTP{Listen: config.DefaultListen, MaxBodyBytes: config.DefaultMaxBodyBytes,
			ReadHeaderTimeout: config.DefaultReadHeaderTimeout, ReadTimeout: config.DefaultReadTimeout,
			RequestTimeout: config.DefaultRequestTimeout, IdleTimeout: config.DefaultIdleTimeout,
			MaxConnections: config.DefaultMaxConnections, MaxEventStreams: httpapi.DefaultMaxStreams, SessionTTL: httpapi.DefaultSessionTTL},
		Metrics:  config.Metrics{Path: config.DefaultMetricsPath},
		Logging:  config.Logging{Level: "info", Format: "text"},
		Shutdown: config.Shutdown{DrainTimeout: config.DefaultDrainTimeout},
	}
	if !reflect.DeepEqual(*c, want) {
		t.Errorf("empty file:\n got %+v\nwant %+v", *c, want)
	}

	c = mustParse(t, "types:\n  a:\n  b: {}\npipelines:\n  p: {type: a, handler: {http: {url: 'http://x/y'}}}\n", nil)
	for _, name := range []string{"a", "b"} {
		if got := c.Types[name].Settings(); !reflect.DeepEqual(got, fdbq.DefaultTypeSettings()) {
			t.Errorf("type %s: settings %+v, want fdbq's defaults %+v", name, got, fdbq.DefaultTypeSettings())
		}
	}
	p := c.Pipelines["p"]
	if p.Concurrency != 10 || p.MaxDemand != 20 || p.MinDemand != 10 || p.Handler.HTTP.Timeout != config.DefaultHTTPTimeout ||
		p.BatchLimit != producer.DefaultBatchLimit || p.Acceptors != producer.DefaultAcceptors || p.Express != pipeline.DefaultExpress {
		t.Errorf("pipeline = %+v %+v", p, p.Handler.HTTP)
	}

	c = mustParse(t, "metrics: {path: ''}\npipelines: {}\n", nil)
	if c.Metrics.Path != "" {
		t.Errorf("explicit empty metrics path = %q, want off", c.Metrics.Path)
	}
}

func TestSettings(t *testing.T) {
	c := mustParse(t, `
types:
  t:
    activity_timeout: 2m
    retry: {max_attempts: 1, backoff: constant, base: 5s, max: 0s}
    retention: 0s
    paused: true
`, nil)
	want := fdbq.TypeSettings{
		ActivityTimeout: 2 * time.Minute,
		Retry:           fdbq.RetryPolicy{MaxAttempts: 1, Backoff: fdbq.Constant, Base: 5 * time.Second},
		Paused:          true,
	}
	if got := c.Types["t"].Settings(); !got.Equal(want) {
		t.Errorf("Settings = %+v, want %+v", got, want)
	}
}

func TestFairnessSettings(t *testing.T) {
	c := mustParse(t, `
types:
  t:
    zones: 4
    max_running: 100
    keys:
      acme: {weight: 3, max_running: 10, max_starts: 50, per: 1m, zones: 8}
      "tenant/7": {}
    key_default: {weight: 2, max_running: 5}
`, map[string]string{
		"JOBSTAGE_TYPES__T__KEYS__ACME__MAX_RUNNING": "12",
		"JOBSTAGE_TYPES__T__KEY_DEFAULT__PER":        "30s",
		"JOBSTAGE_TYPES__T__KEY_DEFAULT__MAX_STARTS": "9",
	})
	want := fdbq.DefaultTypeSettings()
	want.Zones = 4
	want.MaxRunning = 100
	want.Keys = map[string]fdbq.KeyPolicy{
		"acme":     {Weight: 3, MaxRunning: 12, MaxStarts: 50, Per: time.Minute, Zones: 8},
		"tenant/7": {},
	}
	want.KeyDefault = fdbq.KeyPolicy{Weight: 2, MaxRunning: 5, MaxStarts: 9, Per: 30 * time.Second}
	got := c.Types["t"].Settings()
	if !got.Equal(want) {
		t.Errorf("Settings = %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
}

const overridable = `
types:
  send-email: {retry: {max_attempts: 3}}
pipelines:
  mail:
    type: send-email
    handler:
      http:
        url: http://localhost:9000/mail
        headers: {X-Team: mail}
  run:
    type: send-email
    handler: {exec: {command: [cat]}}
http:
  tokens:
    - {name: ops, role: admin, value_env: OPS_TOKEN}
`

func TestEnvOverrides(t *testing.T) {
	c := mustParse(t, overridable, map[string]string{
		"OPS_TOKEN":                "s3cret",
		"JOBSTAGE_HTTP__LISTEN":    "127.0.0.1:9999",
		"JOBSTAGE_STORE__PATH":     "/var/lib/jobstage",
		"JOBSTAGE_LOGGING__FORMAT": "json",
		"JOBSTAGE_TYPES__SEND_EMAIL__RETRY__MAX_ATTEMPTS":          "7",
		"JOBSTAGE_TYPES__SEND_EMAIL__PAUSED":                       "true",
		"JOBSTAGE_PIPELINES__MAIL__HANDLER__HTTP__HEADERS__X_TEAM": "ops",
		"JOBSTAGE_PIPELINES__RUN__HANDLER__EXEC__COMMAND":          `["tr", "a-z", "A-Z"]`,
		"JOBSTAGE_HTTP__TOKENS__0__ROLE":                           "worker",
		"JOBSTAGE_METRICS__PATH":                                   "",
	})
	if c.HTTP.Listen != "127.0.0.1:9999" || c.Store.Path != "/var/lib/jobstage" || c.Logging.Format != "json" {
		t.Errorf("scalars not overridden: %+v %+v %+v", c.HTTP, c.Store, c.Logging)
	}
	if ty := c.Types["send-email"]; ty.Retry.MaxAttempts != 7 || !ty.Paused {
		t.Errorf("type not overridden: %+v", ty)
	}
	if h := c.Pipelines["mail"].Handler.HTTP.Headers; h["X-Team"] != "ops" {
		t.Errorf("headers = %v", h)
	}
	if cmd := c.Pipelines["run"].Handler.Exec.Command; !reflect.DeepEqual(cmd, []string{"tr", "a-z", "A-Z"}) {
		t.Errorf("command = %q", cmd)
	}
	if tok := c.HTTP.Tokens[0]; tok.Role != "worker" || tok.Value != "s3cret" {
		t.Errorf("token = %+v", tok)
	}
	if c.Metrics.Path != "" {
		t.Errorf("metrics path = %q, want turned off by the empty override", c.Metrics.Path)
	}
}

func TestEnvName(t *testing.T) {
	for _, tc := range []struct {
		path []string
		want string
	}{
		{[]string{"http", "listen"}, "JOBSTAGE_HTTP__LISTEN"},
		{[]string{"types", "send-email", "activity_timeout"}, "JOBSTAGE_TYPES__SEND_EMAIL__ACTIVITY_TIMEOUT"},
		{[]string{"types", "img.resize", "retry", "max_attempts"}, "JOBSTAGE_TYPES__IMG_RESIZE__RETRY__MAX_ATTEMPTS"},
		{[]string{"http", "tokens", "0", "role"}, "JOBSTAGE_HTTP__TOKENS__0__ROLE"},
	} {
		if got := config.EnvName(tc.path...); got != tc.want {
			t.Errorf("EnvName(%q) = %s, want %s", tc.path, got, tc.want)
		}
	}
}

func TestExpand(t *testing.T) {
	c := mustParse(t, `
store: {path: "${DATA}/jobs", prefix: "${PREFIX:-js}"}
http: {listen: "127.0.0.1:${PORT:-8080}"}
pipelines:
  p: {type: t, handler: {exec: {command: [echo, "$${HOME}", "${GREETING}"]}}}
types: {t: {}}
`, map[string]string{"DATA": "/srv", "GREETING": "hi", "PORT": ""})
	if c.Store.Path != "/srv/jobs" || c.Store.Prefix != "js" || c.HTTP.Listen != "127.0.0.1:8080" {
		t.Errorf("store = %+v, listen = %s", c.Store, c.HTTP.Listen)
	}
	if cmd := c.Pipelines["p"].Handler.Exec.Command; !reflect.DeepEqual(cmd, []string{"echo", "${HOME}", "hi"}) {
		t.Errorf("command = %q", cmd)
	}
}

func TestSecrets(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("  from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := mustParse(t, `
http:
  listen: 0.0.0.0:8080
  tokens:
    - {name: a, role: admin, value_env: A_TOKEN}
    - {name: w, role: worker, value_file: `+file+`}
`, map[string]string{"A_TOKEN": "from-env"})
	if got := c.HTTP.Tokens; got[0].Value != "from-env" || got[1].Value != "from-file" {
		t.Errorf("tokens = %+v", got)
	}
}

func TestLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(path, []byte("http:\n  lisen: x\nlogging: {level: loud}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(path)
	var ce *config.Error
	if !errors.Is(err, config.ErrInvalid) || !errors.As(err, &ce) || len(ce.Problems) != 2 {
		t.Fatalf("Load = %v, want both problems", err)
	}
	want := "config: 2 problems:\n\t" + path + `:2:3: http.lisen: unknown key (did you mean "listen"?)` +
		"\n\t" + path + `:3:18: logging.level: unknown value "loud"; one of debug, info, warn, error`
	if err.Error() != want {
		t.Errorf("error:\n%s\nwant:\n%s", err, want)
	}

	if _, err := config.Load(filepath.Join(dir, "missing.yaml")); err == nil || errors.Is(err, config.ErrInvalid) {
		t.Errorf("Load of a missing file = %v", err)
	}
	if probs := config.Lint(filepath.Join(dir, "missing.yaml")); len(probs) != 1 || !strings.Contains(probs[0].String(), "no such file") {
		t.Errorf("Lint of a missing file = %v", probs)
	}
}

// TestLoadUnusedEnv: a variable named like an override that matches no
// key is a problem (a typo would otherwise be silently ignored).
func TestLoadUnusedEnv(t *testing.T) {
	t.Setenv("JOBSTAGE_HTTP__LISTN", "127.0.0.1:1")
	t.Setenv("JOBSTAGE_TYPES__NOPE__PAUSED", "true")
	t.Setenv("JOBSTAGE_SOMETHING_ELSE", "not an override")
	probs := config.Lint("../examples/quickstart.yaml")
	var got []string
	for _, p := range probs {
		got = append(got, p.String())
	}
	want := []string{
		"../examples/quickstart.yaml: environment variable JOBSTAGE_HTTP__LISTN overrides no key: no such key in the schema, or the type, pipeline, token or map entry it names is not in the file",
		"../examples/quickstart.yaml: environment variable JOBSTAGE_TYPES__NOPE__PAUSED overrides no key: no such key in the schema, or the type, pipeline, token or map entry it names is not in the file",
	}
	if !equalSets(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func equalSets(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		if seen[s]--; seen[s] < 0 {
			return false
		}
	}
	return true
}

// Tracing is off without its key; with it, its defaults and the values
// given.
func TestTracing(t *testing.T) {
	if c := mustParse(t, "store: {}\n", nil); c.Tracing != nil {
		t.Fatalf("tracing without the key: %+v", c.Tracing)
	}
	c := mustParse(t, "tracing: {endpoint: \"localhost:4317\"}\n", nil)
	want := config.Tracing{Endpoint: "localhost:4317", Protocol: "grpc", SampleRatio: 1, ServiceName: "jobstage"}
	if c.Tracing == nil || !reflect.DeepEqual(*c.Tracing, want) {
		t.Fatalf("defaults: %+v", c.Tracing)
	}
	c = mustParse(t, "tracing:\n  endpoint: collector:4318\n  protocol: http\n  insecure: true\n  headers: {x-api-key: \"${KEY}\"}\n  sample_ratio: 0.25\n  service_name: billing\n",
		map[string]string{"KEY": "s3cret", "JOBSTAGE_TRACING__SAMPLE_RATIO": "0.5"})
	want = config.Tracing{Endpoint: "collector:4318", Protocol: "http", Insecure: true, Headers: map[string]string{"x-api-key": "s3cret"}, SampleRatio: 0.5, ServiceName: "billing"}
	if !reflect.DeepEqual(*c.Tracing, want) {
		t.Fatalf("got %+v\nwant %+v", *c.Tracing, want)
	}
}

// TestSecretWhitespace: a token whose secret has whitespace at its start
// or end (an environment variable set to " s "), or a control character,
// could never authenticate (an Authorization header's value is read
// without the whitespace around it and cannot carry control characters):
// the config is refused, naming the token and the variable, never the
// secret.
func TestSecretWhitespace(t *testing.T) {
	src := `
http:
  listen: 0.0.0.0:8080
  tokens:
    - {name: ops, role: admin, value_env: OPS_TOKEN}
    - {name: shop, role: producer, value_env: SHOP_TOKEN}
`
	for _, v := range []string{" s3cr3t-value ", "s3cr3t-value\n", "\ts3cr3t-value", "s3cr3t-value\u00a0", "s3cr3t\x00value", "s3cr3t\x7fvalue"} {
		_, probs := config.Parse("test.yaml", []byte(src), env(map[string]string{"OPS_TOKEN": "fine-secret", "SHOP_TOKEN": v}))
		if len(probs) != 1 {
			t.Fatalf("SHOP_TOKEN=%q: problems %v, want one", v, probs)
		}
		p := probs[0]
		if p.Key != "http.tokens.1.value_env" || !strings.Contains(p.Message, "shop") || !strings.Contains(p.Message, "SHOP_TOKEN") || strings.Contains(p.String(), "s3cr3t") {
			t.Errorf("SHOP_TOKEN=%q: %s", v, p)
		}
	}
	// Inner spaces are carried: such a secret is fine.
	mustParse(t, src, map[string]string{"OPS_TOKEN": "fine-secret", "SHOP_TOKEN": "a secret with spaces"})
}
