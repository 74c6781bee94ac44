// Package shmtest checks that a test leaves nothing behind: no goroutine,
// no file descriptor, no child process and no /dev/shm entry more than it
// found. Tests of code that maps shared memory and starts stubs call
// NoLeaks first thing, so every resource they make must be released by
// their own cleanups (which run before the check).
package shmtest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Settle bounds how long NoLeaks waits for goroutines and processes that
// are already on their way out (a reaper returning, a child being reaped).
const Settle = 5 * time.Second

var startPoller sync.Once

// Snapshot is what a process holds at one moment.
type Snapshot struct {
	Goroutines int
	FDs        []string // "fd -> target"
	Children   []string // pids
	DevShm     []string // names
}

// Take records the current goroutines, descriptors, children and /dev/shm
// entries.
func Take() Snapshot {
	return Snapshot{
		Goroutines: runtime.NumGoroutine(),
		FDs:        fds(),
		Children:   children(),
		DevShm:     devShm(),
	}
}

// NoLeaks takes a snapshot now and registers a cleanup that fails the test
// when, after every cleanup registered later has run, the process holds
// more than it did. Call it before creating anything.
func NoLeaks(t testing.TB) {
	t.Helper()
	startPoller.Do(func() {
		// The runtime opens its poller's descriptors (an epoll and an
		// eventfd) the first time any file is polled and keeps them for
		// the life of the process; open them before the first snapshot
		// so they are not mistaken for a leak of the first test that
		// starts a process.
		if r, w, err := os.Pipe(); err == nil {
			r.Close()
			w.Close()
		}
	})
	before := Take()
	t.Cleanup(func() {
		t.Helper()
		var after Snapshot
		deadline := time.Now().Add(Settle)
		for {
			after = Take()
			if after.Goroutines <= before.Goroutines && len(extra(before.Children, after.Children)) == 0 || time.Now().After(deadline) {
				break
			}
			// Exiting goroutines and reaped children need the scheduler,
			// not a timer: yield until they are gone or the bound passes.
			runtime.Gosched()
		}
		if after.Goroutines > before.Goroutines {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("leaked goroutines: %d before, %d after\n%s", before.Goroutines, after.Goroutines, buf)
		}
		if x := extra(before.FDs, after.FDs); len(x) > 0 {
			t.Errorf("leaked file descriptors: %s", strings.Join(x, ", "))
		}
		if x := extra(before.Children, after.Children); len(x) > 0 {
			t.Errorf("leaked child processes: %s", strings.Join(x, ", "))
		}
		if x := extra(before.DevShm, after.DevShm); len(x) > 0 {
			t.Errorf("left in /dev/shm: %s", strings.Join(x, ", "))
		}
	})
}

func extra(before, after []string) []string {
	var x []string
	for _, a := range after {
		if !slices.Contains(before, a) {
			x = append(x, a)
		}
	}
	return x
}

// dirNames lists dir, each name as keep turns it, leaving out those keep
// refuses.
func dirNames(dir string, keep func(name string) (string, bool)) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if s, ok := keep(e.Name()); ok {
			out = append(out, s)
		}
	}
	return out
}

func fds() []string {
	return dirNames("/proc/self/fd", func(fd string) (string, bool) {
		// An error: the descriptor ReadDir itself used, closed by now.
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd))
		return fd + " -> " + target, err == nil
	})
}

func children() []string {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	var out []string
	for _, task := range tasks {
		if b, err := os.ReadFile(task); err == nil {
			out = append(out, extra(out, strings.Fields(string(b)))...)
		}
	}
	return out
}

func devShm() []string {
	// The end-to-end shared memory tests (another package, which go test
	// may run at the same time) create client regions under this prefix
	// and remove them in their own cleanups.
	return dirNames("/dev/shm", func(name string) (string, bool) {
		return name, !strings.HasPrefix(name, ClientRegionPrefix)
	})
}

// ClientRegionPrefix names the /dev/shm objects that tests create on
// purpose as client shared-memory regions; the leak check ignores them.
const ClientRegionPrefix = "e2e-client-"

// String summarises a snapshot for failure messages.
func (s Snapshot) String() string {
	return fmt.Sprintf("%d goroutines, %d fds, children %v, /dev/shm %v", s.Goroutines, len(s.FDs), s.Children, s.DevShm)
}
