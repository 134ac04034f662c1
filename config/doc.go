// Package config reads jobstage's YAML configuration: the store, job
// types, pipelines and their built-in handlers, the HTTP API, metrics and
// logging.
//
// # One schema
//
// A single schema in code (schema.go) describes every key: its kind, its
// default, its allowed values and its documentation. Each schema key is
// bound at init to the Config struct field with the same yaml tag, and
// everything else walks the schema: decoding, defaults, environment
// overrides, lint and Docs, whose output is docs/config.md (a test fails
// when the two drift apart). Adding a key means adding a struct field and
// its schema entry; init panics if one is missing.
//
// # Parsing with positions
//
// The file is parsed into go.yaml.in/yaml/v3 nodes, not into structs, so
// that every problem carries the line and column of the key or value at
// fault. Parsing does not stop at the first problem: Parse returns all of
// them (unknown keys with the closest known key, wrong types, bad
// durations and values, duplicate keys, unset variables, unreadable
// files, pipelines for undeclared types), sorted by position, and Load
// refuses a config that has any.
//
// The order is: the value in the file, with ${NAME} references expanded,
// else the default; then the key's environment override (EnvName), if
// set; then the checks between keys (validate.go), which also fill in the
// defaults computed from other keys (a pipeline's demand) and read token
// secrets. A type's settings are checked with fdbq's own
// TypeSettings.Validate, one setting at a time, so that the rules live in
// one place and each problem still points at its key.
//
// # Secrets
//
// A token's secret is never written in the file: value_env names an
// environment variable and value_file a file, and Parse reads it into
// Token.Value. An inline value is refused rather than merely discouraged,
// so that a config file can be committed and shared without leaking.
package config
