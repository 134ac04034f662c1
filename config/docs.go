package config

import (
	"fmt"
	"strings"
)

const docsIntro = `# jobstage configuration reference

<!-- Generated from the schema in package config by config.Docs:
     go run ./cmd/jobstage config docs > docs/config.md
     (or go test ./config -run TestDocs -update). Do not edit by hand. -->

` + "`jobstage serve --config FILE`" + ` reads one YAML file. Every key is optional
unless marked required; an absent key (or one set to ` + "`null`" + `) takes its default.
` + "`jobstage config lint FILE`" + ` reports every problem with its file:line:column
(unknown keys, wrong types, bad durations and values, unset environment
variables, unreadable files, pipelines for undeclared types) and exits with
status 1; ` + "`serve`" + ` refuses a file that fails lint.

- **Durations** are Go duration strings: ` + "`500ms`, `30s`, `5m`, `1h30m`" + `; never negative.
- **Environment overrides.** Every key can be set by an environment variable,
  which wins over the file: ` + "`JOBSTAGE_`" + ` followed by the key's path, its
  segments joined by ` + "`__`" + ` (two underscores), each segment upper-cased with
  every character other than a letter or a digit made ` + "`_`" + `. Segments are
  keys, map keys (type and pipeline names, header and environment names) and
  list indexes from 0, for example ` + "`JOBSTAGE_HTTP__LISTEN`" + `,
  ` + "`JOBSTAGE_TYPES__SEND_EMAIL__RETRY__MAX_ATTEMPTS`" + ` for type ` + "`send-email`" + `,
  ` + "`JOBSTAGE_HTTP__TOKENS__0__ROLE`" + `. Keys inside a map entry or list item
  (a type, a pipeline, a token, a header) are overridden only for entries the
  file declares; a variable that matches no key is a problem, and so is one
  that would match two entries (types ` + "`a-b`" + ` and ` + "`a_b`" + `). A list of strings
  is overridden by a YAML list: ` + "`JOBSTAGE_PIPELINES__RESIZE__HANDLER__EXEC__COMMAND='[\"convert\", \"-\"]'`" + `.
- **Variables in values.** ` + "`${NAME}`" + ` in any value in the file is replaced by
  the environment variable's value; ` + "`${NAME:-default}`" + ` uses the default when
  the variable is unset or empty; ` + "`$${`" + ` writes a literal ` + "`${`" + `. An unset
  variable without a default is a problem. Values set by overrides are taken
  as they are.
- **Secrets** (token values) are never written in the file: each token names
  an environment variable (` + "`value_env`" + `) or a file (` + "`value_file`" + `) that holds
  it; an inline ` + "`value`" + ` is refused.
- Relative paths are relative to the working directory.
`

// Docs returns the configuration reference in Markdown, generated from the
// schema: every key with its type, default, environment variable and
// meaning. docs/config.md is its output.
func Docs() string {
	var b strings.Builder
	b.WriteString(docsIntro)
	for _, section := range schema.fields {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", section.key, section.doc)
		b.WriteString("| Key | Type | Default | Environment variable | Description |\n")
		b.WriteString("|---|---|---|---|---|\n")
		rows(&b, section, []string{section.key}, []string{section.key}, true)
	}
	return b.String()
}

// rows writes the table rows of f's keys; path is how the key is shown,
// envPath the segments of its variable (placeholders in angle brackets).
func rows(b *strings.Builder, f *field, path, envPath []string, top bool) {
	switch f.kind {
	case kindMap:
		path, envPath = join(path, "<name>"), join(envPath, "<NAME>")
	case kindList:
		path, envPath = join(path, "<n>"), join(envPath, "<N>")
	}
	if !top && len(f.fields) > 0 {
		row(b, "`"+key(path)+"`", typeDoc(f), "", "", f.doc)
	}
	if len(f.fields) == 0 {
		env := "`" + envDoc(envPath) + "`"
		if f.kind == kindStringMap {
			env = "`" + envDoc(join(envPath, "<KEY>")) + "`"
		}
		row(b, "`"+key(path)+"`", typeDoc(f), defaultDoc(f), env, f.doc)
		return
	}
	for _, c := range f.fields {
		rows(b, c, join(path, c.key), join(envPath, c.key), false)
	}
}

func row(b *strings.Builder, cells ...string) {
	b.WriteString("|")
	for _, c := range cells {
		b.WriteString(" ")
		b.WriteString(strings.ReplaceAll(c, "|", `\|`))
		b.WriteString(" |")
	}
	b.WriteString("\n")
}

func envDoc(path []string) string {
	var segs []string
	for _, s := range path {
		if strings.HasPrefix(s, "<") {
			segs = append(segs, s)
		} else {
			segs = append(segs, strings.TrimPrefix(EnvName(s), EnvPrefix))
		}
	}
	return EnvPrefix + strings.Join(segs, "__")
}

func typeDoc(f *field) string {
	switch {
	case f.enum != nil:
		return "one of `" + strings.Join(f.enum, "`, `") + "`"
	case f.min != nil && f.max != nil:
		return fmt.Sprintf("%s from %d to %d", f.kind.what(), *f.min, *f.max)
	case f.min != nil:
		return fmt.Sprintf("%s ≥ %d", f.kind.what(), *f.min)
	case f.kind == kindMap:
		return "map of name to mapping"
	case f.kind == kindList:
		return "list of mappings"
	}
	return f.kind.what()
}

func defaultDoc(f *field) string {
	switch {
	case f.defDoc != "":
		return f.defDoc
	case f.def != "":
		return "`" + f.def + "`"
	}
	return ""
}
