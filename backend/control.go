package backend

import (
	"context"
	"fmt"

	"cubicle/backend/control"
	"cubicle/backend/liveview"
	"cubicle/backend/vm"
)

// activity tells the VM manager who uses a desktop (vm.Activity).
type activity struct{ b *Backend }

func (a activity) Busy(instanceID string) (string, bool) {
	if a.b.Control == nil {
		return "", false
	}
	return a.b.Control.Busy(instanceID)
}

// Revoke ends the task or control on instanceID (an administrator stops it anyway).
func (a activity) Revoke(instanceID string) {
	if a.b.Control != nil {
		a.b.Control.Revoke(instanceID)
	}
}

// StopAll ends every agent task and control lease (before an image is prepared).
func (a activity) StopAll(ctx context.Context, reason string) error {
	if a.b.Chat != nil {
		a.b.Chat.StopAll()
	}
	ins, err := a.b.Store.VMInstances(a.b.VMs.NodeID())
	if err != nil {
		return fmt.Errorf("stop all: %w", err)
	}
	for _, in := range ins {
		a.b.Control.Revoke(in.ID)
	}
	return nil
}

// controlChanged keeps the desktops' nodes (fleet.ControlChanged: idle timers, a stop when a
// lease expires) and the screen channel in step with the control leases (SPEC §1.5).
func (b *Backend) controlChanged(c control.Change) {
	if gate := b.controlGate.Load(); gate != nil {
		(*gate)(c)
	}
	if b.fleet != nil && b.fleet.ControlChanged(c) {
		// A runner's desktop: the channel is told here, not through the bus.
		if b.LiveView != nil {
			b.LiveView.ControlChanged(c)
		}
		return
	}
	b.publishControl(c) // the computer channel hears it from the bus
}

var _ vm.Activity = activity{}

// AgentDesktop is the screen agentID's computer panel shows, as liveview.Desktops gives it to the
// computer channel (never starting anything): on a runner whose link is down its state is
// "unreachable".
func (b *Backend) AgentDesktop(ctx context.Context, accountID, agentID string) (liveview.Desktop, error) {
	return b.fleet.Desktops().Desktop(ctx, accountID, agentID)
}
