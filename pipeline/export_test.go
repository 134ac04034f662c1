package pipeline

// MonitorsRunning is how many queues have a monitor that pipelines run.
func MonitorsRunning() int {
	monitors.mu.Lock()
	defer monitors.mu.Unlock()
	return len(monitors.m)
}

// MonitorUsers is how many running pipelines share the monitor of the
// queue of p's first producer.
func MonitorUsers(p *Pipeline) int {
	monitors.mu.Lock()
	defer monitors.mu.Unlock()
	if s := p.monitor; s != nil {
		return s.users
	}
	return 0
}

// DemandChanged is a channel closed at the next change of p's demand or
// reservations (the ledger's changed), for a test that waits for one.
func DemandChanged(p *Pipeline) <-chan struct{} {
	p.mu.Lock()
	l := p.ledger
	p.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}
