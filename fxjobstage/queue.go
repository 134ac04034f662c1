package fxjobstage

import (
	"context"
	"fmt"

	"go.uber.org/fx"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/pipeline"
)

// typesGroup is the fx value group of the declared types.
const typesGroup = `group:"jobstage.types"`

// DeclareType is an fx option that declares a job type with settings s
// when the application starts, before the monitor and the pipelines
// start: fdbq.Queue.DeclareType, so a type that exists keeps an
// operator's pause, and stored settings that do not decode are replaced
// by s. A name fdbq.ValidateTypeName refuses fails the application when it
// is built, before anything starts.
func DeclareType(name string, s fdbq.TypeSettings) fx.Option {
	if err := fdbq.ValidateTypeName(name); err != nil {
		return fx.Error(fmt.Errorf("fxjobstage.DeclareType: %w", err))
	}
	return fx.Supply(fx.Annotate(fdbq.TypeDef{Name: name, Settings: s}, fx.ResultTags(typesGroup)))
}

// schedulesGroup is the fx value group of the declared schedules.
const schedulesGroup = `group:"jobstage.schedules"`

// DeclareSchedule is an fx option that declares a periodic schedule when
// the application starts, after the types: fdbq.Queue.DeclareSchedule, so
// a schedule that exists keeps its pause and its place. A schedule
// fdbq.ValidateSchedule refuses fails the application when it is built.
// SchedulerModule runs the ticks.
func DeclareSchedule(s fdbq.Schedule) fx.Option {
	if err := fdbq.ValidateSchedule(s); err != nil {
		return fx.Error(fmt.Errorf("fxjobstage.DeclareSchedule: %w", err))
	}
	return fx.Supply(fx.Annotate(s, fx.ResultTags(schedulesGroup)))
}

type queueParams struct {
	fx.In
	DB        *kv.DB
	Options   fdbq.Options    `optional:"true"`
	Types     []fdbq.TypeDef  `group:"jobstage.types"`
	Schedules []fdbq.Schedule `group:"jobstage.schedules"`
}

// QueueModule provides the *fdbq.Queue over the application's *kv.DB
// (optionally configured by a supplied fdbq.Options). When the
// application starts it checks the store's data layout
// (fdbq.Queue.CheckLayout: a store of another layout fails the start) and
// declares the types given with DeclareType.
var QueueModule = fx.Module("jobstage.fdbq",
	fx.Provide(provideQueue),
)

func provideQueue(lc fx.Lifecycle, p queueParams) *fdbq.Queue {
	q := fdbq.New(p.DB, p.Options)
	lc.Append(fx.StartHook(func(ctx context.Context) error {
		if err := q.CheckLayout(ctx, p.DB); err != nil {
			return err
		}
		for _, t := range p.Types {
			if err := q.DeclareType(ctx, p.DB, t.Name, t.Settings); err != nil {
				return fmt.Errorf("declaring type %s: %w", t.Name, err)
			}
		}
		for _, s := range p.Schedules {
			if err := q.DeclareSchedule(ctx, p.DB, s); err != nil {
				return fmt.Errorf("declaring schedule %s: %w", s.Name, err)
			}
		}
		return nil
	}))
	return q
}

type monitorParams struct {
	fx.In
	Queue   *fdbq.Queue
	Options fdbq.MonitorOptions `optional:"true"`
}

// MonitorModule provides the activity monitor (*fdbq.Monitor, optionally
// configured by a supplied fdbq.MonitorOptions) and runs it with the
// application: started with it, stopped with it. The pipelines of the
// queue join it (pipeline.AdoptMonitor) instead of running their own,
// whether PipelinesModule is given before or after MonitorModule.
var MonitorModule = fx.Module("jobstage.monitor",
	fx.Provide(func(p monitorParams) *fdbq.Monitor { return fdbq.NewMonitor(p.Queue, p.Options) }),
	fx.Invoke(func(lc fx.Lifecycle, q *fdbq.Queue, m *fdbq.Monitor) {
		var release func()
		lc.Append(fx.Hook{
			OnStart: func(ctx context.Context) error {
				if err := m.Start(ctx); err != nil {
					return err
				}
				release = pipeline.AdoptMonitor(q, m)
				return nil
			},
			OnStop: func(ctx context.Context) error {
				if release != nil {
					release()
				}
				return m.Stop(ctx)
			},
		})
	}),
)

type schedulerParams struct {
	fx.In
	Queue   *fdbq.Queue
	Options fdbq.SchedulerOptions `optional:"true"`
}

// SchedulerModule provides the scheduler of periodic jobs
// (*fdbq.Scheduler, optionally configured by a supplied
// fdbq.SchedulerOptions) and runs it with the application. Every process
// may run one: a tick is one transaction, so they need no leader.
var SchedulerModule = fx.Module("jobstage.scheduler",
	fx.Provide(func(p schedulerParams) *fdbq.Scheduler { return fdbq.NewScheduler(p.Queue, p.Options) }),
	fx.Invoke(func(lc fx.Lifecycle, s *fdbq.Scheduler) {
		lc.Append(fx.Hook{OnStart: s.Start, OnStop: s.Stop})
	}),
)
