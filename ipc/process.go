package ipc

import (
	"strconv"
	"time"
)

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
	// HeartbeatEnv names the environment variable that carries the
	// stub's heartbeat period in milliseconds (HeartbeatPeriodFor); a
	// stub started without it beats every HeartbeatPeriod.
	HeartbeatEnv = "STUBVISOR_HEARTBEAT_MS"
	// HeartbeatPeriod is how often a stub increments its heartbeat word
	// (CtlStubHeartbeat) when HeartbeatEnv is unset, and the shortest
	// period HeartbeatPeriodFor gives; the supervisor restarts a stub
	// whose word stops moving for --stub-heartbeat-timeout.
	HeartbeatPeriod = 100 * time.Millisecond
	// MaxHeartbeatPeriod is the longest period HeartbeatPeriodFor gives:
	// a tenth of the default 30 s timeout.
	MaxHeartbeatPeriod = 3 * time.Second
)

// HeartbeatPeriodFor is the beat period for a heartbeat timeout: a tenth
// of it, within [HeartbeatPeriod, MaxHeartbeatPeriod]. Every beat wakes
// an idle stub and the supervisor's check of it, so with the default 30 s
// timeout a stub beats every 3 s (fifteen idle stubs then cost a few
// wake-ups a second, not hundreds; one Python beat costs about 0.15 ms of
// CPU), while a short timeout keeps a beat every 100 ms.
func HeartbeatPeriodFor(timeout time.Duration) time.Duration {
	return min(MaxHeartbeatPeriod, max(HeartbeatPeriod, timeout/10))
}

// HeartbeatFromEnv is the period a stub was given in HeartbeatEnv
// (HeartbeatPeriod when it is unset or not a positive number of ms).
func HeartbeatFromEnv(v string) time.Duration {
	ms, err := strconv.Atoi(v)
	if err != nil || ms <= 0 {
		return HeartbeatPeriod
	}
	return time.Duration(ms) * time.Millisecond
}
