// Package ensemble is the scheduler of an ensemble model: it runs each
// request through the steps of ensemble_scheduling, each step as an
// ordinary request to its model (through Models, as any caller reaches a
// model), steps that become ready together in parallel, and ends the
// request through its Host. It implements sched.Scheduler, so HTTP, gRPC,
// BLS, another ensemble's step, the loading API and generate reach an
// ensemble exactly as they reach any model.
//
// # Files, one job each
//
//	doc.go          this description
//	host.go         Models, Model and Host: what the ensemble needs from the supervisor
//	schedule.go     Ensemble: the steps built and checked at load; the scheduler's verbs
//	run.go          one request through the ensemble: steps, tensor table, refcounts
//
// # Goroutines and who owns them
//
// A request runs on its caller's goroutine (Enqueue returns when it has
// ended). A lone step of a model that is not decoupled runs there too;
// every other step runs on a goroutine of its own (ensRun.fire), which
// ends when its step's request ends; run waits for all of them before it
// answers.
//
// # Lock order
//
// ensRun.mu (its event queue) is a leaf. Steps are submitted, and the
// request ended, with no lock held.
package ensemble
