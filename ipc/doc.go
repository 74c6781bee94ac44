// Package ipc is the wire between the supervisor and one stub process: a
// control block and two single-producer/single-consumer rings inside the
// stub's shared-memory region (package shmpool), and the msgpack messages
// that travel on them. The Python stub (python/stubvisor/ipc.py) speaks
// exactly this protocol; TestConstantsMatchPython fails when the two drift.
//
// # Region layout
//
// One region per stub: a memfd created by the supervisor and inherited by
// the stub as fd 3, so no crash of either side can leave a name in
// /dev/shm. Both sides map the whole reserved size once (MAP_SHARED |
// MAP_NORESERVE); the file grows with fallocate (which never shrinks it, so
// two owners growing at once cannot race) and a mapping never moves, so
// growth never invalidates a view the peer holds. Only offsets cross the
// boundary; every offset and length read from the peer is bounds-checked.
//
//	offset        size         contents                      written by
//	0x0000        256          header                        supervisor, once, before exec
//	0x0100        3840         control block                 (per word, below)
//	0x1000        256          ring 0 indices (sup -> stub)  head: stub, tail: supervisor
//	0x1100        ring_bytes   ring 0 data                   supervisor
//	r1            256          ring 1 indices (stub -> sup)  head: supervisor, tail: stub
//	r1+0x100      ring_bytes   ring 1 data                   stub
//	a0            arena_max    arena 0 (supervisor-owned)    supervisor
//	a1            arena_max    arena 1 (stub-owned)          stub
//
// r1, a0 and a1 are 4 KiB aligned and recorded in the header.
//
// # Header (little-endian)
//
//	+0   u64 magic        "STUBVSR\x00" (0x0052535642555453)
//	+8   u32 version      ProtocolVersion
//	+12  u32 flags        reserved, 0
//	+16  u64 region_size  reserved bytes (the mapping length)
//	+24  u64 ring0_off    +32 u64 ring1_off
//	+40  u32 ring_bytes   data bytes per ring (power of two)
//	+44  u32 spin_ns      how long a waiter polls before it sleeps
//	+48  u64 arena0_off   +56 u64 arena1_off
//	+64  u64 arena_max    bytes reserved per arena (the pool maximum)
//	+72  u64 arena_default  bytes committed at start per arena
//	+80  u64 arena_growth   growth step
//
// The protocol parameters live here, never in per-process flags: a stub
// validates magic and version at attach and uses the geometry it finds.
//
// # Control block (each word on its own 64-byte line)
//
//	0x100 u32 dead             supervisor: 1 once the stub is known dead or the
//	                           region is being torn down; every waiter checks it
//	0x140 u32 stub_pid         stub, at attach
//	0x180 u64 sup_heartbeat    supervisor, incremented while it runs
//	0x1c0 u64 stub_heartbeat   stub heartbeat thread, incremented every 100 ms
//	0x200 u64 x3 arena0 usage  supervisor: committed, in_use, high_water
//	0x240 u64 x3 arena1 usage  stub: committed, in_use, high_water
//	0x280 u32 msg_poll_ns      supervisor: how long the stub may poll for its next
//	                           message while a CPU is spare (0: the header's spin)
//
// # Rings
//
// Ring indices (each on its own 64-byte line):
//
//	+0   u64 tail             producer: bytes ever written
//	+64  u64 head             consumer: bytes ever consumed
//	+128 u32 reader_sleeping  consumer: 1 while it sleeps (or is about to)
//	+192 u32 writer_sleeping  producer: 1 while it waits for space
//
// Data is a byte ring of frames. A frame is a u32 length followed by that
// many payload bytes, padded so the next frame starts 8-byte aligned. A
// frame never wraps: when the contiguous room left before the end is too
// small, the producer writes the length 0xFFFFFFFF (a wrap marker; frames
// are 8-aligned, so it always fits) and continues at offset 0. A frame,
// length word included, is at most ring_bytes/2 (MaxPayload), so a frame
// that must wrap still fits once the ring has drained; a larger message is
// refused (ErrFrameTooLarge): bulk data goes in an arena. The reader checks
// every length and index it reads against the ring before using it.
//
// Wake-up is conditional (a Dekker handshake): the consumer stores
// reader_sleeping=1 with a full fence, re-checks tail, then FUTEX_WAITs on
// the low 32 bits of tail. The producer stores tail with a full fence and
// FUTEX_WAKEs only if reader_sleeping is 1. Before sleeping, each side
// may poll, so a quick answer costs no system call: for at most spin_ns
// (the supervisor's wait for the reply to its one outstanding execute: a
// few times that, RecvSpin), and only as long as polling has been paying
// (spin.go; the Python stub does the same): the budget follows the
// waiter's recent waits and drops to zero when the poller finds itself
// preempted, and the Go side then sleeps at once for a few waits, more
// after each further preemption, so on a contended CPU waiters sleep
// instead of taking the slices the peer needs. No side calls sched_yield. Space waits are symmetric on head/writer_sleeping.
// Every sleep is a bounded slice after which the waiter re-checks dead
// (and, in the stub, whether its parent is still the supervisor): 20 ms
// for a wait with a deadline, 250 ms for one without (an idle stub waiting
// for its next command: four wake-ups a second instead of fifty), so a
// blocked call returns within half a second of the peer's death even if
// no one wakes it (a stub also has Pdeathsig). The supervisor's
// reaper sets dead and wakes every futex word when a stub exits.
//
// # Messages
//
// A frame payload is one msgpack array whose first element is the message
// kind and whose second is an id (0 when unused). Only small tensors'
// bytes travel in a message (LocInline); a tensor is described by
//
//	[name str, dtype int (backendapi.DataType), shape [int], loc int, offset int, size int]
//
// where loc is LocArena0 (supervisor arena), LocArena1 (stub arena),
// LocNone (zero bytes) or LocInline (the bytes themselves follow as a 7th
// element: stubs send tensors of at most InlineMax bytes so, and the
// supervisor an Execute's inputs of at most InlineMax bytes, for which an
// arena block costs more than the copy); offset is relative to the arena
// start (LocClient
// and LocCUDA, client shared memory and client CUDA memory, and their extra
// element are described in messages.go). The messages, by
// kind, are defined in messages.go; the Go codec (codec.go) is written by
// hand for them, and readers skip array elements they do not know.
//
// # Arenas
//
// Each arena belongs to one side, which alone allocates and frees in it
// (package shmpool: first fit, 64-byte blocks, bookkeeping in the owner's
// memory). The owner commits default bytes at start and grows by at least
// the growth step, up to arena_max, with fallocate; it publishes committed,
// in-use and high-water bytes in its usage words, which the peer reads for
// its status and uses to bound-check the offsets it receives.
package ipc
