//go:build !linux

package stubproc

import (
	"errors"
	"os"
	"os/exec"
)

// Launcher is Linux-only: stubs rely on memfd, futexes and Pdeathsig.
type Launcher struct{}

func NewLauncher() *Launcher { return &Launcher{} }

func (l *Launcher) Stop() {}

func (l *Launcher) start(cmd *exec.Cmd) error { return errors.ErrUnsupported }

func kill(p *os.Process) {
	if p != nil {
		_ = p.Kill()
	}
}

func killGroup(int) {}
