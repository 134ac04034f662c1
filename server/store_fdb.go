//go:build fdb

package server

import (
	"go.uber.org/fx"

	"github.com/jobstage/jobstage/config"
	"github.com/jobstage/jobstage/kv"
	kvfdb "github.com/jobstage/jobstage/kv/fdb"
)

func fdbModule(sc config.Store) fx.Option {
	return fx.Provide(func(lc fx.Lifecycle) (*kv.DB, error) {
		st, err := kvfdb.Open(sc.ClusterFile, kvfdb.Options{})
		if err != nil {
			return nil, err
		}
		db := kv.NewDB(st, kv.Options{})
		lc.Append(fx.StopHook(db.Close))
		return db, nil
	})
}
