package consumer

import (
	"context"
	"encoding/json"
	"fmt"
)

// Raw adapts a typed handler to one over the job's JSON data and result,
// the form in which a server that builds its pipelines from a config runs
// Go handlers beside its built-in ones. The typed handler sees the job as
// under New: its data decoded into T, and Progress working.
func Raw[T, R any](h Handler[T, R]) Handler[json.RawMessage, json.RawMessage] {
	return func(ctx context.Context, j *Job[json.RawMessage]) (json.RawMessage, error) {
		tj := &Job[T]{ID: j.ID, Type: j.Type, Attempt: j.Attempt, Priority: j.Priority,
			ScheduledAt: j.ScheduledAt, Lease: j.Lease, env: j.env}
		if len(j.Data) > 0 && string(j.Data) != "null" {
			if err := json.Unmarshal(j.Data, &tj.Data); err != nil {
				return nil, fmt.Errorf("consumer: decode data of %s/%s: %w", j.Type, j.ID, err)
			}
		}
		r, err := h(ctx, tj)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("consumer: encode result of %s/%s: %w", j.Type, j.ID, err)
		}
		return b, nil
	}
}
