package fxjobstage_test

import (
	"runtime"
	"strings"
	"testing"

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
	if n := monitorLoops(); n != 1 {
		t.Fatalf("%d activity monitors run over the application's one queue, want 1", n)
	}
}
