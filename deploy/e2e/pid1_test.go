package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procEntry is one process of the container, from /proc/<pid>/stat.
type procEntry struct {
	pid, ppid int
	state     string
	cmdline   string
}

// procs lists the processes in the container.
func (c *container) procs(t *testing.T) map[int]procEntry {
	t.Helper()
	// One line per process: "<stat> | <cmdline>"; a process may exit
	// while the loop runs, so a missing file is skipped.
	out, err := c.exec("sh", "-c", `for d in /proc/[0-9]*; do s=$(cat $d/stat 2>/dev/null) || continue; `+
		`printf '%s | %s\n' "$s" "$(tr '\0\n' '  ' < $d/cmdline 2>/dev/null)"; done`)
	if err != nil {
		t.Fatal(err)
	}
	all := map[int]procEntry{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		stat, cmdline, _ := strings.Cut(line, " | ")
		// pid (comm) state ppid ...; comm may hold spaces.
		i := strings.LastIndexByte(stat, ')')
		pid, err := strconv.Atoi(strings.Fields(stat)[0])
		if i < 0 || err != nil {
			t.Fatalf("bad stat line %q", line)
		}
		f := strings.Fields(stat[i+1:])
		ppid, _ := strconv.Atoi(f[1])
		all[pid] = procEntry{pid: pid, ppid: ppid, state: f[0], cmdline: cmdline}
	}
	return all
}

// zombies returns the zombie processes in the container.
func (c *container) zombies(t *testing.T) []procEntry {
	var z []procEntry
	for _, p := range c.procs(t) {
		if p.state == "Z" {
			z = append(z, p)
		}
	}
	return z
}

// TestImagePID1: as PID 1 the server restarts a stub killed with SIGKILL
// inside the container, and reaps the helper process a model started once
// it outlives its stub, so no zombie is left.
func TestImagePID1(t *testing.T) {
	repo := modelRepo(t, "add_sub", "orphan_helper")
	c := runContainer(t, repo, hardened, kserveArgs)
	for _, model := range []string{"add_sub", "orphan_helper"} {
		t.Run("kill -9 the stub of "+model, func(t *testing.T) {
			pid, restarts := c.stubPID(model)
			if pid == 0 {
				t.Fatalf("%s has no ready stub", model)
			}
			var helper procEntry
			if model == "orphan_helper" {
				for _, p := range c.procs(t) {
					if strings.Contains(p.cmdline, "orphan-helper-of-stubvisor-test") {
						helper = p
					}
				}
				if helper.ppid != pid {
					t.Fatalf("the model's helper %+v is not a child of its stub %d", helper, pid)
				}
			}
			if _, err := c.exec("sh", "-c", "kill -9 "+strconv.Itoa(pid)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 60*time.Second, model+"'s stub to be restarted", func() bool {
				p, r := c.stubPID(model)
				return p != 0 && p != pid && r == restarts+1
			})
			c.waitReady(30 * time.Second)
			if model == "add_sub" {
				c.checkHTTPInfer(t)
			}
			if helper.pid != 0 {
				// The helper leaves once it is re-parented; PID 1 must reap
				// it. A zombie never goes away by itself.
				waitFor(t, 30*time.Second, fmt.Sprintf("the orphaned helper %d to be reaped", helper.pid), func() bool {
					_, alive := c.procs(t)[helper.pid]
					return !alive
				})
			}
			if z := c.zombies(t); len(z) > 0 {
				t.Errorf("zombies in the container: %+v", z)
			}
		})
	}
}

// TestImageOrphanWithoutInit is the control of TestImagePID1: with the
// init switched off (the server itself is PID 1), the orphaned helper
// stays a zombie, so the check above can see one.
func TestImageOrphanWithoutInit(t *testing.T) {
	repo := modelRepo(t, "orphan_helper")
	c := runContainer(t, repo, append([]string{"--env=STUBVISOR_INIT_CHILD=1"}, hardened...), kserveArgs)
	pid, _ := c.stubPID("orphan_helper")
	var helper procEntry
	for _, p := range c.procs(t) {
		if strings.Contains(p.cmdline, "orphan-helper-of-stubvisor-test") {
			helper = p
		}
	}
	if pid == 0 || helper.ppid != pid {
		t.Fatalf("stub %d, helper %+v", pid, helper)
	}
	if _, err := c.exec("sh", "-c", "kill -9 "+strconv.Itoa(pid)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, fmt.Sprintf("the orphaned helper %d to become a zombie of PID 1", helper.pid), func() bool {
		p := c.procs(t)[helper.pid]
		return p.state == "Z" && p.ppid == 1
	})
}
