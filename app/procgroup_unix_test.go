//go:build unix

package app

import (
	"os"
	"syscall"
)

// ownProcessGroup starts the app under test in a process group of its own.
func ownProcessGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killProcessGroup kills p's process group: the app and the helpers it started.
func killProcessGroup(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGKILL) }
