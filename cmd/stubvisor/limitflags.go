package main

import (
	"flag"
	"strconv"
	"time"

	"github.com/stubvisor/stubvisor/supervisor"
)

// registerStubTimeouts registers the flags that bound each step of a
// stub's life: start, initialize, heartbeat, finalize, restart.
func registerStubTimeouts(fs *flag.FlagSet, o *supervisor.Options) {
	fs.DurationVar(&o.StubStartTimeout, "stub-start-timeout", o.StubStartTimeout, "how long a new stub may take to attach")
	fs.DurationVar(&o.InitializeTimeout, "stub-initialize-timeout", o.InitializeTimeout, "how long initialize() may take")
	fs.DurationVar(&o.HeartbeatTimeout, "stub-heartbeat-timeout", o.HeartbeatTimeout, "a stub whose heartbeat stops this long is killed and restarted")
	fs.DurationVar(&o.FinalizeTimeout, "stub-finalize-timeout", o.FinalizeTimeout, "how long finalize() may take before the stub is killed")
	fs.DurationVar(&o.RestartBackoff, "stub-restart-backoff", o.RestartBackoff, "first delay before a dead stub is restarted")
	fs.DurationVar(&o.RestartBackoffMax, "stub-restart-backoff-max", o.RestartBackoffMax, "cap of the exponential restart backoff")
}

// registerStubLimits registers the flags that bound each stub's life and
// memory: the server's defaults of the model parameters of the same
// meaning (supervisor/recycle.go).
func registerStubLimits(fs *flag.FlagSet, o *supervisor.Options) {
	fs.Uint64Var(&o.MaxRSSMB, "max-rss-mb", 0, "recycle a stub whose resident memory exceeds this many MiB (model parameter MAX_RSS_MB overrides; 0: never)")
	fs.Uint64Var(&o.MaxRequestsPerStub, "max-requests-per-stub", 0, "recycle a stub after this many requests (model parameter MAX_REQUESTS_PER_STUB overrides; 0: never)")
	fs.Func("max-stub-age-s", "recycle a stub older than this many seconds (model parameter MAX_STUB_AGE_S overrides; 0: never)", func(v string) error {
		n, err := strconv.ParseUint(v, 10, 32)
		o.MaxStubAge = time.Duration(n) * time.Second
		return err
	})
	fs.Uint64Var(&o.MemoryLimitMB, "memory-limit-mb", 0, "hard memory limit of each stub in MiB, enforced by the kernel (model parameter MEMORY_LIMIT_MB overrides; 0: none)")
	fs.StringVar(&o.MemoryLimitMethod, "memory-limit-method", "", "how the memory limit is enforced: cgroup-v2, rlimit-data or rlimit-as (default: cgroup-v2 where the server may create one, else rlimit-data)")
}
