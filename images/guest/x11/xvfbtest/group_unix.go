//go:build unix

package xvfbtest

import "syscall"

// OwnProcessGroup starts a helper process (Xvfb, a driver) in a process group of its own,
// away from the test's terminal signals.
func OwnProcessGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
