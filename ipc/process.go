package ipc

import "time"

// The process protocol: what a stub process gets from the supervisor that
// starts it, besides the region's bytes. Both stubs rely on these (the Go
// stub through this package, the Python stub through the same names in
// python/stubvisor/ipc.py, which the drift test checks).
const (
	// RegionFD is the descriptor on which a stub finds its region (a
	// memfd), the first of the command's extra files.
	RegionFD = 3
	// LifelineFD is the descriptor of the lifeline, a Unix socket that
	// carries client shared-memory fds to the stub and closes when the
	// supervisor's end does.
	LifelineFD = 4
	// InstanceEnv names the environment variable that carries the
	// instance's name (Triton's "<group>_<index>"), used in error texts.
	InstanceEnv = "STUBVISOR_INSTANCE"
	// ModelEnv names the environment variable that carries the model's
	// name.
	ModelEnv = "STUBVISOR_MODEL"
	// HeartbeatPeriod is how often a stub increments its heartbeat word
	// (CtlStubHeartbeat); the supervisor restarts a stub whose word stops
	// moving for --stub-heartbeat-timeout.
	HeartbeatPeriod = 100 * time.Millisecond
)
