"""Client shared-memory regions mapped into this stub.

The supervisor never copies a tensor that a client placed in a registered
shared-memory region. The first time a request uses a region, the
supervisor sends the region's fd over the lifeline socket (fd 4, SCM_RIGHTS,
payload: the region id) and then a MapRegion message on the ring; ring
order guarantees the fd is already queued when MapRegion is read. Tensors
in the region arrive with loc LOC_CLIENT and their region id; inputs are
zero-copy views, and outputs the client asked for in a region are written
straight into it.

Unmapping is lazy by necessity: a numpy array may still view the region
when UnmapRegion arrives, so the mapping is closed only once nothing
exports it (mmap refuses to close while views exist); until then it is
parked and retried. A stub therefore never touches freed memory.
"""

import mmap
import os
import socket
import struct

from . import ipc

LIFELINE_FD = ipc.LIFELINE_FD
_PAGE = mmap.PAGESIZE


class _Region:
    __slots__ = ("mm", "view", "size")

    def __init__(self, mm, view, size):
        self.mm = mm
        self.view = view
        self.size = size


def checked_region(regions, what, region_id, offset, size):
    """The region of regions (id -> object with .size) that [offset,
    offset+size) lies in; ValueError naming what kind of memory it is
    when the region is not mapped or the range leaves it."""
    region = regions.get(region_id)
    if region is None:
        raise ValueError("%s shared memory region %d is not mapped in this stub" % (what, region_id))
    if offset < 0 or size < 0 or offset + size > region.size:
        raise ValueError("%s shared memory [%d, +%d) outside the region's %d bytes" % (what, offset, size, region.size))
    return region


class ClientRegions:
    """The regions the supervisor asked this stub to map, by region id."""

    def __init__(self, lifeline_fd=LIFELINE_FD):
        self._fd = lifeline_fd
        self._sock = None
        self._regions = {}
        self._parked = []

    def _lifeline(self):
        if self._sock is None:
            self._sock = socket.socket(fileno=self._fd)
        return self._sock

    def map(self, region_id, offset, size):
        """Handle MapRegion: take the fd queued on the lifeline and map
        [offset, offset+size) of it."""
        data, fds, _, _ = socket.recv_fds(self._lifeline(), 64, 4)
        if not fds:
            raise ipc.ProtocolError("MapRegion %d: no fd on the lifeline" % region_id)
        fd = fds[0]
        for extra in fds[1:]:
            os.close(extra)
        try:
            if len(data) != 8 or struct.unpack("<Q", data)[0] != region_id:
                raise ipc.ProtocolError("MapRegion %d: the lifeline carried another region" % region_id)
            if size == 0:
                mm, view = None, memoryview(b"")
            else:
                base = offset - offset % _PAGE
                delta = offset - base
                mm = mmap.mmap(fd, delta + size, flags=mmap.MAP_SHARED,
                               prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=base)
                view = memoryview(mm)[delta:delta + size]
        finally:
            os.close(fd)
        old = self._regions.pop(region_id, None)
        if old is not None:
            self._park(old)
        self._regions[region_id] = _Region(mm, view, size)
        self._retry()

    def unmap(self, region_id):
        """Handle UnmapRegion: close the mapping once nothing views it."""
        region = self._regions.pop(region_id, None)
        if region is not None:
            self._park(region)
        self._retry()

    def _park(self, region):
        region.view.release()
        region.view = None
        if region.mm is not None:
            self._parked.append(region.mm)

    def _retry(self):
        still = []
        for mm in self._parked:
            try:
                mm.close()
            except BufferError:
                still.append(mm)  # a numpy array still views it
        self._parked = still

    def view(self, region_id, offset, size):
        """A writable view of size bytes at offset in a mapped region."""
        region = checked_region(self._regions, "client", region_id, offset, size)
        return region.view[offset:offset + size]

    def mapped(self):
        """The ids of the regions mapped now (for tests)."""
        return sorted(self._regions)
