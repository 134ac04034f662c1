//go:build fdb

package jobstage

import (
	"github.com/jobstage/jobstage/kv"
	kvfdb "github.com/jobstage/jobstage/kv/fdb"
)

func openFDB(clusterFile string) (kv.Backend, error) {
	return kvfdb.Open(clusterFile, kvfdb.Options{})
}
