package backend

import (
	"context"
	"fmt"
	"time"

	"cubicle/backend/api"
	"cubicle/backend/binding"
	"cubicle/backend/control"
	"cubicle/backend/vm"
)

// desktops adapts the VM manager to the binding (which may start a desktop) and to the screen
// channel (which only looks).
type desktops struct {
	vms *vm.Manager
}

// viewLinkTimeout bounds connecting to a running desktop's driver for a viewer.
const viewLinkTimeout = 3 * time.Second

// Ensure implements binding.VMs: the agent's desktop, started (or created) when needed.
func (d desktops) Ensure(ctx context.Context, accountID, agentID string) (binding.Desktop, error) {
	v, err := d.vms.Act(ctx, accountID, agentID, vm.ActionStart) // starts it, or repairs its driver link
	if err != nil {
		return binding.Desktop{}, err
	}
	c, err := d.vms.Link(ctx, v.Desktop.ID)
	if err != nil {
		return binding.Desktop{}, err
	}
	return binding.Desktop{InstanceID: v.Desktop.ID, Computer: c}, nil
}

// CreateTask implements binding.VMs: a helper's task-isolated desktop, created when needed.
func (d desktops) CreateTask(ctx context.Context, s binding.TaskSpec) (binding.Desktop, error) {
	id, err := d.vms.CreateTask(ctx, vm.TaskSpec{AccountID: s.AccountID, AgentID: s.AgentID, SessionID: s.SessionID,
		TaskID: s.TaskID, Helper: s.Helper})
	if err != nil {
		return binding.Desktop{}, err
	}
	c, err := d.vms.Link(ctx, id)
	if err != nil {
		return binding.Desktop{}, err
	}
	return binding.Desktop{InstanceID: id, Computer: c}, nil
}

// RemoveTask implements binding.VMs: removes a helper's task desktop.
func (d desktops) RemoveTask(ctx context.Context, taskID string) error {
	return d.vms.RemoveTask(ctx, taskID)
}

// Desktop implements api.Desktops: the agent's desktop as it is; never creates or starts one.
func (d desktops) Desktop(ctx context.Context, accountID, agentID string) (api.Desktop, error) {
	v, err := d.vms.Agent(ctx, accountID, agentID)
	if err != nil {
		return api.Desktop{}, err
	}
	out := api.Desktop{ID: v.Desktop.ID, State: v.Desktop.State, Shared: v.Desktop.Scope == "shared", IdleStopAt: v.Desktop.IdleStopAt}
	if v.Desktop.State == "running" {
		// The desktop's shared link; a viewer never repairs a desktop (Start does).
		lctx, cancel := context.WithTimeout(ctx, viewLinkTimeout)
		c, err := d.vms.Link(lctx, v.Desktop.ID)
		cancel()
		if err == nil {
			out.Client = c
		} else if out.Message == "" {
			out.Message = err.Error()
		}
	}
	return out, nil
}

// activity tells the VM manager who uses a desktop (vm.Activity).
type activity struct{ b *Backend }

func (a activity) Busy(instanceID string) (string, bool) {
	if a.b.Control == nil {
		return "", false
	}
	return a.b.Control.Busy(instanceID)
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

// controlChanged keeps the VM manager's idle timers and the screen channel in step with
// the control leases (SPEC §1.5): taking over or running a task ends the idle timer, handing
// back or finishing restarts it, and a lease that expires stops the desktop.
func (b *Backend) controlChanged(c control.Change) {
	if b.VMs != nil {
		switch c.Kind {
		case control.ChangeTaken, control.ChangeTaskStarted:
			b.VMs.MarkBusy(c.DesktopID, c.Holder.Activity())
		case control.ChangeHandedBack, control.ChangeTaskEnded, control.ChangeRevoked:
			b.VMs.MarkIdle(c.DesktopID)
		case control.ChangeExpired:
			b.VMs.MarkIdle(c.DesktopID)
			b.bg.Add(1)
			go func() { // not on the control loop: a stop takes a second or more
				defer b.bg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := b.VMs.StopInstance(ctx, c.DesktopID, "control lease expired"); err != nil {
					b.log.Warn("stop desktop after lease expiry", "desktop", c.DesktopID, "err", err)
				}
			}()
		}
	}
	if b.Computer != nil {
		b.Computer.ControlChanged(c)
	}
}

var (
	_ binding.VMs  = desktops{}
	_ api.Desktops = desktops{}
	_ vm.Activity  = activity{}
)
