package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// New chooses the best method available to this process: cgroup v2 when
// its own cgroup (read from /proc/self) lets it create children with the
// memory controller, else RLIMIT_DATA. prefer, when not empty, forces a
// method (RlimitAS, or RlimitData to skip cgroups); New fails if CgroupV2
// is preferred and unavailable.
func New(prefer Method) (*Limiter, error) {
	switch prefer {
	case RlimitData, RlimitAS:
		return &Limiter{method: prefer, why: "chosen"}, nil
	case "", CgroupV2:
	default:
		return nil, fmt.Errorf("memlimit: unknown method %q", prefer)
	}
	dir, err := ownCgroupDir("/proc/self/mountinfo", "/proc/self/cgroup")
	if err == nil {
		var parent string
		if parent, err = delegate(dir); err == nil {
			return &Limiter{method: CgroupV2, why: "cgroup " + parent + " has the memory controller", parent: parent}, nil
		}
	}
	if prefer == CgroupV2 {
		return nil, fmt.Errorf("memlimit: cgroup v2: %w", err)
	}
	return &Limiter{method: RlimitData, why: "no cgroup v2 memory controller to use: " + err.Error()}, nil
}

// ownCgroupDir returns the directory of this process's cgroup v2: the
// cgroup2 mount point plus the path in /proc/self/cgroup's "0::" line.
func ownCgroupDir(mountinfo, cgroup string) (string, error) {
	b, err := os.ReadFile(cgroup)
	if err != nil {
		return "", err
	}
	path := ""
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			path = rest
		}
	}
	if path == "" {
		return "", errors.New("the process is in no cgroup v2 hierarchy")
	}
	mount, err := cgroup2Mount(mountinfo)
	if err != nil {
		return "", err
	}
	return filepath.Join(mount, path), nil
}

// cgroup2Mount finds the cgroup2 mount point in a mountinfo file (fields:
// id parent major:minor root mountpoint options ... - fstype source opts).
func cgroup2Mount(mountinfo string) (string, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		if fs := strings.Fields(post); len(fs) > 0 && fs[0] == "cgroup2" {
			if f := strings.Fields(pre); len(f) >= 5 {
				return f[4], nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("no cgroup2 file system is mounted")
}

// delegate returns a cgroup under which children get the memory
// controller: dir itself when its subtree already has it or it can be
// enabled; when dir holds this process alone (so the no-internal-process
// rule forbids enabling it), the process first moves to a "server" leaf
// of dir.
func delegate(dir string) (string, error) {
	ctrl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return "", err
	}
	if !hasWord(ctrl, "memory") {
		return "", fmt.Errorf("the memory controller is not available in %s", dir)
	}
	sub := filepath.Join(dir, "cgroup.subtree_control")
	if b, err := os.ReadFile(sub); err == nil && hasWord(b, "memory") {
		return dir, nil
	}
	err = os.WriteFile(sub, []byte("+memory"), 0)
	if err == nil {
		return dir, nil
	}
	if !errors.Is(err, syscall.EBUSY) {
		return "", fmt.Errorf("enable memory in %s: %w", sub, err)
	}
	procs, rerr := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if rerr != nil || strings.TrimSpace(string(procs)) != strconv.Itoa(os.Getpid()) {
		return "", fmt.Errorf("enable memory in %s: other processes share the cgroup: %w", sub, err)
	}
	leaf := filepath.Join(dir, "server")
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return "", fmt.Errorf("move the server to %s: %w", leaf, err)
	}
	if err := os.WriteFile(sub, []byte("+memory"), 0); err != nil {
		return "", fmt.Errorf("enable memory in %s: %w", sub, err)
	}
	return dir, nil
}

func hasWord(b []byte, w string) bool {
	for _, f := range bytes.Fields(b) {
		if string(f) == w {
			return true
		}
	}
	return false
}

// Prepare makes a limit of n bytes for the stub named name. With cgroup
// v2 it creates the stub's cgroup now, so the stub starts inside it (see
// SysProcAttr).
func (l *Limiter) Prepare(name string, n uint64) (*Limit, error) {
	lim := &Limit{l: l, bytes: n, fd: -1}
	if l.method != CgroupV2 {
		return lim, nil
	}
	dir := filepath.Join(l.parent, fmt.Sprintf("stub-%s-%d-%d", name, os.Getpid(), atomic.AddUint64(&l.seq, 1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("memlimit: %w", err)
	}
	lim.dir = dir
	if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.FormatUint(n, 10)), 0); err != nil {
		lim.Close()
		return nil, fmt.Errorf("memlimit: %w", err)
	}
	// Without swap the limit is what the stub can use; a host without
	// swap accounting has no such file.
	_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		lim.Close()
		return nil, fmt.Errorf("memlimit: open %s: %w", dir, err)
	}
	lim.fd = fd
	return lim, nil
}

// SysProcAttr makes the process start in the limit's cgroup (clone3 with
// CLONE_INTO_CGROUP), so not one allocation of it escapes the limit.
func (lim *Limit) SysProcAttr(a *syscall.SysProcAttr) {
	if lim.fd >= 0 {
		a.UseCgroupFD, a.CgroupFD = true, lim.fd
	}
}

// Env is what the stub's environment needs: the rlimit it runs under, so
// that the Python stub exits with ExitOverLimit on a MemoryError.
func (lim *Limit) Env() []string {
	if lim.l.method == CgroupV2 {
		return nil
	}
	return []string{EnvRlimit + "=" + strconv.FormatUint(lim.bytes, 10)}
}

// Started applies an rlimit to the started process pid. It runs before
// the stub is sent its model (the stub loads it on initialize), so the
// model's code never runs without it.
func (lim *Limit) Started(pid int) error {
	if lim.fd >= 0 {
		unix.Close(lim.fd)
		lim.fd = -1
	}
	res := map[Method]int{RlimitData: unix.RLIMIT_DATA, RlimitAS: unix.RLIMIT_AS}
	r, ok := res[lim.l.method]
	if !ok {
		return nil
	}
	rl := unix.Rlimit{Cur: lim.bytes, Max: lim.bytes}
	if err := unix.Prlimit(pid, r, &rl, nil); err != nil {
		return fmt.Errorf("memlimit: prlimit %s on %d: %w", lim.l.method, pid, err)
	}
	return nil
}

// OverLimit reports whether the stub, which exited with status ws, died
// for its limit: the cgroup counted an OOM kill, or the stub exited with
// ExitOverLimit under an rlimit.
func (lim *Limit) OverLimit(ws syscall.WaitStatus) bool {
	if lim.l.method != CgroupV2 {
		return ws.Exited() && ws.ExitStatus() == ExitOverLimit
	}
	return ws.Signaled() && oomKills(filepath.Join(lim.dir, "memory.events")) > 0
}

// oomKills reads the oom_kill count of a memory.events file.
func oomKills(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// Close removes the stub's cgroup; call it once the stub is reaped. It is
// idempotent.
func (lim *Limit) Close() {
	if lim.fd >= 0 {
		unix.Close(lim.fd)
		lim.fd = -1
	}
	if lim.dir != "" {
		_ = os.Remove(lim.dir)
		lim.dir = ""
	}
}
