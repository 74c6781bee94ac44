// Package supervisor is the core of stubvisor: it loads models from the
// repositories, runs one stub process per model instance (Python or Go),
// feeds them requests through their shared-memory rings, watches their
// health, replaces the ones that die or hang, and reports it all. It
// implements backendapi.Backend for the front ends.
//
// # Files, one job each
//
// The backend and its models:
//
//	supervisor.go   Supervisor, Options, New/Close, lookups, Infer, Stubs
//	repository.go   loading, unloading, polling the repositories, the index
//	runtime.go      Python interpreters (EXECUTION_ENV_PATH), building Go models
//	model.go        modelVersion: one loaded version, its instances, submit/finish
//	validate.go     a request checked against the model's inputs and outputs
//	stats.go        per-model statistics; metrics.go: custom metrics from stubs
//
// From request to stub (docs/architecture.md draws the path):
//
//	scheduler.go    the scheduler interface, newScheduler, the default scheduler
//	batcher.go      the dynamic batcher; sequence.go: the sequence batcher
//	seqcontrol.go   a sequence's key and the control inputs it adds (START, END, READY, CORRID)
//	pending.go      pending: one request until its final response; batch
//	instance.go     instance: a slot that always wants a live stub (restarts)
//	process.go      stubproc.Proc: one stub process's life (spawn, reap, kill, watch, stop)
//	exchange.go     the request table: execute, executeDone, deliver, releases, control calls
//	reader.go       the ring reader: read, readFor, drain, handle
//	response.go     a stub's response turned into the front end's
//	classify.go     the classification extension (labels, top-k)
//	bls.go          requests a model makes from inside execute (BLS)
//	ensemble.go     an ensemble's steps, built and checked at load
//	ensemble_run.go one request through an ensemble: steps, tensor table, refcounts
//	clientshm.go    client shared memory: the registry and its endpoints
//	stubshm.go      client regions as one stub sees them (lifeline, MapRegion)
//	logs.go         stub stdout/stderr and Log messages into the logger
//	launch_*.go, sched_*.go, clientshm_*.go: what differs per OS
//
// # Goroutines and who owns them
//
// No goroutine belongs to the ring. The caller of Infer (a front end's
// goroutine) queues its request, usually sends its own Execute (a free
// pipeline slot, scheduler.go) and then reads the stub's ring itself until
// its answer arrives, handling every message it finds for anyone
// (stubproc.Proc.read; one reader at a time, by the stubproc.Proc.lead token). When
// the answer frees a slot, that reader also sends the next queued batch
// (stubproc.Proc.next). The goroutines the package starts, by owner:
//
//   - Supervisor: poll (Options.ModelControl = poll; Close waits for it),
//     the launcher's thread (launch_linux.go; lives as long as the process),
//     startup loads (joined in New) and Close's per-model stops (joined).
//   - modelVersion: per-instance starts and stops (joined); the dynamic
//     batcher's run, or the sequence batcher's reap, one await per batch in
//     flight and the lane timers (all ended and awaited by scheduler.stop).
//   - instance: supervise, from the first stub's start until instance.stop;
//     it starts one dispatch per stub incarnation.
//   - stubproc.Proc (one incarnation): reap (from spawn until the process is
//     reaped and its requests failed), two forwardLines (stdout, stderr;
//     reap waits for them), watch (the watchdog, until the process exits),
//     dispatch (feeds queued batches into free slots, until it exits).
//   - pending: readFor, started when a caller gives up while the stub still
//     owes it a reply, reads in its place until the request ends or the
//     stub dies.
//   - reader: one bls goroutine per InferExec message (and a watcher that
//     cancels it when the calling stub exits), ended when its request ends.
//   - ensRun: one goroutine per step that runs beside another (a lone step
//     runs on the caller's goroutine), ended when its request ends; the
//     run waits for all of them before it answers.
//   - CustomMetrics: one call per live stub, joined within the scrape.
//
// # Lock order
//
// A goroutine holding a lock may take only locks below it in this list;
// most are leaves, held for a few field updates and never across a send on
// a ring, a wait on a channel, or a call into a response's callback.
//
//  1. The lock of one model name (loadlock.go): serialises that model's
//     load and unload; loads of different models run at once, so a
//     model's initialize may load another (pb_utils.load_model). An
//     ensemble's load takes the locks of the composing models it loads
//     (a cycle is refused before it would lock twice).
//  2. prepMu (runtime.go): preparing interpreters and Go binaries; taken
//     under a model's load lock, never with Supervisor.mu.
//  3. Supervisor.mu (RW): the model table.
//  4. sequenceBatcher.mu; dynamicBatcher.mu: their queues.
//  5. instance.mu: the instance's stub, state and counters.
//  6. stubproc.Proc.relMu: output blocks waiting to be handed back.
//  7. pending.reqMu: the core's use of a request its caller may leave
//     (prepare, building a response; pending.hold); held across copying
//     inputs and, on error paths, a Release sent to the stub.
//  8. stubproc.Proc.sendMu: taking a batch id and sending the batch, one step
//     (so ids follow the ring's order); held across the Send.
//  9. stubproc.Proc.mu: the request table (batches, requests, calls, refs).
//  10. pending.mu: one request's end (respond runs the stream callback and
//     onEnd after unlocking).
//  11. stubShm.mu: one stub's mapped client regions, then
//  12. clientShm.mu: the client region registry.
//  13. Leaves, never held while taking another: modelVersion.mu (RW; the
//     closing flag), stats.mu, the merger's mutex in CustomMetrics, and
//     the two mutexes of package cuda (its driver and each opened handle),
//     ensRun.mu (its event queue).
//
// Observed nestings: a model's load lock > Supervisor.mu (load); Supervisor.mu >
// instance.mu, stubproc.Proc.mu (Ready, RepositoryIndex and Stubs read instance
// states under it); sequenceBatcher.mu > instance.mu (pump, reap);
// dynamicBatcher.mu > pending.mu (form calls gone); relMu > stubproc.Proc.mu
// (releaseLater calls busy); stubShm.mu > clientShm.mu (ensureMapped).
// Finishing a request (modelVersion.finish) takes pending.mu, then, after
// releasing it, clientShm.mu (onEnd) and stats.mu, so it is never called
// with a batcher's or a stub's lock held.
package supervisor
