package main

import "golang.org/x/sys/unix"

// protectProcess makes the server process non-dumpable. Stubs run model
// code under the server's user; a dumpable server would let that code
// open /proc/<server>/fd/* (every stub's shared-memory region, the
// listeners) and read /proc/<server>/mem or ptrace it (the TLS private
// keys the server holds). Non-dumpable, those need CAP_SYS_PTRACE. Stubs
// are exec'd, which makes them dumpable again: this covers the server
// only. It also turns off core dumps of the server.
func protectProcess() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
