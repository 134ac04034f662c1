package fdbq

import (
	"testing"
	"time"

	"github.com/jobstage/jobstage/kv"
)

// versionAt is a read view that only knows its read version, for
// feeding a monitor's sample.
type versionAt struct {
	kv.ReadTx
	rv int64
}

func (v versionAt) ReadVersion() (int64, error) { return v.rv, nil }

// A monitor's samples for a long activity timeout, one transaction a
// second (an Interval of 1 s; a busy monitor makes two or more): they are
// spaced for the longest timeout rather than thinned again and again, so
// a dead job is taken back within a few spacings of its timeout (4096
// samples spread evenly over 6 h are 5.3 s apart), not hours late.
func TestSamplesLongTimeoutsStayDense(t *testing.T) {
	const interval = time.Second
	const timeout = 6 * time.Hour
	at := time.Unix(0, 0)
	m := NewMonitor(New(nil, Options{}), MonitorOptions{Interval: interval, Clock: func() time.Time { return at }})
	m.timeoutSeen(timeout)
	var rv int64
	worst := time.Duration(0)
	for i := 0; i < int(3*timeout/interval); i++ {
		// The monitor's transaction i reads at version i, a second after
		// the one before: a commit at version v is known first at v s.
		at = at.Add(interval)
		rv++
		if err := m.sample(versionAt{rv: rv}); err != nil {
			t.Fatal(err)
		}
		if rv <= int64(timeout/interval)+10 {
			continue
		}
		// The job whose last renewal committed a timeout ago.
		cv := rv - int64(timeout/interval)
		due, ok := m.dueAt(cv, timeout)
		if !ok {
			t.Fatalf("no sample knows of version %d", cv)
		}
		worst = max(worst, due.Sub(time.Unix(cv, 0).Add(timeout)))
	}
	if bound := 2*interval + 4*timeout/maxSamples; worst > bound {
		t.Fatalf("timeout %v, a transaction a second: a dead job is due up to %v after its timeout (want at most %v)", timeout, worst, bound)
	}
}
