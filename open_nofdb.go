//go:build !fdb

package jobstage

import (
	"errors"

	"github.com/jobstage/jobstage/kv"
)

func openFDB(string) (kv.Backend, error) {
	return nil, errors.New("Config.ClusterFile: this program was built without FoundationDB support; build it with -tags fdb (needs libfdb_c)")
}
