// Package fxjobstage composes jobstage into a go.uber.org/fx application:
// the embedded store, the jobs layer with the types the application
// declares, the activity monitor and the pipelines, each started and
// stopped with the application.
//
//	fx.New(
//		fx.Supply(fxjobstage.EmbeddedConfig{Dir: "data"}),
//		fxjobstage.EmbeddedStoreModule,
//		fxjobstage.QueueModule,
//		fxjobstage.DeclareType("email", fdbq.DefaultTypeSettings()),
//		fxjobstage.MonitorModule,
//		fxjobstage.PipelinesModule,
//		fxjobstage.ProvidePipeline(newEmailPipeline),
//	)
//
// The modules are glue: what they do at start is a call of the core
// packages (kv/embedded.Open, fdbq.Queue.DeclareType, the parts' Start and
// Stop), which import neither fx nor this package, so a program that does
// not use fx does not link it.
//
// The Example runs a job through an application of every module.
package fxjobstage
