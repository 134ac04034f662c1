package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/config"
)

// Lint reports what serve or the first job of an exec handler would hit:
// a program that is not there or cannot be run, a working directory that
// is not one; and one problem does not hide another.
func TestLintExecProgram(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.sh")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\ncat\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "run.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ncat\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	missingDir := filepath.Join(dir, "nowhere")
	src := fmt.Sprintf("types: {t: {}}\npipelines:\n"+
		"  a: {type: t, handler: {exec: {command: [jobstage-no-such-program]}}}\n"+
		"  b: {type: t, handler: {exec: {command: [%[1]s/absent]}}}\n"+
		"  c: {type: t, handler: {exec: {command: [%[2]s]}}}\n"+
		"  d: {type: t, handler: {exec: {command: [%[1]s]}}}\n"+
		"  e: {type: t, handler: {exec: {command: [./absent.sh], dir: %[1]s}}}\n"+
		"  f: {type: t, handler: {exec: {command: [./run.sh], dir: %[1]s}}}\n"+
		"  g: {type: t, handler: {exec: {command: [%[3]s], dir: %[3]s}}}\n"+
		"  h: {type: t, handler: {exec: {command: [./run.sh], dir: %[4]s}}}\n"+
		"  i: {type: t, handler: {exec: {command: [jobstage-no-such-program], env: {'A=B': x, C: \"a\\0b\"}, max_output: 100000}}}\n"+
		"  j: {type: t, handler: {exec: {command: [%[5]s]}}}\n",
		dir, plain, missingDir, script, script)
	_, probs := config.Parse("f.yaml", []byte(src), nil)
	var got []string
	for _, p := range probs {
		got = append(got, p.Key+": "+p.Message)
	}
	want := []string{
		`pipelines.a.handler.exec.command.0: cannot run "jobstage-no-such-program": not found in $PATH`,
		fmt.Sprintf(`pipelines.b.handler.exec.command.0: cannot run "%s/absent": no such file`, dir),
		fmt.Sprintf(`pipelines.c.handler.exec.command.0: cannot run "%s": not executable (permission denied)`, plain),
		fmt.Sprintf(`pipelines.d.handler.exec.command.0: cannot run "%s": a directory`, dir),
		fmt.Sprintf(`pipelines.e.handler.exec.command.0: cannot run "./absent.sh" (in dir %s): no such file`, dir),
		fmt.Sprintf(`pipelines.g.handler.exec.command.0: cannot run "%s": no such file`, missingDir),
		fmt.Sprintf(`pipelines.g.handler.exec.dir: cannot use the working directory: stat %s: no such file or directory`, missingDir),
		fmt.Sprintf(`pipelines.h.handler.exec.dir: %s is not a directory`, script),
		`pipelines.i.handler.exec.command.0: cannot run "jobstage-no-such-program": not found in $PATH`,
		`pipelines.i.handler.exec.env.A=B: bad environment variable name "A=B"`,
		`pipelines.i.handler.exec.env.C: the value contains a NUL byte, which no environment can hold`,
		`pipelines.i.handler.exec.max_output: must be at most 90000, the limit a job's data, result and error share, got 100000`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Lint refuses the metrics paths serve refuses, saying why.
func TestLintMetricsPath(t *testing.T) {
	for p, want := range map[string]string{
		"/m/{x}":  `metrics.path: "/m/{x}" has '{' at byte 3`,
		"/a//b":   `metrics.path: "/a//b" is not a clean path (/a/b is): a request could never reach it`,
		"/m?x=1":  `metrics.path: "/m?x=1" has '?' at byte 2`,
		"/me tri": `metrics.path: "/me tri" has a space or a control character at byte 3`,
	} {
		_, probs := config.Parse("f.yaml", []byte(fmt.Sprintf("metrics: {path: %q}\n", p)), nil)
		if len(probs) != 1 || !strings.Contains(probs[0].String(), want) {
			t.Errorf("metrics path %q: %v, want one problem ending %q", p, probs, want)
		}
	}
}
