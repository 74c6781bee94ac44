//go:build !linux

package stubproc

// YieldToStubs does nothing outside Linux.
func YieldToStubs() error { return nil }

func normalPolicy() {}
