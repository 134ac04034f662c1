//go:build !fdb

package server

import (
	"errors"

	"go.uber.org/fx"

	"github.com/jobstage/jobstage/config"
)

func fdbModule(config.Store) fx.Option {
	return fx.Error(errors.New("store: backend fdb: this jobstage was built without FoundationDB support; build it with `go build -tags fdb ./cmd/jobstage` (needs libfdb_c)"))
}
