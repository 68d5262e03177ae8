package app

import (
	"os"
	"syscall"
)

// ownProcessGroup: the desktop tests need X11 and do not run on Windows; this keeps them
// compiling.
func ownProcessGroup() *syscall.SysProcAttr { return nil }

// killProcessGroup kills the process.
func killProcessGroup(p *os.Process) { _ = p.Kill() }
