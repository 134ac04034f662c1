package config

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/handlers"
	"github.com/jobstage/jobstage/httpapi"
)

// validate checks what the schema's per-key rules cannot: rules between
// keys, references, secrets and files. It fills in the defaults computed
// from other keys. Values already reported bad are not checked again.
func (d *decoder) validate(c *Config) {
	d.validating = true
	d.validateStore(&c.Store)
	for _, name := range slices.Sorted(maps.Keys(c.Types)) {
		d.validateType(name, c.Types[name])
	}
	for _, name := range slices.Sorted(maps.Keys(c.Pipelines)) {
		p := c.Pipelines[name]
		d.validatePipeline(c, name, &p)
		c.Pipelines[name] = p
	}
	for _, name := range slices.Sorted(maps.Keys(c.Schedules)) {
		d.validateSchedule(c, name, c.Schedules[name])
	}
	d.validateHTTP(&c.HTTP)
	d.validateExecSecrets(c)
	d.validateMetrics(&c.Metrics)
	d.validateShutdown(&c.Shutdown)
	if c.Tracing != nil {
		d.validateTracing(c.Tracing)
	}
}

func (d *decoder) validateTracing(t *Tracing) {
	if t.Endpoint == "" {
		d.at("missing: the collector's host:port, such as localhost:4317", "tracing", "endpoint")
	} else if host, port, err := net.SplitHostPort(t.Endpoint); err != nil || host == "" || !validPort(port) {
		d.at(fmt.Sprintf("%q is not host:port (such as localhost:4317; no scheme or path)", t.Endpoint), "tracing", "endpoint")
	}
	if t.SampleRatio < 0 || t.SampleRatio > 1 {
		d.at(fmt.Sprintf("%v is not between 0 and 1", t.SampleRatio), "tracing", "sample_ratio")
	}
	for _, k := range slices.Sorted(maps.Keys(t.Headers)) {
		if !validHeaderName(k) {
			d.at(fmt.Sprintf("%q is not a header name", k), "tracing", "headers", k)
		} else if strings.ContainsAny(t.Headers[k], "\r\n\x00") {
			d.at("the value holds a line break or a NUL byte", "tracing", "headers", k)
		}
	}
	if t.ServiceName == "" {
		d.at("must not be empty", "tracing", "service_name")
	}
}

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n > 0 && n < 1<<16
}

// validateExecSecrets refuses an exec handler that would pass a token's
// secret to its command: naming its value_env in pass_env, or setting it
// in env.
func (d *decoder) validateExecSecrets(c *Config) {
	for _, name := range slices.Sorted(maps.Keys(c.Pipelines)) {
		e := c.Pipelines[name].Handler.Exec
		if e == nil {
			continue
		}
		path := []string{"pipelines", name, "handler", "exec"}
		for i, t := range c.HTTP.Tokens {
			for j, k := range e.PassEnv {
				if t.ValueEnv != "" && k == t.ValueEnv {
					d.at(fmt.Sprintf("%s holds the secret of token %q (http.tokens.%d.value_env); it is never passed to a command", k, t.Name, i), append(path, "pass_env", strconv.Itoa(j))...)
				}
			}
			for _, k := range slices.Sorted(maps.Keys(e.Env)) {
				if t.Value != "" && strings.Contains(e.Env[k], t.Value) {
					d.at(fmt.Sprintf("the value holds the secret of token %q (http.tokens.%d); a secret is never passed to a command", t.Name, i), append(path, "env", k)...)
				}
			}
		}
	}
}

// fine reports whether the value at path came through decoding without a
// problem.
func (d *decoder) fine(path ...string) bool { return !d.bad[key(path)] }

// at reports msg about path, unless decoding already reported its value
// (a bad value is left zero, which would be reported again as missing).
func (d *decoder) at(msg string, path ...string) {
	if d.fine(path...) {
		d.problem(path, nil, msg)
	}
}

func (d *decoder) validateStore(s *Store) {
	switch s.Backend {
	case BackendEmbedded:
		if s.Path == "" {
			d.at("empty; the embedded store needs a directory", "store", "path")
		}
		if s.ClusterFile != "" {
			d.at("applies only to backend fdb (backend is embedded)", "store", "cluster_file")
		}
	case BackendFDB:
		if d.set["store.path"] {
			d.at("applies only to backend embedded (backend is fdb)", "store", "path")
		}
	}
	if s.Prefix == "" {
		d.at("must not be empty", "store", "prefix")
	}
	if s.EventRetention <= 0 {
		d.at("must be more than 0: a followed type's events would be gone as soon as written", "store", "event_retention")
	}
	if s.HistoryRetention < time.Minute {
		d.at(fmt.Sprintf("must be at least 1m, got %s: the history counts by the minute", s.HistoryRetention), "store", "history_retention")
	}
}

// validateType checks the name and each setting with fdbq's own rules
// (ValidateTypeName, TypeSettings.Validate), one setting at a time against
// the defaults, so that each problem is reported at its key.
func (d *decoder) validateType(name string, t Type) {
	// A bad name hides none of the settings' problems.
	ok := true
	if err := fdbq.ValidateTypeName(name); err != nil {
		d.at(fdbqMessage(err), "types", name)
		ok = false
	}
	check := func(s fdbq.TypeSettings, path ...string) {
		if !d.fine(append([]string{"types", name}, path...)...) {
			ok = false
			return
		}
		if err := s.Validate(); err != nil {
			ok = false
			d.at(fdbqMessage(err), append([]string{"types", name}, path...)...)
		}
	}
	def := fdbq.DefaultTypeSettings()
	s := def
	s.ActivityTimeout = t.ActivityTimeout
	check(s, "activity_timeout")
	s = def
	s.Retention = t.Retention
	check(s, "retention")
	s = def
	s.Retry.MaxAttempts = t.Retry.MaxAttempts
	check(s, "retry", "max_attempts")
	s = def
	s.Retry.Base = t.Retry.Base
	check(s, "retry", "base")
	s = def
	s.Retry.Max = t.Retry.Max
	check(s, "retry", "max")
	s = def
	s.Retry.Backoff = fdbq.Backoff(t.Retry.Backoff)
	check(s, "retry", "backoff")
	s = def
	s.Zones = t.Zones
	check(s, "zones")
	s = def
	s.MaxRunning = t.MaxRunning
	check(s, "max_running")
	checkPolicy := func(p KeyPolicy, path ...string) {
		set := func(f func(*fdbq.KeyPolicy)) fdbq.TypeSettings {
			s := def
			f(&s.KeyDefault)
			return s
		}
		sub := func(k string) []string { return append(slices.Clone(path), k) }
		check(set(func(q *fdbq.KeyPolicy) { q.Weight = p.Weight }), sub("weight")...)
		check(set(func(q *fdbq.KeyPolicy) { q.MaxRunning = p.MaxRunning }), sub("max_running")...)
		check(set(func(q *fdbq.KeyPolicy) { q.Zones = p.Zones }), sub("zones")...)
		// max_starts alone, then with its window, reported at per.
		check(set(func(q *fdbq.KeyPolicy) { q.MaxStarts, q.Per = p.MaxStarts, time.Second }), sub("max_starts")...)
		if d.fine(append([]string{"types", name}, sub("max_starts")...)...) && (fdbq.KeyPolicy{MaxStarts: p.MaxStarts, Per: time.Second}).Validate() == nil {
			check(set(func(q *fdbq.KeyPolicy) { q.MaxStarts, q.Per = p.MaxStarts, p.Per }), sub("per")...)
		}
	}
	checkPolicy(t.KeyDefault, "key_default")
	if len(t.Keys) > fdbq.MaxKeyPolicies {
		ok = false
		d.at(fmt.Sprintf("%d key policies, more than %d", len(t.Keys), fdbq.MaxKeyPolicies), "types", name, "keys")
	}
	for _, k := range slices.Sorted(maps.Keys(t.Keys)) {
		if err := fdbq.ValidateKey(k); err != nil {
			ok = false
			d.at(fdbqMessage(err), "types", name, "keys", k)
		}
		checkPolicy(t.Keys[k], "keys", k)
	}
	if ok {
		if err := t.Settings().Validate(); err != nil {
			d.at(fdbqMessage(err), "types", name)
		}
	}
}

// handlerMessage is what a handler's options error says, without the
// package's prefix: "exec: dir ... is not a directory".
func handlerMessage(err error) string {
	var oe *handlers.OptionsError
	if errors.As(err, &oe) {
		return oe.Handler + ": " + oe.Reason
	}
	return err.Error()
}

// fdbqMessage is what an fdbq validation error says is wrong (its
// Detail), without fdbq's prefix, which names fdbq's types rather than
// the file's keys.
func fdbqMessage(err error) string {
	var fe *fdbq.Error
	if errors.As(err, &fe) && fe.Detail != "" {
		return fe.Detail
	}
	return err.Error()
}

// validateSchedule checks a schedule with fdbq's rules, each problem at
// its key.
func (d *decoder) validateSchedule(c *Config, name string, s Schedule) {
	at := func(msg string, key ...string) { d.at(msg, append([]string{"schedules", name}, key...)...) }
	if err := fdbq.ValidateScheduleName(name); err != nil {
		at(fdbqMessage(err))
	}
	switch {
	case s.Type == "":
		at("missing; the job type each tick adds", "type")
	case d.fine("schedules", name, "type"):
		if _, ok := c.Types[s.Type]; !ok {
			at(fmt.Sprintf("type %q is not declared under types%s", s.Type, suggest(s.Type, slices.Sorted(maps.Keys(c.Types)))), "type")
		}
	}
	switch {
	case s.Cron == "" && s.Every == 0:
		at("a schedule needs cron or every")
		return
	case s.Cron != "" && s.Every != 0:
		at("give cron or every, not both", "every")
		return
	}
	if s.Data != "" && !json.Valid([]byte(s.Data)) {
		at("not valid JSON text", "data")
	}
	def, err := s.Schedule("x")
	if err != nil {
		return // missed: its enum was checked
	}
	// Each key on its own, against a schedule that is fine otherwise, so
	// a problem is reported where it is.
	base := fdbq.Schedule{Name: "x", Every: time.Minute, Job: fdbq.NewJob{Type: "x"}}
	check := func(f fdbq.Schedule, key string) bool {
		if !d.fine("schedules", name, key) {
			return false
		}
		if err := fdbq.ValidateSchedule(f); err != nil {
			msg := fdbqMessage(err)
			msg = strings.TrimPrefix(msg, "schedule x: ")
			at(msg, key)
			return false
		}
		return true
	}
	f := base
	if def.Cron != "" {
		f.Every, f.Cron, f.Timezone = 0, def.Cron, ""
		if check(f, "cron") && def.Timezone != "" {
			f.Timezone = def.Timezone
			check(f, "timezone")
		}
	} else {
		if def.Timezone != "" {
			at("applies to cron, not to every", "timezone")
		}
		f.Every = def.Every
		check(f, "every")
	}
	if def.Job.Key != "" {
		f = base
		f.Job.Key = def.Job.Key
		check(f, "key")
	}
	f = base
	f.Job.MaxAttempts = def.Job.MaxAttempts
	check(f, "max_attempts")
	f = base
	f.Job.Priority = def.Job.Priority
	check(f, "priority")
	f = base
	f.MissedLimit = def.MissedLimit
	check(f, "missed_limit")
	f = base
	f.Grace = def.Grace
	check(f, "grace")
	if s.Data != "" && json.Valid([]byte(s.Data)) {
		f = base
		f.Job.Data = json.RawMessage(s.Data)
		check(f, "data")
	}
}

func (d *decoder) validatePipeline(c *Config, name string, p *Pipeline) {
	at := func(msg string, path ...string) { d.at(msg, append([]string{"pipelines", name}, path...)...) }
	if name == "" {
		at("a pipeline name must not be empty")
	}
	switch _, ok := c.Types[p.Type]; {
	case p.Type == "" && d.fine("pipelines", name, "type"):
		at("missing type: name a type declared under types")
	case p.Type == "" || ok:
	case len(c.Types) == 0:
		at(fmt.Sprintf("unknown type %q: declare it under types", p.Type), "type")
	default:
		at(fmt.Sprintf("unknown type %q; declared: %s%s", p.Type,
			strings.Join(slices.Sorted(maps.Keys(c.Types)), ", "), suggest(p.Type, slices.Collect(maps.Keys(c.Types)))), "type")
	}

	prefix := "pipelines." + name + "."
	maxSet, minSet := d.set[prefix+"max_demand"], d.set[prefix+"min_demand"]
	if !maxSet {
		p.MaxDemand = 2 * p.Concurrency
	}
	if !minSet {
		p.MinDemand = p.MaxDemand / 2
	}
	// A bad concurrency hides only the problem of the demand it defaults.
	if p.MinDemand >= p.MaxDemand && (maxSet || d.fine("pipelines", name, "concurrency")) &&
		d.fine("pipelines", name, "min_demand") && d.fine("pipelines", name, "max_demand") {
		how := ""
		if !maxSet {
			how = ", 2 × concurrency"
		}
		at(fmt.Sprintf("must be below max_demand (%d%s), got %d", p.MaxDemand, how, p.MinDemand), "min_demand")
	}

	h := p.Handler
	set := 0
	for _, b := range []bool{h.Exec != nil, h.HTTP != nil, h.Go != ""} {
		if b {
			set++
		}
	}
	switch {
	case set == 0:
		at("missing handler: set exec, http or go", "handler")
	case set > 1:
		at("set exactly one of exec, http and go", "handler")
	case h.Go != "":
	case h.Exec != nil:
		d.validateExec(name, h.Exec)
	default:
		d.validateHTTPHandler(name, h.HTTP)
	}
}

// validateExec reports every problem of an exec handler that serve or
// its first job would hit, each at its key: one does not hide another.
func (d *decoder) validateExec(name string, e *ExecHandler) {
	path := []string{"pipelines", name, "handler", "exec"}
	at := func(msg string, sub ...string) { d.at(msg, append(slices.Clone(path), sub...)...) }
	before := len(d.probs)
	dirOK := d.fine(append(slices.Clone(path), "dir")...)
	if e.Dir != "" && dirOK {
		if fi, err := os.Stat(e.Dir); err != nil {
			dirOK = false
			at(fmt.Sprintf("cannot use the working directory: %v", err), "dir")
		} else if !fi.IsDir() {
			dirOK = false
			at(fmt.Sprintf("%s is not a directory", e.Dir), "dir")
		}
	}
	switch {
	case len(e.Command) == 0 && d.fine(append(slices.Clone(path), "command")...):
		at(`missing command: the program and its arguments, such as ["cat"]`, "command")
	case len(e.Command) == 0:
	case e.Command[0] == "":
		at("empty program name", "command", "0")
	default:
		if err := checkProgram(e.Command[0], e.Dir, dirOK); err != nil {
			at(err.Error(), "command", "0")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(e.Env)) {
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00"):
			at(fmt.Sprintf("bad environment variable name %q", k), "env", k)
		case strings.ContainsRune(e.Env[k], 0):
			at("the value contains a NUL byte, which no environment can hold", "env", k)
		}
	}
	if e.MaxOutput > fdbq.MaxDataSize {
		at(fmt.Sprintf("must be at most %d, the limit a job's data, result and error share, got %d", fdbq.MaxDataSize, e.MaxOutput), "max_output")
	}
	for i, k := range e.PassEnv {
		if !handlers.ValidEnvName(k) {
			d.at(fmt.Sprintf("bad environment variable name %q: letters, digits and underscores, not starting with a digit", k), append(slices.Clone(path), "pass_env", strconv.Itoa(i))...)
		}
	}
	clean := len(d.probs) == before && len(e.Command) > 0
	for _, k := range []string{"command", "dir", "env", "pass_env", "max_output"} {
		clean = clean && d.fine(append(slices.Clone(path), k)...)
	}
	if clean {
		// Whatever else serve would refuse when it builds the handler.
		if _, err := handlers.Exec(handlers.ExecOptions{Command: e.Command, Dir: e.Dir, Env: e.Env, PassEnv: e.PassEnv, MaxOutput: e.MaxOutput}); err != nil {
			d.at(handlerMessage(err), path...)
		}
	}
}

// checkProgram reports why an exec handler could not start prog in dir,
// as its first job would find out: a bare name is looked up in $PATH (as
// serve does at start), a path is taken as is, relative to dir when dir is
// set (dirOK: dir is usable; else a relative path is not checked).
func checkProgram(prog, dir string, dirOK bool) error {
	file, where := prog, ""
	if strings.Contains(prog, "/") && !filepath.IsAbs(prog) && dir != "" {
		if !dirOK {
			return nil
		}
		file, where = filepath.Join(dir, prog), " (in dir "+dir+")"
	}
	_, err := exec.LookPath(file)
	if err == nil {
		return nil
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		err = ee.Err
	}
	if errors.Is(err, exec.ErrNotFound) && !strings.Contains(prog, "/") {
		return fmt.Errorf("cannot run %q: not found in $PATH", prog)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err = errors.New("no such file")
	case errors.Is(err, fs.ErrPermission):
		err = errors.New("not executable (permission denied)")
	case errors.Is(err, syscall.EISDIR):
		err = errors.New("a directory")
	}
	return fmt.Errorf("cannot run %q%s: %v", prog, where, err)
}

func (d *decoder) validateHTTPHandler(name string, h *HTTPHandler) {
	path := []string{"pipelines", name, "handler", "http"}
	before := len(d.probs)
	defer func() {
		clean := len(d.probs) == before
		for _, k := range []string{"url", "headers", "timeout"} {
			clean = clean && d.fine(append(path, k)...)
		}
		if !clean {
			return
		}
		// What serve would refuse when it builds the handler.
		if _, err := handlers.HTTP(handlers.HTTPOptions{URL: h.URL, Headers: h.Headers, Timeout: h.Timeout}); err != nil {
			d.at(handlerMessage(err), path...)
		}
	}()
	u, err := url.Parse(h.URL)
	switch {
	case h.URL == "":
		d.at("missing url", append(path, "url")...)
	case err != nil:
		d.at(fmt.Sprintf("bad URL %q: %v", h.URL, errors.Unwrap(err)), append(path, "url")...)
	case u.Scheme != "http" && u.Scheme != "https":
		d.at(fmt.Sprintf("bad URL %q: the scheme must be http or https", h.URL), append(path, "url")...)
	case u.Host == "":
		d.at(fmt.Sprintf("bad URL %q: no host", h.URL), append(path, "url")...)
	}
	for _, k := range slices.Sorted(maps.Keys(h.Headers)) {
		if !validHeaderName(k) {
			d.at(fmt.Sprintf("bad header name %q", k), append(path, "headers", k)...)
		} else if strings.ContainsAny(h.Headers[k], "\r\n\x00") {
			d.at("a header value must not contain line breaks", append(path, "headers", k)...)
		}
	}
}

// validHeaderName reports whether s is an HTTP token (RFC 9110).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)
		if !ok {
			return false
		}
	}
	return true
}

// validateHTTP checks the HTTP API: a host:port to listen on, which
// needs tokens unless it is a loopback address, the tokens themselves, the
// time bounds and TLS.
func (d *decoder) validateHTTP(h *HTTP) {
	loopback := false
	host, port, err := net.SplitHostPort(h.Listen)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		if d.fine("http", "listen") {
			d.at(fmt.Sprintf("bad address %q: use host:port, such as 127.0.0.1:8080", h.Listen), "http", "listen")
		}
	} else {
		ip := net.ParseIP(host)
		loopback = host == "localhost" || ip != nil && ip.IsLoopback()
	}

	d.validateTokens(h)
	if err == nil && !loopback && len(h.Tokens) == 0 {
		d.at(fmt.Sprintf("listening on %s without tokens is refused: add http.tokens, or listen on a loopback address such as 127.0.0.1:8080", h.Listen), "http", "listen")
	}

	d.validateTimeouts(h)
	d.validateTLS(h)
}

// validateTokens checks each API token: a name no other token has, a role,
// and a secret from exactly one of value_env and value_file, not empty and
// not another token's. It reads each secret into Value.
func (d *decoder) validateTokens(h *HTTP) {
	names := map[string]int{}
	secrets := map[string]int{}
	for i := range h.Tokens {
		t := &h.Tokens[i]
		at := func(msg string, path ...string) {
			d.at(msg, append([]string{"http", "tokens", strconv.Itoa(i)}, path...)...)
		}
		if t.Name == "" {
			at("missing name")
		} else if j, dup := names[t.Name]; dup {
			at(fmt.Sprintf("duplicate token name %q (also http.tokens.%d)", t.Name, j), "name")
		} else {
			names[t.Name] = i
		}
		if t.Role == "" && d.fine("http", "tokens", strconv.Itoa(i), "role") {
			at("missing role: one of admin, producer, worker, metrics")
		}
		switch {
		case t.ValueEnv != "" && t.ValueFile != "":
			at("set one of value_env and value_file, not both")
		case t.ValueEnv != "":
			v, ok := d.env(t.ValueEnv)
			switch {
			case !ok:
				at(fmt.Sprintf("environment variable %s is not set", t.ValueEnv), "value_env")
			case v == "":
				at(fmt.Sprintf("environment variable %s is empty", t.ValueEnv), "value_env")
			default:
				if why := httpapi.CheckSecret(v); why != "" {
					at(fmt.Sprintf("token %q: the secret in environment variable %s %s", t.Name, t.ValueEnv, why), "value_env")
				}
			}
			t.Value = v
		case t.ValueFile != "":
			b, err := os.ReadFile(t.ValueFile)
			t.Value = strings.TrimSpace(string(b))
			switch {
			case err != nil:
				at(fmt.Sprintf("cannot read the secret: %v", err), "value_file")
			case t.Value == "":
				at(fmt.Sprintf("file %s is empty", t.ValueFile), "value_file")
			default:
				if why := httpapi.CheckSecret(t.Value); why != "" {
					at(fmt.Sprintf("token %q: the secret in file %s %s", t.Name, t.ValueFile, why), "value_file")
				}
			}
		default:
			at("missing secret: set value_env (an environment variable) or value_file (a file)")
		}
		if t.Value != "" {
			if j, dup := secrets[t.Value]; dup {
				at(fmt.Sprintf("same secret as http.tokens.%d; each token needs its own", j))
			} else {
				secrets[t.Value] = i
			}
		}
	}
}

// validateTLS checks that cert_file and key_file are set together, that
// each can be read, and, when both can, that they make a usable
// certificate and key.
func (d *decoder) validateTLS(h *HTTP) {
	switch tls := h.TLS; {
	case tls.CertFile != "" && tls.KeyFile == "":
		d.at("missing key_file (cert_file is set)", "http", "tls")
	case tls.CertFile == "" && tls.KeyFile != "":
		d.at("missing cert_file (key_file is set)", "http", "tls")
	}
	readable := 0
	for _, f := range []struct{ key, path string }{{"cert_file", h.TLS.CertFile}, {"key_file", h.TLS.KeyFile}} {
		if f.path == "" {
			continue
		}
		if fh, err := os.Open(f.path); err != nil {
			d.at(fmt.Sprintf("cannot read: %v", err), "http", "tls", f.key)
		} else {
			fh.Close()
			readable++
		}
	}
	if readable == 2 {
		if _, err := tls.LoadX509KeyPair(h.TLS.CertFile, h.TLS.KeyFile); err != nil {
			d.at(fmt.Sprintf("not a usable certificate and key: %v", err), "http", "tls")
		}
	}
}

// validateTimeouts checks the HTTP API's time bounds: each is more than
// 0 (a zero would mean none), and the read timeout, which includes the
// headers, is not shorter than the header timeout.
func (d *decoder) validateTimeouts(h *HTTP) {
	for _, f := range []struct {
		key string
		d   time.Duration
	}{{"read_header_timeout", h.ReadHeaderTimeout}, {"read_timeout", h.ReadTimeout}, {"request_timeout", h.RequestTimeout}, {"idle_timeout", h.IdleTimeout}} {
		if f.d == 0 {
			d.at("must be more than 0: a bound of 0 would be none, leaving a client that stalls connected forever", "http", f.key)
		}
	}
	if h.SessionTTL <= 0 {
		d.at("must be more than 0: a web UI login lasts that long", "http", "session_ttl")
	}
	if h.ReadHeaderTimeout > 0 && h.ReadTimeout > 0 && h.ReadTimeout < h.ReadHeaderTimeout && d.fine("http", "read_header_timeout") {
		d.at(fmt.Sprintf("%s is shorter than read_header_timeout (%s), which it includes", h.ReadTimeout, h.ReadHeaderTimeout), "http", "read_timeout")
	}
}

// maxDrainTimeout bounds shutdown.drain_timeout: a stop that waits longer
// for handlers is taken for a hang by whatever sent the signal.
const maxDrainTimeout = time.Hour

func (d *decoder) validateShutdown(s *Shutdown) {
	switch {
	case s.DrainTimeout == 0:
		d.at("must be more than 0: with no time to finish, every running handler would be interrupted at once", "shutdown", "drain_timeout")
	case s.DrainTimeout > maxDrainTimeout:
		d.at(fmt.Sprintf("%s is over the limit of 1h", s.DrainTimeout), "shutdown", "drain_timeout")
	}
}

func (d *decoder) validateMetrics(m *Metrics) {
	p := m.Path
	switch {
	case p == "":
	case !strings.HasPrefix(p, "/"):
		d.at(fmt.Sprintf("%q must start with /", p), "metrics", "path")
	case p == "/" || p == "/healthz" || p == "/readyz" || p == "/v1" || strings.HasPrefix(p, "/v1/"):
		d.at(fmt.Sprintf("%q is taken by the HTTP API", p), "metrics", "path")
	default:
		// What serve would refuse when it registers the route.
		if err := httpapi.CheckMetricsPath(p); err != nil {
			msg := err.Error()
			var pe *httpapi.MetricsPathError
			if errors.As(err, &pe) {
				msg = fmt.Sprintf("%q %s", pe.Path, pe.Reason)
			}
			d.at(msg, "metrics", "path")
		}
	}
}
