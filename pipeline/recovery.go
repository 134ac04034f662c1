package pipeline

import (
	"context"
	"sync"

	"github.com/jobstage/jobstage/fdbq"
)

// monitors are the activity monitors the pipelines of a process share,
// one per queue however many pipelines work it: a second monitor over the
// same store would only repeat the first one's reads and conflict with
// its writes.
var monitors = struct {
	mu sync.Mutex
	m  map[*fdbq.Queue]*sharedMonitor
}{m: map[*fdbq.Queue]*sharedMonitor{}}

// sharedMonitor is the monitor of a queue and the running pipelines that
// use it. A monitor a pipeline started is owned: the last pipeline to
// stop stops it. One given by AdoptMonitor belongs to its caller.
type sharedMonitor struct {
	q     *fdbq.Queue
	m     *fdbq.Monitor
	users int
	owned bool
}

// acquireMonitor joins the monitor the pipelines of q share, or starts
// one configured by o.
func acquireMonitor(ctx context.Context, q *fdbq.Queue, o fdbq.MonitorOptions) (*sharedMonitor, error) {
	monitors.mu.Lock()
	defer monitors.mu.Unlock()
	if s := monitors.m[q]; s != nil {
		s.users++
		return s, nil
	}
	m := fdbq.NewMonitor(q, o)
	if err := m.Start(ctx); err != nil {
		return nil, err
	}
	s := &sharedMonitor{q: q, m: m, users: 1, owned: true}
	monitors.m[q] = s
	return s, nil
}

// release counts one pipeline less, and stops an owned monitor when it
// was the last.
func (s *sharedMonitor) release(ctx context.Context) error {
	monitors.mu.Lock()
	s.users--
	// An adopted monitor stays registered until its owner's release:
	// the pipelines that start after these join it too.
	stop := s.users == 0 && s.owned
	if stop && monitors.m[s.q] == s {
		delete(monitors.m, s.q)
	}
	m := s.m
	monitors.mu.Unlock()
	if stop {
		return m.Stop(ctx)
	}
	return nil
}

// AdoptMonitor makes m, a monitor of q that its caller runs, the one the
// pipelines of q join from now on, instead of starting their own: so a
// program that runs a monitor of its own (fxjobstage.MonitorModule,
// jobstage.Client) next to pipelines with default options runs one. The
// caller starts m before it adopts it and calls release before it stops
// it; pipelines that joined m and still run keep no monitor of their own
// after that. Pipelines of q that run already, on a monitor one of them
// started, move to m: theirs is stopped. A monitor another caller adopted
// stays the one, and then release does nothing.
func AdoptMonitor(q *fdbq.Queue, m *fdbq.Monitor) (release func()) {
	monitors.mu.Lock()
	s := monitors.m[q]
	var replaced *fdbq.Monitor
	switch {
	case s == nil:
		s = &sharedMonitor{q: q, m: m}
		monitors.m[q] = s
	case s.owned:
		// The running pipelines' own monitor: they share m from now on,
		// and theirs would only repeat its reads.
		replaced = s.m
		s.m, s.owned = m, false
	default:
		monitors.mu.Unlock()
		return func() {}
	}
	monitors.mu.Unlock()
	if replaced != nil {
		_ = replaced.Stop(context.Background())
	}
	return func() {
		monitors.mu.Lock()
		defer monitors.mu.Unlock()
		if monitors.m[q] == s {
			delete(monitors.m, q)
		}
	}
}
