// Package supervisor is the core of stubvisor: it loads models from the
// repositories, runs one stub process per model instance (Python or Go),
// feeds them requests through their schedulers, watches their health,
// replaces the ones that die or hang, and reports it all. It implements
// backendapi.Backend for the front ends.
//
// Its rooms are packages of their own, each reached through a small
// interface (docs/architecture.md draws them and lists the allowed
// imports): sched (the schedulers; a model version is their
// sched.Dispatch), ensemble (the ensemble, one more sched.Scheduler),
// stubproc (one stub process; an instance is its stubproc.Host),
// clientshm (the client shared-memory registry) and ratelimit (the rate
// limiter, which a limited instance's stubs wait for: stubproc.Config.Gate).
//
// # Files, one job each
//
//	doc.go          this description
//	supervisor.go   Supervisor, Options, New/Close, lookups, Infer, Stubs
//	repository.go   loading, unloading, polling the repositories, the index
//	override.go     a load request's model name checked and its files written, confined
//	loadlock.go     the lock of each model name (loads of different models run at once)
//	runtime.go      Python interpreters (EXECUTION_ENV_PATH), building Go models
//	warmup.go       model_warmup: every sample on every new stub before it takes traffic
//	cache.go        the response cache (package respcache) in the request path
//	inputbuffer.go  InputBuffer: a stub's arena lent to a front end to read inputs into
//	ratelimit.go    the rate limiter (package ratelimit): limited instances registered, their stubs gated
//	pybackend.go    Python-based backends: backend "<name>" runs <backend-directory>/<name>/model.py
//	gpus.go         the devices the CUDA driver reports, for KIND_GPU and KIND_AUTO groups
//	model.go        modelVersion: one loaded version, its instances, submit/Finish; sched.Dispatch
//	instance.go     instance: a slot that always wants a live stub (restarts); stubproc.Host
//	ensemble.go     an ensemble version built (package ensemble), and what it reaches
//	bls.go          requests a model makes from inside execute (BLS)
//	modelctl.go     the model loading API of pb_utils (load_model, unload_model, is_model_ready)
//	readiness.go    a model's own is_ready(), one check at a time per instance
//	stats.go        per-model statistics (failure reasons: sched's sentinels are REJECTED)
//	metrics.go      custom metrics collected from every live stub (merged by package custommetrics)
//	sampler.go      each second: every stub's resident memory and the latency, kept five minutes
//	recycle.go      the limits of a stub's life (MAX_RSS_MB, ...) and recycling: warm replacement, drain
//	memory.go       MEMORY_LIMIT_MB: the stub confined at spawn (package memlimit), deaths it caused
//	shm.go          the client shared-memory endpoints (package clientshm)
//
// # Goroutines and who owns them
//
// No goroutine of this package reads a ring: the caller of Infer (a
// front end's goroutine) queues its request through the model's
// scheduler and waits for it (stubproc.Request.Wait), reading the stub's
// ring itself (stubproc's doc). The goroutines started here, by owner:
//
//   - Supervisor: poll (Options.ModelControl = poll; Close waits for it),
//     sampleLoop (sampler.go; Close waits for it),
//     startup loads (repository.go, joined in loadStartupModels) and
//     Close's per-model stops (joined).
//   - modelVersion: per-instance starts (joined in start), the drain
//     watcher of stop (ends when the last request does; stop waits for it
//     or the deadline) and per-instance stops (joined).
//   - instance: supervise, from the first stub's start until instance.stop;
//     it starts one stubproc.Proc.Dispatch per stub incarnation (ends with
//     the process); the initialize watcher of launch (kills the stub when
//     the instance stops during initialize; ends when initialize does).
//   - instance (recycle.go): recycle, one at a time, prepares a warm
//     replacement and hands it to supervise; retire, one per replaced
//     stub, lets it finish what it was sent and finalizes it. Both are
//     counted in instance.bg, which stop waits for after supervise.
//   - instance (ratelimit.go): one watcher per warmup execute waiting
//     for the rate limiter, which ends the wait when the stub exits or
//     the instance stops; it ends with the wait.
//   - userReadiness: run, one IsReady call at a time per instance (ends
//     when the stub answers or dies; callers stop waiting after
//     readyCheckTimeout).
//   - bls: one per InferExec message (started by the stub's reader through
//     Host.BLS) and its watcher that cancels it when the calling stub
//     exits; both end when the request ends.
//   - modelControl: one per ModelControl message (Host.Control); ends when
//     the load, unload or check does.
//   - CustomMetrics: one call per live stub, joined within the scrape.
//
// The schedulers (sched, ensemble) and the stub processes (stubproc)
// list their own goroutines.
//
// # Lock order
//
// A goroutine holding a lock may take only locks below it in this list
// (and those of the rooms, after this package's: sched's, then
// stubproc's, then clientshm's; ratelimit.Limiter.mu is a leaf, taken
// with none of them held); most are leaves, held for a few field
// updates and never across a send on a ring, a wait on a channel, or a
// call into a response's callback.
//
//  1. The lock of one model name (loadlock.go: nameLock, handed out under
//     loadLocks.mu, a leaf): serialises that model's load and unload;
//     loads of different models run at once, so a model's initialize may
//     load another (pb_utils.load_model). An ensemble's load takes the
//     locks of the composing models it loads (a cycle is refused before
//     it would lock twice).
//  2. prepMu (runtime.go): preparing interpreters and Go binaries; taken
//     under a model's load lock, never with Supervisor.mu.
//  3. Supervisor.mu (RW): the model table.
//  4. The schedulers' locks (sched: sequenceBatcher.mu, dynamicBatcher.mu).
//  5. instance.mu: the instance's stub, state and counters.
//  6. The stub processes' locks (stubproc), then clientshm.Registry.mu.
//  7. Leaves, never held while taking another: loadLocks.mu,
//     modelVersion.mu (RW; the closing flag), stats.mu, blsCalls.mu (the
//     BLS requests in flight), userReadiness.mu (one instance's readiness
//     check), the merger's mutex in CustomMetrics, and the two mutexes of
//     package cuda (its driver and each opened handle).
//     memOnce guards the choice of memory limit method (memory.go).
//  8. histories.mu (sampler.go): the version histories; taken under
//     Supervisor.mu (Stubs) and, alone, by sample, which takes
//     instance.mu and stats.mu under it.
//
// Observed nestings: a model's load lock > Supervisor.mu (load);
// Supervisor.mu > instance.mu, stubproc.Proc.mu (Ready, RepositoryIndex
// and Stubs read instance states under it); sequenceBatcher.mu >
// instance.mu (pump, reap); dynamicBatcher.mu > stubproc.Request.mu (form
// calls Gone). Finishing a request (modelVersion.Finish) takes
// stubproc.Request.mu, then, after releasing it, clientshm.Registry.mu
// (onEnd) and stats.mu, so it is never called with a scheduler's or a
// stub's lock held.
package supervisor
