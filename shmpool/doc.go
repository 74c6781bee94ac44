// Package shmpool is the shared memory behind one stub: a memfd region that
// both processes map once at its full reserved size, and the per-owner
// arenas inside it that carry tensor bytes.
//
// Why a memfd: it has no name, so no crash of either side can leave an
// entry in /dev/shm, it is not bound by the size of the /dev/shm mount, and
// it is handed to the stub as an inherited file descriptor. It is sealed
// against shrinking (F_SEAL_SHRINK), so neither side can pull pages from
// under the other's mapping.
//
// Why one mapping at the full reserved size (MAP_SHARED|MAP_NORESERVE):
// the mapping never moves, so growth never invalidates a slice the peer
// holds. Growth is fallocate on the file, which only ever extends it, so two
// owners growing their arenas at the same time cannot race each other into
// a smaller file.
//
// Why per-owner arenas: only the owner allocates in and frees from its
// arena, and the allocator's bookkeeping lives in the owner's own memory,
// never in the shared region. A peer that dies or misbehaves therefore
// cannot corrupt the other side's allocator, and no cross-process lock is
// ever needed. The owner publishes its usage figures (committed, in use,
// high water) in three words of the region so that the peer can report
// them and bound-check the offsets it receives.
//
// Every offset and length that arrives from the peer is checked against the
// arena's reservation, the arena's published committed size and the file's
// real size before it is turned into a slice, so a bad offset is an error
// rather than a SIGBUS or a read of someone else's bytes.
package shmpool
