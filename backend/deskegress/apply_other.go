//go:build !linux

package deskegress

import (
	"context"

	"cubicle/backend/fault"
)

// enforced has nothing to hold where no policy can be enforced.
type enforced struct{ desk Desktop }

func (e *enforced) close() {}

// apply: only on Linux do the engine's containers share this machine's kernel; elsewhere the
// engine runs in a VM whose network Cubicle cannot reach into. Open needs nothing.
func (m *Manager) apply(_ context.Context, _ Desktop, r Rules) error {
	if r.Mode == Open {
		return nil
	}
	return fault.Unavailable("the desktop runs in the engine's VM: its egress policy cannot be enforced from this machine")
}
