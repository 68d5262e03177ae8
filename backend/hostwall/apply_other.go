//go:build !linux

package hostwall

import "cubicle/backend/fault"

// Apply is only possible on Linux, where the engine's containers share this machine's kernel;
// elsewhere the engine runs in a VM whose network Cubicle cannot reach into.
func Apply(pid int, proof Proof, w Wall) error {
	return fault.Unavailable("the desktop runs in the engine's VM: its network cannot be walled off from this machine")
}
