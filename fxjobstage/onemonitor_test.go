package fxjobstage_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/fxjobstage"
	"github.com/jobstage/jobstage/kv/embedded"
)

// monitorLoops counts the activity monitors running in the process.
func monitorLoops() int {
	buf := make([]byte, 1<<22)
	n := runtime.Stack(buf, true)
	return strings.Count(string(buf[:n]), "fdbq.(*Monitor).loop(")
}

// settledLoops is monitorLoops once it is want, or after a second: a
// monitor's goroutine that has not run yet is not counted as its loop,
// and one whose Stop returned may still be leaving it.
func settledLoops(want int) int {
	n := monitorLoops()
	for deadline := time.Now().Add(time.Second); n != want && time.Now().Before(deadline); n = monitorLoops() {
		time.Sleep(5 * time.Millisecond)
	}
	return n
}

// The application of the package's doc (MonitorModule beside a pipeline
// built with default options) runs one activity monitor over its queue,
// not two.
func TestApplicationRunsOneMonitor(t *testing.T) {
	app := fxtest.New(t,
		fx.NopLogger,
		fx.Supply(fxjobstage.EmbeddedConfig{Options: embedded.Options{InMemory: true}}),
		fxjobstage.EmbeddedStoreModule,
		fxjobstage.QueueModule,
		fxjobstage.DeclareType("welcome", fdbq.DefaultTypeSettings()),
		fxjobstage.MonitorModule,
		fxjobstage.PipelinesModule,
		fxjobstage.ProvidePipeline(newWelcomePipeline),
	)
	app.RequireStart()
	defer app.RequireStop()
	if n := settledLoops(1); n != 1 {
		t.Fatalf("%d activity monitors run over the application's one queue, want 1", n)
	}
}
