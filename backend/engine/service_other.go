//go:build !linux

package engine

import (
	"os"
	"runtime"
	"syscall"

	"cubicle/backend/fault"
)

// stopSignal is never sent: no owned service starts outside Linux.
var stopSignal os.Signal = os.Kill

// ownedServiceSupported refuses: outside Linux the podman command is a client of a Podman
// machine (a Linux VM), and `podman system service` does not exist there.
func ownedServiceSupported() error {
	return fault.Unavailable("Podman runs in a virtual machine on %s: start it with `podman machine start` (or from Podman Desktop)", runtime.GOOS)
}

// serviceProcAttr is unused outside Linux.
func serviceProcAttr() *syscall.SysProcAttr { return nil }
