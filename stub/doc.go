// Package stub is the Go side of a stub process, and the one package a
// Go-native model is written against: the model implements Model (and
// optionally ReadyChecker), reads its ModelRequests and answers with
// ModelResponses (model.go), and its main calls stub.Serve(model) so the
// supervisor can run it exactly like a Python model. Data types and error
// codes are backendapi's (DataType, Errorf), the same the front ends use.
//
// It speaks the protocol of package ipc, as python/stubvisor/host.py does
// for Python models:
//
//   - it attaches the region the supervisor passed as fd 3, says Hello and
//     beats the heartbeat word every 100 ms from its own goroutine;
//   - it drops SIGINT and SIGTERM (caught, not ignored, so programs the
//     model starts do not inherit them ignored): the supervisor owns the life cycle
//     (Finalize, then SIGKILL), and a terminal's Ctrl-C must not kill a
//     stub before the supervisor has drained it;
//   - it serves Initialize, Execute, AutoComplete and Finalize on the main
//     goroutine, one at a time, and Release, Cancel and IsReady (on a
//     goroutine of its own, so a slow IsReady holds up no Execute) as they
//     arrive;
//   - it exits as soon as the supervisor is gone (ipc.ErrPeerDead), so an
//     orphaned stub never lingers.
//
// Reading design. The goroutine that serves commands reads the ring itself
// while idle; a goroutine hand-off per message would cost more than the
// whole round trip. While Execute runs, nobody reads, so a model that asks
// ModelRequest.Cancelled "pumps": it drains the ring without waiting,
// handles Release and Cancel on the spot and queues commands for the main
// goroutine. A reader lock keeps Recv to one caller.
//
// Memory. Inputs are zero-copy views of the supervisor's arena. Outputs
// are allocated in the stub's arena by ModelRequest.Output and filled in
// place; the supervisor hands them back with Release. Only blocks this
// stub handed out are ever freed, so a stray or repeated Release cannot
// free a live block.
//
// Client shared memory. Tensors a client placed in a registered system
// shared-memory region never enter the arenas: the stub maps the region
// (its fd arrives on the lifeline, fd 4, ahead of MapRegion), inputs are
// views of it, and ModelRequest.Output returns the client's own bytes for
// an output the client asked for there (see clientshm.go).
//
// Crashes. A panic in the model is not recovered: like a segfault in a
// Python extension it kills the process (after a Log message and Go's
// usual trace on stderr, which the supervisor logs), and the supervisor
// fails the batch and restarts the stub. Recovering would leave a model
// in an unknown state serving traffic.
package stub
