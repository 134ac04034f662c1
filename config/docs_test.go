package config_test

import (
	"flag"
	"os"
	"testing"

	"github.com/jobstage/jobstage/config"
)

var update = flag.Bool("update", false, "rewrite docs/config.md from config.Docs")

const docsFile = "../docs/config.md"

// TestDocs fails when docs/config.md is not what the schema generates.
func TestDocs(t *testing.T) {
	want := config.Docs()
	if *update {
		if err := os.WriteFile(docsFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("docs/config.md is out of date with the schema; regenerate it:\n\tgo run ./cmd/jobstage config docs > docs/config.md\nor\n\tgo test ./config -run TestDocs -update")
	}
}
