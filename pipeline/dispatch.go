package pipeline

import (
	"hash/fnv"

	"github.com/jobstage/jobstage/fdbq"
)

// Dispatcher decides which consumers get each job (GenStage's
// dispatchers).
type Dispatcher struct {
	kind dispatchKind
	key  func(*fdbq.Lease) string
}

type dispatchKind int

const (
	demandDispatch dispatchKind = iota
	broadcastDispatch
	partitionDispatch
)

// DemandDispatcher sends each job to the consumer with the most
// outstanding demand. It is the default.
func DemandDispatcher() Dispatcher { return Dispatcher{kind: demandDispatch} }

// BroadcastDispatcher sends every job to every consumer; it moves at the
// pace of the consumer with the least demand. The job is finished when
// every consumer succeeded, and fails with the first error otherwise.
func BroadcastDispatcher() Dispatcher { return Dispatcher{kind: broadcastDispatch} }

// PartitionDispatcher sends each job to the consumer chosen by a hash of
// key(job), so jobs with one key always go to one consumer. Jobs with the
// same key then run one at a time, in the order they were accepted (the
// producer accepts in strict priority-then-time order under this
// dispatcher): per-key ordering, with parallelism across keys.
func PartitionDispatcher(key func(*fdbq.Lease) string) Dispatcher {
	return Dispatcher{kind: partitionDispatch, key: key}
}

func (d Dispatcher) partition(l *fdbq.Lease, n int) int {
	h := fnv.New32a()
	h.Write([]byte(d.key(l)))
	return int(h.Sum32() % uint32(n))
}
