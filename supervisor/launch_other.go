//go:build !linux

package supervisor

import (
	"errors"
	"os"
	"os/exec"
)

// launcher is Linux-only: stubs rely on memfd, futexes and Pdeathsig.
type launcher struct{}

func newLauncher() *launcher { return &launcher{} }

func (l *launcher) stop() {}

func (l *launcher) start(cmd *exec.Cmd) error { return errors.ErrUnsupported }

func kill(p *os.Process) {
	if p != nil {
		_ = p.Kill()
	}
}

func killGroup(int) {}
