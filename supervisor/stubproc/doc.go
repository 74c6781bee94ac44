// Package stubproc runs one stub process and speaks to it: spawn and
// handshake, the request exchange over the shared-memory rings, the ring
// reader, the responses built from the stub's, the client regions the stub
// maps, the watchdog and the reaper. It owns every request's exchange
// state (Request, Batch): schedulers fill a Batch's Items and read a
// Request through its methods; only this package writes the rest.
//
// The way up is Host, handed over at Spawn: a process never reaches the
// instance, the model or the supervisor by any other path.
//
// # Files, one job each
//
//	doc.go          this description
//	host.go         Host (the way up) and Config (what a stub is spawned with)
//	proc.go         Proc: one stub process's life (spawn, reap, kill, watch, retire, stop)
//	exchange.go     the request table: Call, Execute, executeDone, deliver, releases
//	reader.go       the ring reader: read, readFor, drain, handle
//	cpugauge.go     whether the stub waits for a CPU when woken: how long a reader polls for a reply
//	cpugauge_linux.go its figures from /proc/<pid>/schedstat (cpugauge_other.go elsewhere)
//	spare.go        whether the machine has a CPU to spare: how long a stub polls for its next message
//	spare_linux.go  its own figures from getrusage, the cgroup's CPU quota and the CPU affinity (spare_other.go elsewhere); the machine's idle time and the stubs' CPU from procstat
//	request.go      Request: one request until its final response; Batch
//	gate.go         Config.Gate (the rate limiter): the dispatcher that waits for a grant before each execute
//	response.go     a stub's response turned into the front end's
//	staged.go       StageInputs: arena blocks lent to a front end to read inputs into
//	classify.go     the classification extension (labels, top-k)
//	bls.go          the stub's side of BLS and of the model loading API
//	workers.go      the goroutines that serve BLS calls, kept with their grown stacks
//	stubshm.go      client regions as one stub sees them (lifeline, MapRegion)
//	logs.go         stub stdout/stderr and Log messages into the logger
//	launch_linux.go the launcher thread that forks stubs (launch_other.go elsewhere)
//	lifeline_linux.go the lifeline socket and SCM_RIGHTS (lifeline_other.go elsewhere)
//	policy.go       CPUPolicy: how the supervisor and its stubs compete for the CPU
//	policy_linux.go SetCPUPolicy (policy_other.go elsewhere)
//
// # Goroutines and who owns them
//
// No goroutine belongs to the ring. The caller of a request (a front
// end's goroutine) usually sends its own Execute (a free pipeline slot)
// and then reads the stub's ring itself until its answer arrives,
// handling every message it finds for anyone (Proc.read; one reader at a
// time, by the Proc.lead token). When the answer frees a slot, that
// reader also sends the next queued batch (Proc.next). Started here:
//
//   - Launcher: its thread's goroutine, from NewLauncher until Stop.
//   - Proc (one incarnation), from Spawn: reap (until the process is
//     reaped and its requests failed), two forwardLines (stdout, stderr;
//     reap waits for them, or closes the pipes after pipeGrace), watch (the
//     watchdog, until the process exits: every 50 ms while the stub has
//     work and for a second after, so what it sends once no caller reads
//     is read at once; once a heartbeat period on a grid shared by all
//     stubs while it is idle, until the next Execute kicks it).
//   - Dispatch, started by the Host's owner once per incarnation, feeds
//     queued batches into free slots until the process exits; with a
//     Config.Gate it waits for each batch's grant first (gate.go), and
//     only it sends then (a reader that frees a slot hands it back).
//   - Request: readFor, started by Wait when its caller gives up while the
//     stub still owes it a reply; it reads in its place until the request
//     ends or the stub dies. Wait also cancels on a goroutine of its own
//     (Cancel sends one message).
//   - reader: Host.Control runs on a goroutine of its own, started per
//     ModelControl message. Host.BLS runs on the reader that found the
//     InferExec when that reader waits for a request of its own, nothing
//     streams and the callee is no ensemble (read gives the lead back
//     first, and the call goes on on a goroutine of its own if that
//     request gives up); otherwise on a goroutine of its own. The Host
//     ends them.
//
// # Lock order
//
// A goroutine holding a lock may take only locks below it; all are held
// for a few field updates and never across a wait on a channel or a
// response's callback.
//
//  1. Proc.relMu: output blocks waiting to be handed back.
//  2. Request.reqMu: the package's use of a request its caller may leave
//     (prepare, building a response; Request.hold); held across copying
//     inputs and, on error paths, a Release sent to the stub.
//  3. Proc.sendMu: taking a batch id and sending the batch, one step (so
//     ids follow the ring's order); held across the Send.
//  4. Proc.mu: the request table (batches, requests, calls, refs).
//  5. Request.mu: one request's end (Respond runs the stream callback and
//     onEnd after unlocking).
//  6. stubShm.mu: one stub's mapped client regions, then the registry's
//     lock (clientshm.Registry.mu, a leaf).
//  7. cpuGauge.mu: the last sample of the stub's run delay, taken with
//     TryLock by a reader about to poll (a leaf).
//  8. spareGauge.mu: the live stubs and the last sample of the
//     machine's CPU time; taken with TryLock before an Execute's send, and
//     by Spawn and the reaper.
//  9. spareGauge.holdMu: which stub holds the longer poll (a leaf).
//
// Observed nestings: relMu > Proc.mu (releaseLater calls Busy); stubShm.mu
// > clientshm.Registry.mu (ensureMapped); spareGauge.mu >
// spareGauge.holdMu (a sample that finds no CPU spare takes the longer
// poll back). Host.Finish, Config.Gate and its Grants are called with none
// of these held.
package stubproc
