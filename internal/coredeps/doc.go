// Package coredeps holds no code: its test checks that jobstage's core
// packages (kv, kv/embedded, fdbq, producer, consumer, pipeline) link
// neither go.uber.org/fx (nor dig or zap, which fx brings) nor
// github.com/reugn/go-streams. Their fx modules live in package
// fxjobstage and their go-streams adapters in package pipeline/gostreams,
// so a program that uses neither does not link them.
package coredeps
