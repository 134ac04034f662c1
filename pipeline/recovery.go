package pipeline

import (
	"context"
	"sync"

	"github.com/jobstage/jobstage/fdbq"
)

// monitors are the activity monitors pipelines run, one per queue however
// many pipelines of the process work it: a second monitor over the same
// store would only repeat the first one's reads and conflict with its
// writes.
var monitors = struct {
	mu sync.Mutex
	m  map[*fdbq.Queue]*sharedMonitor
}{m: map[*fdbq.Queue]*sharedMonitor{}}

type sharedMonitor struct {
	m     *fdbq.Monitor
	users int
}

// acquireMonitor starts the monitor of q, or counts one more user of the
// one running. o configures a monitor it starts; the pipelines after the
// first share the first one's.
func acquireMonitor(ctx context.Context, q *fdbq.Queue, o fdbq.MonitorOptions) error {
	monitors.mu.Lock()
	defer monitors.mu.Unlock()
	if s := monitors.m[q]; s != nil {
		s.users++
		return nil
	}
	m := fdbq.NewMonitor(q, o)
	if err := m.Start(ctx); err != nil {
		return err
	}
	monitors.m[q] = &sharedMonitor{m: m, users: 1}
	return nil
}

// releaseMonitor counts one user of q's monitor less, and stops it when
// it was the last.
func releaseMonitor(ctx context.Context, q *fdbq.Queue) error {
	monitors.mu.Lock()
	s := monitors.m[q]
	if s == nil {
		monitors.mu.Unlock()
		return nil
	}
	s.users--
	if s.users > 0 {
		monitors.mu.Unlock()
		return nil
	}
	delete(monitors.m, q)
	monitors.mu.Unlock()
	return s.m.Stop(ctx)
}
