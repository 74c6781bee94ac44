//go:build !linux

package stubproc

import "fmt"

// SetCPUPolicy checks policy and does nothing else outside Linux.
func SetCPUPolicy(policy CPUPolicy) error {
	if policy != PolicyLatency && policy != PolicyBatch {
		return fmt.Errorf("cpu policy %q: %w", policy, ErrUnknownPolicy)
	}
	return nil
}

func stubPolicy() {}
