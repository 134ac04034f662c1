package fxjobstage

import (
	"go.uber.org/fx"

	"github.com/jobstage/jobstage/pipeline"
)

// pipelinesGroup is the fx value group of the pipelines PipelinesModule
// runs.
const pipelinesGroup = `group:"jobstage.pipelines"`

// ProvidePipeline is an fx option that builds a pipeline with constructor
// (an fx constructor returning (*pipeline.Pipeline, error), taking what
// it needs: the *fdbq.Queue, …) for PipelinesModule to run with the
// application.
func ProvidePipeline(constructor any) fx.Option {
	return fx.Provide(fx.Annotate(constructor, fx.ResultTags(pipelinesGroup)))
}

type pipelinesParams struct {
	fx.In
	Pipelines []*pipeline.Pipeline `group:"jobstage.pipelines"`
}

// PipelinesModule starts every pipeline given with ProvidePipeline when the
// application starts, and stops (drains) them when it stops, within the
// stop timeout.
var PipelinesModule = fx.Module("jobstage.pipelines",
	fx.Invoke(func(lc fx.Lifecycle, p pipelinesParams) {
		for _, pl := range p.Pipelines {
			lc.Append(fx.Hook{OnStart: pl.Start, OnStop: pl.Stop})
		}
	}),
)
