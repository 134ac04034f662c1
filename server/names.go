package server

import (
	"context"
	"fmt"
	"log/slog"

	"go.uber.org/fx"

	"github.com/jobstage/jobstage/fdbq"
)

// warnBadTypeNames logs, at start, each type in the store whose name fdbq
// refuses: an earlier version registered names that are not UTF-8 or hold
// control characters. Such a type does not stop the server: its jobs are
// left alone (no call of the API can name it), its counts are reported in
// the metrics under the quoted name (metrics.Label), and the log says how
// it is named in the store. Removing it needs a tool that writes the store
// directly.
func warnBadTypeNames(lc fx.Lifecycle, q *fdbq.Queue, log *slog.Logger) {
	lc.Append(fx.StartHook(func(ctx context.Context) {
		types, err := q.Types(ctx, q.DB())
		if err != nil {
			log.Warn("cannot list the store's types to check their names", "err", err)
			return
		}
		for _, t := range types {
			if t.Name == "" {
				continue // a key that names no type: Types reports it with an error
			}
			if err := fdbq.ValidateTypeName(t.Name); err != nil {
				log.Warn("the store holds a type whose name is not valid", "type", fmt.Sprintf("%q", t.Name), "err", err)
			}
		}
	}))
}
