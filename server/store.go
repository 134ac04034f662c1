package server

import (
	"fmt"

	"go.uber.org/fx"

	"github.com/jobstage/jobstage/config"
	"github.com/jobstage/jobstage/fxjobstage"
)

// storeModule provides the *kv.DB of the configured backend.
func storeModule(sc config.Store) fx.Option {
	switch sc.Backend {
	case "", "embedded":
		return fx.Options(fx.Supply(fxjobstage.EmbeddedConfig{Dir: sc.Path}), fxjobstage.EmbeddedStoreModule)
	case "fdb":
		return fdbModule(sc)
	}
	return fx.Error(fmt.Errorf("store: unknown backend %q (embedded or fdb)", sc.Backend))
}
