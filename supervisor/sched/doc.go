// Package sched holds the schedulers of a model version: the default one
// (one execute per request), Triton's dynamic batcher and its sequence
// batcher. They stand behind Scheduler, as Triton core's do, and reach
// their model only through Dispatch: a stub that takes a batch now
// (Take), the model queue, each instance's direct queue, and Finish. They
// never touch a stub's transport, nor a request's exchange state (package
// stubproc owns both).
//
// # Files, one job each
//
//	doc.go          this description
//	scheduler.go    Scheduler, Dispatch, New, the default scheduler, the pipeline depth rule
//	batcher.go      the dynamic batcher; batchRule, shared with the sequence batcher
//	sequence.go     the sequence batcher: lanes, slots, backlog, fillers, iterative sequences
//	seqcontrol.go   a sequence's key and the control inputs it adds (START, END, READY, CORRID)
//
// # Goroutines and who owns them
//
//   - dynamicBatcher: run, from New until Stop (Stop waits for it).
//   - sequenceBatcher: reap (idle and dead sequences), from New until
//     Stop; one await per batch handed to an instance, until each of its
//     requests ended or was handed back (or Stop); a lane's timer
//     (time.AfterFunc) pumps the lane when a held batch's delay ends, and
//     does nothing once stopped. Stop closes stopc and waits for reap and
//     every await.
//   - sequenceBatcher.lose fails a lost sequence's waiting requests on a
//     goroutine each (Finish is not called under the batcher's lock);
//     each ends with its Finish.
//
// # Lock order
//
//  1. sequenceBatcher.mu or dynamicBatcher.mu: their queues; a leaf but
//     for what Dispatch and the instances take under it (the instance's
//     lock, to read its stub; Request.mu, through Request.Gone).
//
// Neither lock is held across Finish, a send on the model queue, or a
// wait; the send on a direct queue under sequenceBatcher.mu never blocks
// (the queue holds far more than a lane's pipeline depth).
package sched
