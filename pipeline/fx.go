package pipeline

import (
	"go.uber.org/fx"
)

// Provide is an fx option that builds a pipeline with constructor (an fx
// constructor returning (*Pipeline, error), taking what it needs: the
// *fdbq.Queue, …) and runs it with the application: Module starts it on
// start and drains it on stop.
func Provide(constructor any) fx.Option {
	return fx.Provide(fx.Annotate(constructor, fx.ResultTags(`group:"jobstage.pipelines"`)))
}

type pipelinesParams struct {
	fx.In
	Pipelines []*Pipeline `group:"jobstage.pipelines"`
}

// Module starts every pipeline given with Provide when the application
// starts, and stops (drains) them when it stops, within the stop timeout.
var Module = fx.Module("jobstage.pipelines",
	fx.Invoke(func(lc fx.Lifecycle, p pipelinesParams) {
		for _, pl := range p.Pipelines {
			lc.Append(fx.Hook{OnStart: pl.Start, OnStop: pl.Stop})
		}
	}),
)
