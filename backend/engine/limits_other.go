//go:build !linux

package engine

// ReadHostLimits returns zero (unknown) limits: outside Linux the engine runs its containers
// in a Linux VM (Docker Desktop, Podman machine, Colima, …) or on another machine, so neither
// this process's limits nor the service's bind them, and adapters leave the rlimits to the
// engine.
func ReadHostLimits(socketPath string) HostLimits { return HostLimits{} }
