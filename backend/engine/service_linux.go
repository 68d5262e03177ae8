package engine

import "syscall"

// stopSignal asks the owned service to stop.
const stopSignal = syscall.SIGTERM

// ownedServiceSupported reports whether `podman system service` runs on this OS.
func ownedServiceSupported() error { return nil }

// serviceProcAttr puts the owned service in its own process group, so a terminal's Ctrl-C
// reaches the app first, with Pdeathsig, so the service does not outlive an app killed with
// SIGKILL.
func serviceProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
