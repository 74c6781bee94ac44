package supervisor

import "sync"

// loadLocks serialises loads and unloads of each model name, not of all
// models: a model's initialize may load, unload or check another model
// (pb_utils.load_model), which must not wait for the load that runs that
// initialize. Close refuses new loads and waits for the running ones.
type loadLocks struct {
	mu     sync.Mutex
	idle   sync.Cond // signalled when active drops to 0
	names  map[string]*nameLock
	active int
	closed bool
}

// nameLock is the lock of one model name, dropped when nobody uses it.
type nameLock struct {
	sync.Mutex
	users int
}

// lock takes name's lock; it returns false, holding nothing, once the
// supervisor is closing.
func (l *loadLocks) lock(name string) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	if l.names == nil {
		l.names = map[string]*nameLock{}
	}
	n := l.names[name]
	if n == nil {
		n = &nameLock{}
		l.names[name] = n
	}
	n.users++
	l.active++
	l.mu.Unlock()
	n.Lock()
	return true
}

// unlock releases name's lock taken by lock.
func (l *loadLocks) unlock(name string) {
	l.mu.Lock()
	n := l.names[name]
	n.users--
	if n.users == 0 {
		delete(l.names, name)
	}
	l.active--
	if l.active == 0 && l.idle.L != nil {
		l.idle.Broadcast()
	}
	l.mu.Unlock()
	n.Unlock()
}

// close refuses new loads and waits until none runs.
func (l *loadLocks) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.idle.L == nil {
		l.idle.L = &l.mu
	}
	for l.active > 0 {
		l.idle.Wait()
	}
}
