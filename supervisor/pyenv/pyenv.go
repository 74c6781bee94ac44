// Package pyenv prepares the Python environment a model runs in
// (EXECUTION_ENV_PATH) and checks its interpreter before a stub starts.
//
// A packed environment (.tar.gz, .tgz or .tar, as conda-pack writes them)
// is unpacked once per content hash into the cache directory and reused by
// every model, load, restart and server that names the same bytes. The
// unpack goes to a temporary directory renamed into place, so a crash
// leaves no half-unpacked environment and two servers sharing a cache
// directory never see each other's partial work. Hashing a large archive
// takes seconds, so the hash is remembered per (path, size, modification
// time, inode) in an index beside the environments.
package pyenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Errors, wrapped with the detail.
var (
	// ErrEnv: the environment cannot be used (missing, unreadable, a bad
	// archive, no bin/python3).
	ErrEnv = errors.New("execution environment")
	// ErrInterpreter: the interpreter does not run, is too old, or lacks
	// numpy.
	ErrInterpreter = errors.New("python interpreter")
)

// MinPython is the oldest Python the stub supports.
var MinPython = [2]int{3, 8}

// Env is a prepared environment.
type Env struct {
	// Root is the environment's directory (the unpacked one for an
	// archive).
	Root string
	// Python is Root/bin/python3.
	Python string
	// Unpacked is true when this call unpacked an archive (false when it
	// was found in the cache, or the path is a directory).
	Unpacked bool
	// Took is how long finding or unpacking it took.
	Took time.Duration
}

// Cache prepares environments under one cache directory.
type Cache struct {
	dir string

	mu     sync.Mutex
	locks  map[string]*sync.Mutex // per content hash: one unpack at a time
	probed map[probeKey]Interpreter
}

// NewCache returns a Cache keeping environments in dir/envs.
func NewCache(dir string) *Cache {
	return &Cache{dir: filepath.Join(dir, "envs"), locks: map[string]*sync.Mutex{}, probed: map[probeKey]Interpreter{}}
}

// Prepare returns the environment at path: a directory (a plain unpacked
// environment or a venv) as it is, an archive unpacked into the cache.
func (c *Cache) Prepare(path string) (Env, error) {
	start := time.Now()
	info, err := os.Stat(path)
	if err != nil {
		return Env{}, fmt.Errorf("%w: %w", ErrEnv, err)
	}
	env := Env{Root: path}
	if !info.IsDir() {
		if env.Root, env.Unpacked, err = c.unpackOnce(path, info); err != nil {
			return Env{}, fmt.Errorf("%w: %s: %w", ErrEnv, path, err)
		}
	}
	env.Python = filepath.Join(env.Root, "bin", "python3")
	if _, err := os.Stat(env.Python); err != nil {
		return Env{}, fmt.Errorf("%w: %s has no bin/python3", ErrEnv, path)
	}
	env.Took = time.Since(start)
	return env, nil
}

// Vars are the environment variables that activate the environment for a
// process, as conda's activate does for what matters here: its bin first
// on PATH, and its lib first on LD_LIBRARY_PATH, so the interpreter and
// its extensions load the environment's libraries (its libstdc++, say)
// rather than the host's.
func (e Env) Vars() []string {
	prepend := func(name, dir string) string {
		if old := os.Getenv(name); old != "" {
			return name + "=" + dir + string(os.PathListSeparator) + old
		}
		return name + "=" + dir
	}
	return []string{prepend("PATH", filepath.Join(e.Root, "bin")), prepend("LD_LIBRARY_PATH", filepath.Join(e.Root, "lib"))}
}

// lock returns the mutex of one content hash.
func (c *Cache) lock(key string) *sync.Mutex {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.locks[key]
	if m == nil {
		m = &sync.Mutex{}
		c.locks[key] = m
	}
	return m
}
