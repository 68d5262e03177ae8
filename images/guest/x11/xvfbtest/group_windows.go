package xvfbtest

import "syscall"

// OwnProcessGroup is nil on Windows: no process groups to set up (and no Xvfb).
func OwnProcessGroup() *syscall.SysProcAttr { return nil }
