package fdbq

import (
	"context"
	"fmt"

	"go.uber.org/fx"

	"github.com/jobstage/jobstage/kv"
)

// DeclareType is an fx option that registers a job type at start, with
// settings s. A type that exists keeps its pause: pausing is an
// operator's act (Pause, `jobstage pause`), which a restart must not undo;
// s.Paused true pauses the type at start. Stored settings that do not
// decode (ErrCorrupt) are replaced by s, so that the type works again. A name ValidateTypeName refuses
// fails the application when it is built, before anything starts.
func DeclareType(name string, s TypeSettings) fx.Option {
	if err := ValidateTypeName(name); err != nil {
		return fx.Error(fmt.Errorf("fdbq.DeclareType: %w", err))
	}
	return fx.Supply(fx.Annotate(TypeDef{Name: name, Settings: s}, fx.ResultTags(`group:"jobstage.types"`)))
}

type queueParams struct {
	fx.In
	DB      *kv.DB
	Options Options   `optional:"true"`
	Types   []TypeDef `group:"jobstage.types"`
}

// Module provides the *Queue over the application's *kv.DB (optionally
// configured by a supplied Options) and registers the declared types when
// the application starts, before the stages start.
var Module = fx.Module("jobstage.fdbq",
	fx.Provide(provideQueue),
)

func provideQueue(lc fx.Lifecycle, p queueParams) *Queue {
	q := New(p.DB, p.Options)
	lc.Append(fx.StartHook(func(ctx context.Context) error {
		for _, t := range p.Types {
			if err := q.DeclareType(ctx, p.DB, t.Name, t.Settings); err != nil {
				return fmt.Errorf("declaring type %s: %w", t.Name, err)
			}
		}
		return nil
	}))
	return q
}

type monitorParams struct {
	fx.In
	Queue   *Queue
	Options MonitorOptions `optional:"true"`
}

// MonitorModule runs the activity monitor as a stage of the application:
// started with it, stopped with it.
var MonitorModule = fx.Module("jobstage.monitor",
	fx.Provide(func(p monitorParams) *Monitor { return NewMonitor(p.Queue, p.Options) }),
	fx.Invoke(func(lc fx.Lifecycle, m *Monitor) {
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error { m.Start(); return nil },
			OnStop:  m.Stop,
		})
	}),
)
