package embedded

import (
	"go.uber.org/fx"

	"github.com/jobstage/jobstage/kv"
)

// Config is what Module needs: the data directory and options. Supply it
// with fx.Supply.
type Config struct {
	Dir     string
	Options Options
	DB      kv.Options
}

// Module provides a *kv.DB on the embedded store, opened when the
// application is built and closed when it stops.
var Module = fx.Module("jobstage.store.embedded",
	fx.Provide(provideDB),
)

func provideDB(lc fx.Lifecycle, cfg Config) (*kv.DB, error) {
	st, err := Open(cfg.Dir, cfg.Options)
	if err != nil {
		return nil, err
	}
	db := kv.NewDB(st, cfg.DB)
	lc.Append(fx.StopHook(db.Close))
	return db, nil
}
