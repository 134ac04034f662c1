package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/config"
)

// lintCases are bad configs and every problem each must give, exactly.
// Each src starts at line 1 (no leading newline) so positions read off
// the text.
var lintCases = []struct {
	name string
	src  string
	env  map[string]string
	want []string
}{
	{
		name: "yaml syntax",
		src:  "store:\n  path: [x\n",
		want: []string{"f.yaml:1: did not find expected ',' or ']'"},
	},
	{
		name: "a bad type name or concurrency hides nothing else",
		src: "types:\n  \"bad name!\": {activity_timeout: 10ms, retry: {max_attempts: 0}}\n" +
			"pipelines:\n  p: {type: \"bad name!\", concurrency: 0, max_demand: 1, min_demand: 5, handler: {go: h}}\n",
		want: []string{
			`f.yaml:2:3: types.bad name!: type name "bad name!" has ' ' at byte 3; use ASCII letters, digits, '_', '-' and '.'`,
			`f.yaml:2:35: types.bad name!.activity_timeout: activity timeout 10ms is below 100ms`,
			`f.yaml:2:63: types.bad name!.retry.max_attempts: max_attempts 0 is below 1`,
			`f.yaml:4:39: pipelines.p.concurrency: must be at least 1, got 0`,
			`f.yaml:4:69: pipelines.p.min_demand: must be below max_demand (1), got 5`,
		},
	},
	{
		name: "fairness settings",
		src: "types:\n  t:\n    zones: 300\n    max_running: -1\n    keys:\n      acme: {weight: 2000, max_starts: 5}\n" +
			"      \"a\\x01\": {zones: 1}\n      ok: {max_starts: 3, per: 1m}\n    key_default: {max_running: x, max_starts: 2, per: 0.5ms}\n",
		want: []string{
			"f.yaml:3:12: types.t.zones: zones 300 is out of range (0 to 256)",
			"f.yaml:4:18: types.t.max_running: max_running -1 is out of range (0 to 2147483647)",
			"f.yaml:6:7: types.t.keys.acme.per: max_starts 5 needs a period (per) of at least 1ms, not 0s",
			"f.yaml:6:22: types.t.keys.acme.weight: weight 2000 is out of range (0 to 1000)",
			"f.yaml:7:7: types.t.keys.a\x01: fairness key \"a\\x01\" has a control character at byte 1",
			"f.yaml:9:32: types.t.key_default.max_running: expected an integer, got \"x\"",
			"f.yaml:9:55: types.t.key_default.per: max_starts 2 needs a period (per) of at least 1ms, not 500µs",
		},
	},
	{
		name: "tracing",
		src: "tracing:\n  endpoint: http://collector:4318/v1/traces\n  protocol: udp\n  sample_ratio: 1.5\n" +
			"  headers: {\"bad name\": x, ok: y}\n  service_name: \"\"\n",
		want: []string{
			`f.yaml:2:13: tracing.endpoint: "http://collector:4318/v1/traces" is not host:port (such as localhost:4317; no scheme or path)`,
			`f.yaml:3:13: tracing.protocol: unknown value "udp"; one of grpc, http`,
			`f.yaml:4:17: tracing.sample_ratio: 1.5 is not between 0 and 1`,
			`f.yaml:5:13: tracing.headers.bad name: "bad name" is not a header name`,
			`f.yaml:6:17: tracing.service_name: must not be empty`,
		},
	},
	{
		name: "tracing without an endpoint, a ratio not a number",
		src:  "tracing: {sample_ratio: half}\n",
		want: []string{
			`f.yaml:1:1: tracing.endpoint: missing: the collector's host:port, such as localhost:4317`,
			`f.yaml:1:25: tracing.sample_ratio: expected a number, got "half"`,
		},
	},
	{
		name: "two documents",
		src:  "store: {}\n---\nhttp: {}\n",
		want: []string{"f.yaml:2:1: only one YAML document is allowed"},
	},
	{
		name: "unknown keys",
		src:  "stor: {}\ntypes:\n  t:\n    actvity_timeout: 1m\n    retry: {max_attempt: 2}\nwhatever: 1\n",
		want: []string{
			`f.yaml:1:1: stor: unknown key (did you mean "store"?)`,
			`f.yaml:4:5: types.t.actvity_timeout: unknown key (did you mean "activity_timeout"?)`,
			`f.yaml:5:13: types.t.retry.max_attempt: unknown key (did you mean "max_attempts"?)`,
			`f.yaml:6:1: whatever: unknown key`,
		},
	},
	{
		name: "time bounds",
		src:  "http:\n  read_header_timeout: 0s\n  read_timeout: 5s\n  request_timeout: 0s\n  idle_timeout: -1s\n  max_connections: 0\nshutdown:\n  drain_timeout: 2h\n",
		want: []string{
			"f.yaml:2:24: http.read_header_timeout: must be more than 0: a bound of 0 would be none, leaving a client that stalls connected forever",
			"f.yaml:4:20: http.request_timeout: must be more than 0: a bound of 0 would be none, leaving a client that stalls connected forever",
			`f.yaml:5:17: http.idle_timeout: must not be negative, got -1s`,
			"f.yaml:6:20: http.max_connections: must be at least 1, got 0",
			"f.yaml:8:18: shutdown.drain_timeout: 2h0m0s is over the limit of 1h",
		},
	},
	{
		name: "read timeout under the header timeout",
		src:  "http:\n  read_timeout: 5s\nshutdown:\n  drain_timeout: 0s\n",
		want: []string{
			"f.yaml:2:17: http.read_timeout: 5s is shorter than read_header_timeout (10s), which it includes",
			"f.yaml:4:18: shutdown.drain_timeout: must be more than 0: with no time to finish, every running handler would be interrupted at once",
		},
	},
	{
		name: "event bounds",
		src:  "store:\n  event_retention: 0s\n  history_retention: 59s\nhttp:\n  max_event_streams: 0\n",
		want: []string{
			"f.yaml:2:20: store.event_retention: must be more than 0: a followed type's events would be gone as soon as written",
			"f.yaml:3:22: store.history_retention: must be at least 1m, got 59s: the history counts by the minute",
			"f.yaml:5:22: http.max_event_streams: must be at least 1, got 0",
		},
	},
	{
		name: "session length",
		src:  "http:\n  session_ttl: 0s\n",
		want: []string{
			"f.yaml:2:16: http.session_ttl: must be more than 0: a web UI login lasts that long",
		},
	},
	{
		name: "duplicate key",
		src:  "http:\n  listen: 127.0.0.1:1\n  listen: 127.0.0.1:2\n",
		want: []string{"f.yaml:3:3: http.listen: duplicate key (first at line 2)"},
	},
	{
		name: "merge key",
		src:  "base: &b {paused: true}\ntypes:\n  t:\n    <<: *b\n",
		want: []string{
			"f.yaml:1:1: base: unknown key",
			"f.yaml:4:5: types.t.<<: merge keys (<<) are not supported; write the keys out",
		},
	},
	{
		name: "wrong types",
		src:  "store: embedded\nhttp:\n  listen: {host: x}\n  max_body_bytes: lots\ntypes: [a, b]\nlogging:\n  level: [debug]\n",
		want: []string{
			`f.yaml:1:8: store: expected a mapping of keys, got "embedded"`,
			"f.yaml:3:11: http.listen: expected a string, got a mapping",
			`f.yaml:4:19: http.max_body_bytes: expected an integer, got "lots"`,
			"f.yaml:5:8: types: expected a mapping of names, got a list",
			"f.yaml:7:10: logging.level: expected a string, got a list",
		},
	},
	{
		name: "bad booleans and lists",
		src:  "types:\n  t: {paused: yes}\npipelines:\n  p:\n    type: t\n    handler: {exec: {command: cat, env: [A]}}\n",
		want: []string{
			`f.yaml:2:15: types.t.paused: expected true or false, got "yes"`,
			`f.yaml:6:31: pipelines.p.handler.exec.command: expected a list of strings, got "cat"`,
			"f.yaml:6:41: pipelines.p.handler.exec.env: expected a mapping of names to strings, got a list",
		},
	},
	{
		name: "bad durations",
		src:  "types:\n  t:\n    activity_timeout: 30\n    retention: -1h\n    retry: {base: soon}\n",
		want: []string{
			`f.yaml:3:23: types.t.activity_timeout: bad duration "30": use a number and a unit, such as 500ms, 30s, 5m or 1h30m`,
			"f.yaml:4:16: types.t.retention: must not be negative, got -1h",
			`f.yaml:5:19: types.t.retry.base: bad duration "soon": use a number and a unit, such as 500ms, 30s, 5m or 1h30m`,
		},
	},
	{
		name: "bad enums",
		src:  "store: {backend: fbd}\ntypes:\n  t: {retry: {backoff: exponent}}\nlogging: {format: yaml}\n",
		want: []string{
			`f.yaml:1:18: store.backend: unknown value "fbd"; one of embedded, fdb (did you mean "fdb"?)`,
			`f.yaml:3:24: types.t.retry.backoff: unknown value "exponent"; one of exponential, linear, constant (did you mean "exponential"?)`,
			`f.yaml:4:19: logging.format: unknown value "yaml"; one of text, json`,
		},
	},
	{
		name: "type settings checked by fdbq",
		src:  "types:\n  t:\n    activity_timeout: 10ms\n    retry:\n      max_attempts: 0\n",
		want: []string{
			"f.yaml:3:23: types.t.activity_timeout: activity timeout 10ms is below 100ms",
			"f.yaml:5:21: types.t.retry.max_attempts: max_attempts 0 is below 1",
		},
	},
	{
		name: "type name too long",
		src:  "types:\n  " + strings.Repeat("x", 129) + ": {}\n",
		want: []string{"f.yaml:2:3: types." + strings.Repeat("x", 129) + ": type name of 129 bytes is longer than 128"},
	},
	{
		name: "type name characters",
		src:  "types:\n  send email: {}\n  ok.name_1-x: {}\n  \"a/b\": {}\n  café: {}\n  -x: {}\n  \"bad\\x01\": {}\n  \"..\": {}\n",
		want: []string{
			`f.yaml:2:3: types.send email: type name "send email" has ' ' at byte 4; use ASCII letters, digits, '_', '-' and '.'`,
			`f.yaml:4:3: types.a/b: type name "a/b" has '/' at byte 1; use ASCII letters, digits, '_', '-' and '.'`,
			`f.yaml:5:3: types.café: type name "café" has 'é' at byte 3; use ASCII letters, digits, '_', '-' and '.'`,
			`f.yaml:6:3: types.-x: type name "-x" starts with '-'; it must start with a letter or a digit`,
			"f.yaml:7:3: types.bad\x01: type name \"bad\\x01\" has '\\x01' at byte 3; use ASCII letters, digits, '_', '-' and '.'",
			`f.yaml:8:3: types...: type name ".." starts with '.'; it must start with a letter or a digit`,
		},
	},
	{
		name: "pipeline types",
		src:  "types:\n  resize: {}\n  email: {}\npipelines:\n  a: {type: resise, handler: {exec: {command: [cat]}}}\n  b:\n    handler: {exec: {command: [cat]}}\n",
		want: []string{
			`f.yaml:5:13: pipelines.a.type: unknown type "resise"; declared: email, resize (did you mean "resize"?)`,
			"f.yaml:6:3: pipelines.b: missing type: name a type declared under types",
		},
	},
	{
		name: "pipeline with no types declared",
		src:  "pipelines:\n  a: {type: resize, handler: {exec: {command: [cat]}}}\n",
		want: []string{`f.yaml:2:13: pipelines.a.type: unknown type "resize": declare it under types`},
	},
	{
		name: "handlers",
		src: "types: {t: {}}\npipelines:\n" +
			"  none: {type: t, handler: {}}\n" +
			"  both: {type: t, handler: {exec: {command: [cat]}, http: {url: 'http://h/'}}}\n" +
			"  absent: {type: t}\n",
		want: []string{
			"f.yaml:3:19: pipelines.none.handler: missing handler: set exec, http or go",
			"f.yaml:4:19: pipelines.both.handler: set exactly one of exec, http and go",
			"f.yaml:5:3: pipelines.absent.handler: missing handler: set exec, http or go",
		},
	},
	{
		name: "exec handler",
		src: "types: {t: {}}\npipelines:\n" +
			"  a: {type: t, handler: {exec: {}}}\n" +
			"  b: {type: t, handler: {exec: {command: ['', x], max_output: 0, env: {'A=B': x}}}}\n",
		want: []string{
			`f.yaml:3:26: pipelines.a.handler.exec.command: missing command: the program and its arguments, such as ["cat"]`,
			"f.yaml:4:43: pipelines.b.handler.exec.command.0: empty program name",
			"f.yaml:4:63: pipelines.b.handler.exec.max_output: must be at least 1, got 0",
			`f.yaml:4:72: pipelines.b.handler.exec.env.A=B: bad environment variable name "A=B"`,
		},
	},
	{
		name: "exec handler environment",
		src: "types: {t: {}}\npipelines:\n" +
			"  a: {type: t, handler: {exec: {command: [cat], pass_env: [OK_NAME, 1BAD, 'A-B', ADMIN_TOKEN]}}}\n" +
			"  b: {type: t, handler: {exec: {command: [cat], env: {T: 'x${ADMIN_TOKEN}', U: fine}}}}\n" +
			"http:\n  tokens:\n    - {name: admin, role: admin, value_env: ADMIN_TOKEN}\n",
		env: map[string]string{"ADMIN_TOKEN": "s3cret-admin"},
		want: []string{
			`f.yaml:3:69: pipelines.a.handler.exec.pass_env.1: bad environment variable name "1BAD": letters, digits and underscores, not starting with a digit`,
			`f.yaml:3:75: pipelines.a.handler.exec.pass_env.2: bad environment variable name "A-B": letters, digits and underscores, not starting with a digit`,
			`f.yaml:3:82: pipelines.a.handler.exec.pass_env.3: ADMIN_TOKEN holds the secret of token "admin" (http.tokens.0.value_env); it is never passed to a command`,
			`f.yaml:4:55: pipelines.b.handler.exec.env.T: the value holds the secret of token "admin" (http.tokens.0); a secret is never passed to a command`,
		},
	},
	{
		name: "http handler",
		src: "types: {t: {}}\npipelines:\n" +
			"  a: {type: t, handler: {http: {}}}\n" +
			"  b: {type: t, handler: {http: {url: 'ftp://h/x'}}}\n" +
			"  c: {type: t, handler: {http: {url: '/relative'}}}\n" +
			"  d: {type: t, handler: {http: {url: 'http://h/', headers: {'Bad Name': x}, timeout: 1}}}\n",
		want: []string{
			"f.yaml:3:26: pipelines.a.handler.http.url: missing url",
			`f.yaml:4:38: pipelines.b.handler.http.url: bad URL "ftp://h/x": the scheme must be http or https`,
			`f.yaml:5:38: pipelines.c.handler.http.url: bad URL "/relative": the scheme must be http or https`,
			`f.yaml:6:61: pipelines.d.handler.http.headers.Bad Name: bad header name "Bad Name"`,
			`f.yaml:6:86: pipelines.d.handler.http.timeout: bad duration "1": use a number and a unit, such as 500ms, 30s, 5m or 1h30m`,
		},
	},
	{
		name: "demand",
		src: "types: {t: {}}\npipelines:\n" +
			"  a:\n    type: t\n    concurrency: 0\n    handler: {exec: {command: [cat]}}\n" +
			"  b:\n    type: t\n    max_demand: 4\n    min_demand: 4\n    handler: {exec: {command: [cat]}}\n" +
			"  c:\n    type: t\n    concurrency: 2\n    min_demand: 9\n    handler: {exec: {command: [cat]}}\n" +
			"  d:\n    type: t\n    express: -1\n    handler: {exec: {command: [cat]}}\n" +
			"  e:\n    type: t\n    batch_limit: 0\n    acceptors: 0\n    handler: {exec: {command: [cat]}}\n" +
			"  f:\n    type: t\n    batch_limit: 1025\n    acceptors: 65\n    handler: {exec: {command: [cat]}}\n",
		want: []string{
			"f.yaml:5:18: pipelines.a.concurrency: must be at least 1, got 0",
			"f.yaml:10:17: pipelines.b.min_demand: must be below max_demand (4), got 4",
			"f.yaml:15:17: pipelines.c.min_demand: must be below max_demand (4, 2 × concurrency), got 9",
			"f.yaml:19:14: pipelines.d.express: must be at least 0, got -1",
			"f.yaml:23:18: pipelines.e.batch_limit: must be at least 1, got 0",
			"f.yaml:24:16: pipelines.e.acceptors: must be at least 1, got 0",
			"f.yaml:28:18: pipelines.f.batch_limit: must be at most 1024, got 1025",
			"f.yaml:29:16: pipelines.f.acceptors: must be at most 64, got 65",
		},
	},
	{
		name: "listen",
		src:  "http: {listen: 'localhost'}\n",
		want: []string{`f.yaml:1:16: http.listen: bad address "localhost": use host:port, such as 127.0.0.1:8080`},
	},
	{
		name: "no tokens off loopback",
		src:  "http:\n  listen: :8080\n",
		want: []string{"f.yaml:2:11: http.listen: listening on :8080 without tokens is refused: add http.tokens, or listen on a loopback address such as 127.0.0.1:8080"},
	},
	{
		name: "tokens",
		src: "http:\n  tokens:\n" +
			"    - {name: a, role: admin, value: hunter2}\n" +
			"    - {name: a, role: boss, value_env: UNSET_TOKEN}\n" +
			"    - {role: worker, value_env: EMPTY_TOKEN, value_file: /x}\n" +
			"    - {name: d, value_env: EMPTY_TOKEN}\n" +
			"    - {name: e, role: worker, value_env: A_TOKEN}\n" +
			"    - {name: f, role: worker, value_env: A_TOKEN}\n",
		env: map[string]string{"EMPTY_TOKEN": "", "A_TOKEN": "same"},
		want: []string{
			"f.yaml:3:7: http.tokens.0: missing secret: set value_env (an environment variable) or value_file (a file)",
			"f.yaml:3:30: http.tokens.0.value: inline secrets are not allowed; put the token in an environment variable (value_env) or a file (value_file)",
			`f.yaml:4:14: http.tokens.1.name: duplicate token name "a" (also http.tokens.0)`,
			`f.yaml:4:23: http.tokens.1.role: unknown value "boss"; one of admin, producer, worker, metrics`,
			"f.yaml:4:40: http.tokens.1.value_env: environment variable UNSET_TOKEN is not set",
			"f.yaml:5:7: http.tokens.2: missing name",
			"f.yaml:5:7: http.tokens.2: set one of value_env and value_file, not both",
			"f.yaml:6:7: http.tokens.3: missing role: one of admin, producer, worker, metrics",
			"f.yaml:6:28: http.tokens.3.value_env: environment variable EMPTY_TOKEN is empty",
			"f.yaml:8:7: http.tokens.5: same secret as http.tokens.4; each token needs its own",
		},
	},
	{
		name: "tls",
		src:  "http:\n  tls: {cert_file: /nonexistent/cert.pem}\n",
		want: []string{
			"f.yaml:2:3: http.tls: missing key_file (cert_file is set)",
			"f.yaml:2:20: http.tls.cert_file: cannot read: open /nonexistent/cert.pem: no such file or directory",
		},
	},
	{
		name: "store",
		src:  "store:\n  path: ''\n  cluster_file: /etc/foundationdb/fdb.cluster\n  prefix: ''\n",
		want: []string{
			"f.yaml:2:9: store.path: empty; the embedded store needs a directory",
			"f.yaml:3:17: store.cluster_file: applies only to backend fdb (backend is embedded)",
			"f.yaml:4:11: store.prefix: must not be empty",
		},
	},
	{
		name: "fdb store with a path",
		src:  "store:\n  backend: fdb\n  path: ./data\n",
		want: []string{"f.yaml:3:9: store.path: applies only to backend embedded (backend is fdb)"},
	},
	{
		name: "metrics path",
		src:  "metrics: {path: metrics}\n",
		want: []string{`f.yaml:1:17: metrics.path: "metrics" must start with /`},
	},
	{
		name: "metrics path taken",
		src:  "metrics: {path: /v1/metrics}\n",
		want: []string{`f.yaml:1:17: metrics.path: "/v1/metrics" is taken by the HTTP API`},
	},
	{
		name: "variables",
		src:  "store: {path: '${DATA_DIR}/x'}\nhttp: {listen: '${PORT'}\nlogging: {level: '${1X}'}\n",
		want: []string{
			"f.yaml:1:15: store.path: environment variable DATA_DIR is not set (write ${DATA_DIR:-default} to give a default)",
			"f.yaml:2:16: http.listen: unterminated ${ in value (write $${ for a literal ${)",
			`f.yaml:3:18: logging.level: bad variable reference "${1X}" (use ${NAME} or ${NAME:-default})`,
		},
	},
	{
		name: "variable expanding to a bad value",
		src:  "types:\n  t: {activity_timeout: '${TIMEOUT}'}\n",
		env:  map[string]string{"TIMEOUT": "forever"},
		want: []string{`f.yaml:2:25: types.t.activity_timeout: bad duration "forever": use a number and a unit, such as 500ms, 30s, 5m or 1h30m`},
	},
	{
		name: "bad overrides",
		src:  "types:\n  t: {}\n  a-b: {}\n  a_b: {}\nhttp:\n  listen: 127.0.0.1:1\n",
		env: map[string]string{
			"JOBSTAGE_TYPES__T__ACTIVITY_TIMEOUT": "5",
			"JOBSTAGE_HTTP__LISTEN":               "127.0.0.1:99999",
			"JOBSTAGE_LOGGING__LEVEL":             "verbose",
			"JOBSTAGE_TYPES__A_B__PAUSED":         "true",
		},
		want: []string{
			`f.yaml:2:3: types.t.activity_timeout: bad duration "5": use a number and a unit, such as 500ms, 30s, 5m or 1h30m (set by JOBSTAGE_TYPES__T__ACTIVITY_TIMEOUT)`,
			"f.yaml:4:3: types.a_b.paused: JOBSTAGE_TYPES__A_B__PAUSED names both types.a-b.paused and types.a_b.paused; rename one of them",
			`f.yaml:6:11: http.listen: bad address "127.0.0.1:99999": use host:port, such as 127.0.0.1:8080 (set by JOBSTAGE_HTTP__LISTEN)`,
			`f.yaml: logging.level: unknown value "verbose"; one of debug, info, warn, error (set by JOBSTAGE_LOGGING__LEVEL)`,
		},
	},
	{
		name: "bad list override",
		src:  "types: {t: {}}\npipelines:\n  p: {type: t, handler: {exec: {command: [cat]}}}\n",
		env:  map[string]string{"JOBSTAGE_PIPELINES__P__HANDLER__EXEC__COMMAND": "cat -n"},
		want: []string{`f.yaml:3:33: pipelines.p.handler.exec.command: JOBSTAGE_PIPELINES__P__HANDLER__EXEC__COMMAND: expected a YAML list of strings such as ["cat", "-n"], got "cat -n" (set by JOBSTAGE_PIPELINES__P__HANDLER__EXEC__COMMAND)`},
	},
}

func TestLint(t *testing.T) {
	for _, tc := range lintCases {
		t.Run(tc.name, func(t *testing.T) {
			c, probs := config.Parse("f.yaml", []byte(tc.src), env(tc.env))
			var got []string
			for _, p := range probs {
				got = append(got, p.String())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if c != nil {
				t.Errorf("Parse returned a config along with problems")
			}
		})
	}
}

// TestLintFile: Lint reads the file and names it in each problem.
func TestLintFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobstage.yaml")
	if err := os.WriteFile(path, []byte("types:\n  t: {}\npipelines:\n  p: {type: tt}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	probs := config.Lint(path)
	want := []config.Problem{
		{File: path, Line: 4, Column: 3, Key: "pipelines.p.handler", Message: "missing handler: set exec, http or go"},
		{File: path, Line: 4, Column: 13, Key: "pipelines.p.type", Message: `unknown type "tt"; declared: t (did you mean "t"?)`},
	}
	if len(probs) != len(want) {
		t.Fatalf("problems = %v, want %v", probs, want)
	}
	for i := range want {
		if probs[i] != want[i] {
			t.Errorf("problem %d = %+v, want %+v", i, probs[i], want[i])
		}
	}
}

// TestAliasBomb: aliases do not make a small file expand: the decoder
// never walks into unknown keys or into a list element that should have
// been a string.
func TestAliasBomb(t *testing.T) {
	_, probs := config.Parse("f.yaml", []byte(aliasBomb), nil)
	if len(probs) != 20 {
		t.Fatalf("%d problems, want 9 unknown keys, 10 bad command elements and the missing type: %v", len(probs), probs)
	}
	if got, want := probs[9].String(), "f.yaml:8:4: pipelines.p.handler.exec.command.1: expected a string, got a list"; got != want {
		t.Errorf("problem 9 = %s, want %s", got, want)
	}
}

// An explicit min_demand of 0 would be read by the consumer as "the
// default", so the config refuses it rather than run something else.
func TestMinDemandZeroRefused(t *testing.T) {
	yaml := "types: {t: {}}\npipelines:\n  p:\n    type: t\n    max_demand: 8\n    min_demand: 0\n    handler: {exec: {command: [cat]}}\n"
	_, problems := config.Parse("f.yaml", []byte(yaml), nil)
	if len(problems) != 1 || !strings.Contains(problems[0].String(), "f.yaml:6:17: pipelines.p.min_demand:") {
		t.Fatalf("problems: %v", problems)
	}
}

// TestLintRefusesWhatServeRefuses: lint builds each built-in handler and
// loads the TLS pair as serve does, so a config that lints clean starts.
func TestLintRefusesWhatServeRefuses(t *testing.T) {
	dir := t.TempDir()
	notKey := filepath.Join(dir, "cert.pem")
	if err := os.WriteFile(notKey, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ src, want string }{
		{"types: {t: {}}\npipelines:\n  p:\n    type: t\n    handler: {exec: {command: [cat], max_output: 1000000}}\n",
			"f.yaml:5:50: pipelines.p.handler.exec.max_output: must be at most 90000, the limit a job's data, result and error share, got 1000000"},
		{"http:\n  tls: {cert_file: " + notKey + ", key_file: " + notKey + "}\n",
			"f.yaml:2:3: http.tls: not a usable certificate and key: "},
	}
	for _, c := range cases {
		_, problems := config.Parse("f.yaml", []byte(c.src), nil)
		if len(problems) != 1 || !strings.HasPrefix(problems[0].String(), c.want) {
			t.Errorf("%q:\n got %v\nwant one problem starting %q", c.src, problems, c.want)
		}
	}
}
