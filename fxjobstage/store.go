package fxjobstage

import (
	"go.uber.org/fx"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/embedded"
)

// EmbeddedConfig is what EmbeddedStoreModule needs: the data directory and
// the options of the store and of the *kv.DB over it. Supply it with
// fx.Supply.
type EmbeddedConfig struct {
	Dir     string
	Options embedded.Options
	DB      kv.Options
}

// EmbeddedStoreModule provides a *kv.DB on the embedded store, opened when
// the application is built and closed when it stops.
var EmbeddedStoreModule = fx.Module("jobstage.store.embedded",
	fx.Provide(provideEmbeddedDB),
)

func provideEmbeddedDB(lc fx.Lifecycle, cfg EmbeddedConfig) (*kv.DB, error) {
	st, err := embedded.Open(cfg.Dir, cfg.Options)
	if err != nil {
		return nil, err
	}
	db := kv.NewDB(st, cfg.DB)
	lc.Append(fx.StopHook(db.Close))
	return db, nil
}
