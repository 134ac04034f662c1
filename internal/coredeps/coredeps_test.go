package coredeps_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/jobstage/jobstage"

// core are the packages a program that embeds jobstage without fx or
// go-streams imports.
var core = []string{
	module,
	module + "/jobstagetest",
	module + "/kv",
	module + "/kv/tuple",
	module + "/kv/embedded",
	module + "/fdbq",
	module + "/producer",
	module + "/consumer",
	module + "/pipeline",
}

// forbidden are the module paths no core package may depend on.
var forbidden = []string{
	"go.uber.org/fx",
	"go.uber.org/dig",
	"go.uber.org/zap",
	"github.com/reugn/go-streams",
	// The core makes spans through OpenTelemetry's API alone: the SDK,
	// the exporters and gRPC are for the program (or server) that
	// chooses to export.
	"go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/otel/exporters",
	"google.golang.org/grpc",
}

func TestCoreDependencies(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	for _, pkg := range core {
		t.Run(strings.TrimPrefix(pkg, module+"/"), func(t *testing.T) {
			// Each line: an import path, then the package's Go files.
			out, err := exec.Command(goCmd, "list", "-deps",
				"-f", `{{.ImportPath}}{{range .GoFiles}} {{$.Dir}}/{{.}}{{end}}`, pkg).Output()
			if err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
				}
				t.Fatalf("go list -deps %s: %v", pkg, err)
			}
			reported := map[string]bool{}
			for line := range strings.Lines(string(out)) {
				fields := strings.Fields(line)
				if len(fields) == 0 {
					continue
				}
				dep := fields[0]
				for _, f := range forbidden {
					if (dep == f || strings.HasPrefix(dep, f+"/")) && !reported[f] {
						reported[f] = true
						t.Errorf("%s depends on %s (`go mod why -m %s` says through what)", pkg, dep, f)
					}
				}
				if dep == module || strings.HasPrefix(dep, module+"/") {
					// go test caches a result by the files the test
					// opened, not by those the go command read for it:
					// stat the module's sources so that an import added
					// to one of them runs the test again.
					for _, file := range fields[1:] {
						if _, err := os.Stat(file); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
		})
	}
	if _, err := os.Stat("../../go.mod"); err != nil {
		t.Fatal(err)
	}
}

// Every package with tests fails them on a goroutine they leave behind:
// its TestMain runs goleak.VerifyTestMain.
func TestEveryPackageChecksLeaks(t *testing.T) {
	out, err := exec.Command("go", "list", "-f",
		`{{.ImportPath}}{{range .TestGoFiles}} {{$.Dir}}/{{.}}{{end}}{{range .XTestGoFiles}} {{$.Dir}}/{{.}}{{end}}`,
		module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	n := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue // no tests
		}
		n++
		found := false
		for _, f := range fields[1:] {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			found = found || strings.Contains(string(b), "goleak.VerifyTestMain(")
		}
		if !found {
			t.Errorf("%s has tests and no TestMain that runs goleak.VerifyTestMain", fields[0])
		}
	}
	if n < 10 {
		t.Fatalf("go list found %d packages with tests: the listing is wrong", n)
	}
}
