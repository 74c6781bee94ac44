package pyenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Interpreter is what a check found out about an interpreter.
type Interpreter struct {
	Path    string
	Version string // "3.11.2"
	Numpy   string // numpy.__version__
	// Took is how long the check ran the interpreter (0 when a check of
	// the same file had passed before).
	Took time.Duration
}

type probeKey struct {
	path        string
	size, mtime int64
}

// probe is written for any Python, 2 included, so that a wrong
// interpreter still answers with its version.
const probe = `import sys
v = sys.version_info
sys.stdout.write("python %d.%d.%d\n" % (v[0], v[1], v[2]))
sys.stdout.flush()
try:
    import numpy
    sys.stdout.write("numpy %s\n" % numpy.__version__)
except Exception as e:
    sys.stdout.write("numpy-error %s: %s\n" % (type(e).__name__, e))
`

// probeTimeout bounds one check; a cold environment on a slow disk may
// take seconds to import numpy.
const probeTimeout = 2 * time.Minute

// Check runs python (with env added to this process's environment) to
// read its version and import numpy, failing with
// ErrInterpreter and what is wrong: it does not run, it is older than
// MinPython, or numpy does not import. A pass is remembered for the same
// file (path, size, modification time) for the life of the Cache; a
// failure is not, so a fixed environment is seen at the next load.
func (c *Cache) Check(python string, env ...string) (Interpreter, error) {
	key := probeKey{path: python}
	if info, err := os.Stat(python); err == nil {
		key.size, key.mtime = info.Size(), info.ModTime().UnixNano()
	}
	c.mu.Lock()
	known, ok := c.probed[key]
	c.mu.Unlock()
	if ok {
		known.Took = 0
		return known, nil
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", probe)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	it := Interpreter{Path: python, Took: time.Since(start)}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "python "); ok {
			it.Version = v
		}
		if v, ok := strings.CutPrefix(line, "numpy "); ok {
			it.Numpy = v
		}
		if v, ok := strings.CutPrefix(line, "numpy-error "); ok {
			return it, fmt.Errorf("%w: %s (Python %s) cannot import numpy, which the Python stub needs: %s", ErrInterpreter, python, it.Version, v)
		}
	}
	if it.Version == "" {
		detail := strings.TrimSpace(stderr.String())
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			detail = "no answer within " + probeTimeout.String()
		} else if detail == "" && err != nil {
			detail = err.Error()
		}
		return it, fmt.Errorf("%w: %s does not run: %s", ErrInterpreter, python, detail)
	}
	if !atLeast(it.Version, MinPython) {
		return it, fmt.Errorf("%w: %s is Python %s; the Python stub needs Python %d.%d or newer", ErrInterpreter, python, it.Version, MinPython[0], MinPython[1])
	}
	if it.Numpy == "" {
		return it, fmt.Errorf("%w: %s (Python %s) did not report numpy: %s", ErrInterpreter, python, it.Version, strings.TrimSpace(stderr.String()))
	}
	c.mu.Lock()
	c.probed[key] = it
	c.mu.Unlock()
	return it, nil
}

// atLeast reports whether version "X.Y.Z" is at least min.
func atLeast(version string, min [2]int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return major > min[0] || major == min[0] && minor >= min[1]
}
