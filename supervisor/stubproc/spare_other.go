//go:build !linux

package stubproc

import "time"

// Off Linux the gauge has no figures: no CPU counts as spare.
func selfCPU() time.Duration            { return 0 }
func cpuQuota() (cpus float64, ok bool) { return 0, false }
func affinityCPUs() (n int, ok bool)    { return 0, false }
