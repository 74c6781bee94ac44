//go:build !linux

package memlimit

import "syscall"

// New reports ErrUnsupported outside Linux.
func New(prefer Method) (*Limiter, error) { return nil, ErrUnsupported }

// Prepare is never reached outside Linux (New fails).
func (l *Limiter) Prepare(name string, n uint64) (*Limit, error) { return nil, ErrUnsupported }

func (lim *Limit) SysProcAttr(a *syscall.SysProcAttr)   {}
func (lim *Limit) Env() []string                        { return nil }
func (lim *Limit) Started(pid int) error                { return ErrUnsupported }
func (lim *Limit) OverLimit(ws syscall.WaitStatus) bool { return false }
func (lim *Limit) Close()                               {}
