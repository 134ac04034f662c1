package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/config"
	"github.com/jobstage/jobstage/consumer"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/server"
)

const waitLimit = 30 * time.Second

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func parse(t *testing.T, yaml string, env map[string]string) *config.Config {
	t.Helper()
	cfg, problems := config.Parse("test.yaml", []byte(yaml), func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
	if len(problems) > 0 {
		t.Fatalf("config: %v", problems)
	}
	return cfg
}

func start(t *testing.T, cfg *config.Config) *server.Server {
	t.Helper()
	s, err := server.New(cfg, server.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return s
}

const tokensConfig = `
store: {path: %s}
types:
  echo: {}
pipelines:
  echo:
    type: echo
    concurrency: 2
    handler: {exec: {command: ["cat"]}}
http:
  listen: 127.0.0.1:0
  tokens:
    - {name: ops, role: admin, value_env: OPS_TOKEN}
    - {name: app, role: producer, value_env: APP_TOKEN}
    - {name: runner, role: worker, value_file: %s}
`

// TestTokensAndRoles: a server with tokens serves each role what it may
// do and refuses the rest, with the secrets coming from the environment
// and from a file.
func TestTokensAndRoles(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "worker-token")
	if err := os.WriteFile(secretFile, []byte("worker-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := parse(t, fmt.Sprintf(tokensConfig, filepath.Join(dir, "data"), secretFile),
		map[string]string{"OPS_TOKEN": "ops-secret", "APP_TOKEN": "app-secret"})
	s := start(t, cfg)
	base := "http://" + s.Addr()
	ctx := context.Background()

	code := func(err error) string {
		var ae *httpapi.APIError
		if errors.As(err, &ae) {
			return ae.Code
		}
		if err != nil {
			return err.Error()
		}
		return "ok"
	}
	app := httpapi.NewClient(base, "app-secret", nil)
	runner := httpapi.NewClient(base, "worker-secret", nil)
	ops := httpapi.NewClient(base, "ops-secret", nil)
	anon := httpapi.NewClient(base, "", nil)
	wrong := httpapi.NewClient(base, "guess", nil)

	j, err := app.Enqueue(ctx, "echo", httpapi.NewJob{Data: json.RawMessage(`{"a":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runner.Enqueue(ctx, "echo", httpapi.NewJob{}); code(err) != httpapi.CodeForbidden {
		t.Errorf("worker enqueue: %v", err)
	}
	if _, err := anon.Get(ctx, "echo", j.ID); code(err) != httpapi.CodeUnauthorized {
		t.Errorf("no token: %v", err)
	}
	if _, err := wrong.Get(ctx, "echo", j.ID); code(err) != httpapi.CodeUnauthorized {
		t.Errorf("wrong token: %v", err)
	}
	if _, err := app.Pause(ctx, "echo"); code(err) != httpapi.CodeForbidden {
		t.Errorf("producer pause: %v", err)
	}
	got, err := runner.Wait(ctx, "echo", j.ID, fdbq.Finished, waitLimit)
	if code(err) != httpapi.CodeForbidden {
		// Workers may not wait; the producer may.
		t.Errorf("worker wait: %v %v", got, err)
	}
	got, err = app.Wait(ctx, "echo", j.ID, fdbq.Finished, waitLimit)
	if err != nil || got.State != fdbq.Finished || got.Outcome != fdbq.Succeeded {
		t.Fatalf("wait: %v %+v", err, got)
	}
	if _, err := ops.Pause(ctx, "echo"); err != nil {
		t.Errorf("admin pause: %v", err)
	}
	// Health and readiness need no token (the metrics do: see
	// TestMetricsToken).
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %s", path, resp.Status)
		}
	}
}

// TestNoTokensLoopbackOnly: without tokens, serve refuses to bind a
// non-loopback address.
func TestNoTokensLoopbackOnly(t *testing.T) {
	cfg := parse(t, fmt.Sprintf("store: {path: %s}\nhttp: {listen: 127.0.0.1:0}\n", t.TempDir()), nil)
	cfg.HTTP.Listen = "0.0.0.0:0"
	_, err := server.New(cfg, server.Options{Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("non-loopback without tokens: %v", err)
	}
}

// TestTLS: with TLS files the API is served over TLS only.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	cfg := parse(t, fmt.Sprintf("store: {path: %s}\nhttp:\n  listen: 127.0.0.1:0\n  tls: {cert_file: %s, key_file: %s}\n",
		filepath.Join(dir, "data"), certFile, keyFile), nil)
	s := start(t, cfg)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: waitLimit}
	resp, err := hc.Get("https://" + s.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz over TLS: %s", resp.Status)
	}
	plain := &http.Client{Timeout: waitLimit}
	if resp, err := plain.Get("http://" + s.Addr() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP served by a TLS server")
		}
	}
}

// TestStopDrainsAndStoreReopens: stop closes the store, so that a new
// server opens it and finds what the first committed.
func TestStopDrainsAndStoreReopens(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	yaml := fmt.Sprintf("store: {path: %s}\ntypes: {echo: {}}\npipelines:\n  echo: {type: echo, handler: {exec: {command: [cat]}}}\nhttp: {listen: 127.0.0.1:0}\n", dir)
	s, err := server.New(parse(t, yaml, nil), server.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cl := httpapi.NewClient("http://"+s.Addr(), "", nil)
	if _, err := cl.Enqueue(ctx, "echo", httpapi.NewJob{ID: "x", Data: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	if j, err := cl.Wait(ctx, "echo", "x", fdbq.Finished, waitLimit); err != nil || j.State != fdbq.Finished {
		t.Fatalf("wait: %v %+v", err, j)
	}
	stopCtx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	// The store was closed: a new server opens it and sees the job.
	s2 := start(t, parse(t, yaml, nil))
	j, err := httpapi.NewClient("http://"+s2.Addr(), "", nil).Get(ctx, "echo", "x")
	if err != nil || j.Outcome != fdbq.Succeeded || string(j.Result) != "1" {
		t.Fatalf("after restart: %v %+v", err, j)
	}
}

func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "jobstage test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestRestartKeepsPause: a type an operator paused stays paused when the
// server restarts with a config that does not pause it; its other settings
// come from the config.
func TestRestartKeepsPause(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	yaml := fmt.Sprintf("store: {path: %s}\ntypes: {echo: {activity_timeout: 1m}, other: {}}\nhttp: {listen: 127.0.0.1:0}\n", dir)
	ctx := context.Background()
	s, err := server.New(parse(t, yaml, nil), server.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cl := httpapi.NewClient("http://"+s.Addr(), "", nil)
	set := httpapi.TypeSettings{ActivityTimeout: httpapi.Duration(5 * time.Minute),
		Retry: httpapi.RetryPolicy{MaxAttempts: 2, Backoff: fdbq.Constant, Base: httpapi.Duration(time.Second)}}
	if _, err := cl.SetType(ctx, "echo", set); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Pause(ctx, "echo"); err != nil {
		t.Fatal(err)
	}
	stopCtx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}

	s2 := start(t, parse(t, yaml, nil))
	types, err := httpapi.NewClient("http://"+s2.Addr(), "", nil).Types(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*httpapi.TypeInfo{}
	for _, ti := range types {
		got[ti.Name] = ti
	}
	if e := got["echo"]; e == nil || !e.Settings.Paused || time.Duration(e.Settings.ActivityTimeout) != time.Minute {
		t.Errorf("echo after restart: %+v (want paused, activity timeout from the config)", e)
	}
	if o := got["other"]; o == nil || o.Settings.Paused {
		t.Errorf("other after restart: %+v", o)
	}
}

// TestGoHandler: an application registers a typed Go handler by name and
// a configured pipeline runs it, with the metrics and logging of the
// built-in handlers; a pipeline naming an unregistered handler is refused.
func TestGoHandler(t *testing.T) {
	type in struct{ N int }
	double := func(ctx context.Context, j *consumer.Job[in]) (int, error) {
		if j.Data.N < 0 {
			return 0, errors.New("negative")
		}
		return 2 * j.Data.N, nil
	}
	yaml := fmt.Sprintf("store: {path: %s}\ntypes: {math: {retry: {max_attempts: 1}}}\npipelines:\n  math: {type: math, handler: {go: double}}\nhttp: {listen: 127.0.0.1:0}\n",
		filepath.Join(t.TempDir(), "data"))
	if _, err := server.New(parse(t, yaml, nil), server.Options{Logger: quiet()}); err == nil || !strings.Contains(err.Error(), `no Go handler registered as "double"`) {
		t.Fatalf("unregistered Go handler: %v", err)
	}
	s, err := server.New(parse(t, yaml, nil), server.Options{Logger: quiet(),
		Handlers: map[string]consumer.Handler[json.RawMessage, json.RawMessage]{"double": consumer.Raw(double)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(ctx)
	cl := httpapi.NewClient("http://"+s.Addr(), "", nil)
	for id, data := range map[string]string{"a": `{"N":21}`, "b": `{"N":-1}`} {
		if _, err := cl.Enqueue(ctx, "math", httpapi.NewJob{ID: id, Data: json.RawMessage(data)}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := cl.Wait(ctx, "math", "a", fdbq.Finished, waitLimit)
	if err != nil || a.Outcome != fdbq.Succeeded || string(a.Result) != "42" {
		t.Errorf("a: %v %+v", err, a)
	}
	b, err := cl.Wait(ctx, "math", "b", fdbq.Finished, waitLimit)
	if err != nil || b.Outcome != fdbq.Failed || b.Error != "negative" {
		t.Errorf("b: %v %+v", err, b)
	}
	resp, err := http.Get("http://" + s.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`jobstage_jobs_finished_total{outcome="succeeded",type="math"} 1`, `jobstage_jobs_finished_total{outcome="failed",type="math"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
