package fxjobstage_test

import (
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/fxjobstage"
	"github.com/jobstage/jobstage/internal/jobtest"
	"github.com/jobstage/jobstage/kv/embedded"
)

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
	if n := jobtest.MonitorLoops(1); n != 1 {
		t.Fatalf("%d activity monitors run over the application's one queue, want 1", n)
	}
}
