package consumer

import (
	"context"
	"encoding/json"
)

// Raw adapts a typed handler to one over the job's JSON data and result,
// the form in which a server that builds its pipelines from a config runs
// Go handlers beside its built-in ones. The typed handler sees the job as
// under New: its data decoded into T, and Progress working.
func Raw[T, R any](h Handler[T, R]) Handler[json.RawMessage, json.RawMessage] {
	return func(ctx context.Context, j *Job[json.RawMessage]) (json.RawMessage, error) {
		tj := &Job[T]{ID: j.ID, Type: j.Type, Attempt: j.Attempt, Snoozes: j.Snoozes, Priority: j.Priority, Key: j.Key,
			ScheduledAt: j.ScheduledAt, Lease: j.Lease, env: j.env, progress: j.progress}
		if err := decodeData(tj, j.Data); err != nil {
			// As under New: another attempt would not decode it either.
			return nil, Cancel(err.Error())
		}
		r, err := h(ctx, tj)
		if err != nil {
			return nil, err
		}
		return encodeResult(j.Type, j.ID, r)
	}
}
