package backend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"cubicle/backend/binding"
	"cubicle/backend/computer"
	"cubicle/backend/control"
	"cubicle/backend/fault"
	"cubicle/backend/fleet"
	"cubicle/backend/guest"
	"cubicle/backend/hostdesk"
	"cubicle/backend/liveview"
	"cubicle/backend/vm"
)

// desktops adapts the nodes' desktops to the binding (which may start a desktop) and to the
// screen channel (which only looks): each agent's calls go to the node it is placed on (the
// local VM manager or a runner's link, see placement).
type desktops struct {
	b   *Backend
	vms *vm.Manager // the local node's
}

// onRunner refuses what runner nodes do not offer yet for an agent placed on one.
func (d desktops) onRunner(agentID, what string) error {
	a, err := d.b.Store.Agent(agentID)
	if err != nil || fleet.NodeOf(a) == "local" {
		return nil
	}
	return fault.Unavailable("%s is not available on runner nodes yet: agent %s is placed on %s; place it on this computer (local) to use it", what, a.Name, a.NodeID)
}

// viewLinkTimeout bounds connecting to a running desktop's driver for a viewer.
const viewLinkTimeout = 3 * time.Second

// Ensure implements binding.VMs: the agent's desktop, started (or created) when needed.
func (d desktops) Ensure(ctx context.Context, accountID, agentID string) (binding.Desktop, error) {
	vms, err := d.b.fleet.AgentNode(agentID)
	if err != nil {
		return binding.Desktop{}, err
	}
	v, err := vms.Act(ctx, accountID, agentID, vm.ActionStart) // starts it, or repairs its driver link
	if err != nil {
		if ctx.Err() != nil {
			// The start goes on without the caller: name the desktop (binding.VMs).
			if v, verr := vms.Agent(context.WithoutCancel(ctx), accountID, agentID); verr == nil {
				return binding.Desktop{InstanceID: v.Desktop.ID}, err
			}
		}
		return binding.Desktop{}, err
	}
	d.b.fleet.Note(vms, v.Desktop.ID)
	return d.boundOn(ctx, vms, v.Desktop.ID)
}

// CreateTask implements binding.VMs: a helper's task-isolated desktop, created when needed.
func (d desktops) CreateTask(ctx context.Context, s binding.TaskSpec) (binding.Desktop, error) {
	if err := d.onRunner(s.AgentID, "a task helper's own desktop"); err != nil {
		return binding.Desktop{}, err
	}
	id, err := d.vms.CreateTask(ctx, vm.TaskSpec{AccountID: s.AccountID, AgentID: s.AgentID, SessionID: s.SessionID,
		TaskID: s.TaskID, Helper: s.Helper})
	if err != nil {
		return binding.Desktop{}, err
	}
	return d.bound(ctx, id)
}

// bound is running desktop id as the binding drives it: its shared driver link, and tunnels
// opened over the same transport.
func (d desktops) bound(ctx context.Context, id string) (binding.Desktop, error) {
	return d.boundOn(ctx, d.vms, id)
}

// boundOn is bound for a desktop of node vms.
func (d desktops) boundOn(ctx context.Context, vms fleet.Node, id string) (binding.Desktop, error) {
	c, err := vms.Link(ctx, id)
	if err != nil {
		return binding.Desktop{InstanceID: id}, err
	}
	return binding.Desktop{InstanceID: id, Computer: c, Tunnel: func(ctx context.Context, address string) (net.Conn, error) {
		return vms.Tunnel(ctx, id, address)
	}}, nil
}

// RemoveTask implements binding.VMs: removes a helper's task desktop.
func (d desktops) RemoveTask(ctx context.Context, taskID string) error {
	return d.vms.RemoveTask(ctx, taskID)
}

// EnsureBrowser implements binding.VMs: the agent's own browser, started when needed.
func (d desktops) EnsureBrowser(ctx context.Context, accountID, agentID string) (binding.Desktop, error) {
	if err := d.onRunner(agentID, "the agent's own browser"); err != nil {
		return binding.Desktop{}, err
	}
	id, err := d.vms.EnsureBrowser(ctx, accountID, agentID)
	if err != nil {
		if ctx.Err() != nil {
			return binding.Desktop{InstanceID: d.vms.BrowserInstanceID(accountID, agentID)}, err
		}
		return binding.Desktop{}, err
	}
	return d.bound(ctx, id)
}

// Desktop implements liveview.Desktops: the screen the agent's computer panel shows, as it is —
// the Local VM's desktop, the agent's browser, or the host's own screen (SPEC §7; for auto
// what its latest turn chose) — never creating or starting anything; a paused desktop is
// resumed (its programs go on where they were).
func (d desktops) Desktop(ctx context.Context, accountID, agentID string) (liveview.Desktop, error) {
	a, err := d.b.Store.Agent(agentID)
	if err != nil || a.AccountID != accountID {
		return liveview.Desktop{}, fault.NotFound("agent %q not found", agentID)
	}
	kind, _ := computer.Parse(a.Computer)
	if kind == computer.Auto {
		kind = computer.VM
		if p, ok := d.b.computers.Last(agentID); ok && p.Kind == computer.Browser {
			kind = computer.Browser
		}
	}
	switch kind {
	case computer.Host:
		return d.hostDesktop()
	case computer.Browser:
		return d.browserDesktop(ctx, accountID, agentID)
	case computer.None:
		return liveview.Desktop{State: "absent", Message: "this agent has no computer here (" + kind.Label() + ")"}, nil
	}
	vms, err := d.b.fleet.NodeFor(a) // a cloud computer's desktop is on its cloud node
	if err != nil {
		if kind == computer.Cloud {
			return liveview.Desktop{State: "absent", Message: err.Error()}, nil
		}
		return liveview.Desktop{}, err
	}
	v, err := vms.Agent(ctx, accountID, agentID)
	if err != nil {
		if errors.Is(err, fault.ErrUnavailable) && vms.NodeID() != "local" {
			// Fail closed: a runner that cannot be reached shows its desktop as unreachable.
			return liveview.Desktop{State: "unreachable", Message: err.Error()}, nil
		}
		return liveview.Desktop{}, err
	}
	d.b.fleet.Note(vms, v.Desktop.ID)
	resumeErr := ""
	if v.Desktop.State == vm.StatePaused {
		// A live view resumes a paused desktop transparently (resuming is not use: its idle
		// timer goes on, see vm.Manager.Resume).
		if rv, err := vms.Resume(ctx, accountID, agentID); err == nil {
			v = rv
		} else {
			resumeErr = "the desktop is paused and could not be resumed: " + err.Error()
		}
	}
	out := liveview.Desktop{ID: v.Desktop.ID, State: v.Desktop.State, Shared: v.Desktop.Scope == "shared", IdleStopAt: v.Desktop.IdleStopAt,
		Message: resumeErr}
	if v.Desktop.State == "running" {
		d.viewLinkOn(ctx, vms, &out)
	}
	return out, nil
}

// viewLink puts running desktop out's shared link into out (or says why there is none). A
// viewer never repairs a desktop: Start does.
func (d desktops) viewLink(ctx context.Context, out *liveview.Desktop) { d.viewLinkOn(ctx, d.vms, out) }

// viewLinkOn is viewLink for a desktop of node vms.
func (d desktops) viewLinkOn(ctx context.Context, vms fleet.Node, out *liveview.Desktop) {
	lctx, cancel := context.WithTimeout(ctx, viewLinkTimeout)
	defer cancel()
	c, err := vms.Link(lctx, out.ID)
	if err != nil {
		if out.Message == "" {
			out.Message = err.Error()
		}
		return
	}
	out.Client = c
}

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

// controlChanged keeps the VM manager's idle timers and the screen channel in step with
// the control leases (SPEC §1.5): taking over or running a task ends the idle timer, handing
// back or finishing restarts it, and a lease that expires stops the desktop.
func (b *Backend) controlChanged(c control.Change) {
	if gate := b.controlGate.Load(); gate != nil {
		(*gate)(c)
	}
	if b.VMs != nil && !strings.HasPrefix(c.DesktopID, "host-") { // the host screen has no instance
		vms := b.fleet.Desktop(c.DesktopID)
		if vms.NodeID() != "local" {
			// A runner is told over its link, which must not hold up the control loop.
			b.bg.Add(1)
			go func() {
				defer b.bg.Done()
				b.nodeControlChanged(vms, c)
			}()
			if b.LiveView != nil {
				b.LiveView.ControlChanged(c)
			}
			return
		}
		switch c.Kind {
		case control.ChangeTaken, control.ChangeTaskStarted:
			vms.MarkBusy(c.DesktopID, c.Holder.Activity())
		case control.ChangeHandedBack, control.ChangeTaskEnded, control.ChangeRevoked:
			vms.MarkIdle(c.DesktopID)
		case control.ChangeExpired:
			vms.MarkIdle(c.DesktopID)
			b.bg.Add(1)
			go func() { // not on the control loop: a stop takes a second or more
				defer b.bg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := vms.StopInstance(ctx, c.DesktopID, "control lease expired"); err != nil {
					b.log.Warn("stop desktop after lease expiry", "desktop", c.DesktopID, "err", err)
				}
			}()
		}
	}
	b.publishControl(c) // the computer channel hears it from the bus
}

// nodeControlChanged tells a runner's idle timers what a control change means (see
// controlChanged).
func (b *Backend) nodeControlChanged(vms fleet.Node, c control.Change) {
	switch c.Kind {
	case control.ChangeTaken, control.ChangeTaskStarted:
		vms.MarkBusy(c.DesktopID, c.Holder.Activity())
	case control.ChangeHandedBack, control.ChangeTaskEnded, control.ChangeRevoked:
		vms.MarkIdle(c.DesktopID)
	case control.ChangeExpired:
		vms.MarkIdle(c.DesktopID)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := vms.StopInstance(ctx, c.DesktopID, "control lease expired"); err != nil {
			b.log.Warn("stop desktop after lease expiry", "desktop", c.DesktopID, "node", vms.NodeID(), "err", err)
		}
	}
}

// releasingControls is the control service as the computer channel and the chat's binder
// use it: a hand back and the end of an agent's task also clear the desktop's busy mark on
// its node before they return. The control loop tells the node too (controlChanged), but a
// moment later — over a runner's link, after the person has their answer or the turn its
// end — and a Stop pressed in between was refused as "in use by" whoever had just let go.
// Marking idle twice is harmless.
type releasingControls struct {
	*control.Manager
	b *Backend
}

// HandBack ends the lease (control.Manager.HandBack), then marks the desktop idle on its
// node unless someone took it meanwhile.
func (c releasingControls) HandBack(desktopID, token string) error {
	if err := c.Manager.HandBack(desktopID, token); err != nil {
		return err
	}
	c.idleUnlessHeld(desktopID)
	return nil
}

// EndTask ends an agent's task (control.Manager.EndTask), then marks the desktop idle on
// its node unless someone holds it meanwhile.
func (c releasingControls) EndTask(desktopID, taskID string) error {
	if err := c.Manager.EndTask(desktopID, taskID); err != nil {
		return err
	}
	c.idleUnlessHeld(desktopID)
	return nil
}

// idleUnlessHeld marks desktopID idle on its node when nobody holds its control.
func (c releasingControls) idleUnlessHeld(desktopID string) {
	if c.b.VMs == nil || strings.HasPrefix(desktopID, "host-") {
		return
	}
	if _, held := c.Manager.Holder(desktopID); held {
		return // taken again (or a task holds it): its own change marks it busy
	}
	c.b.fleet.Desktop(desktopID).MarkIdle(desktopID)
}

var (
	_ binding.VMs       = desktops{}
	_ liveview.Desktops = desktops{}
	_ liveview.Controls = releasingControls{}
	_ binding.Tasks     = releasingControls{}
	_ liveview.Driver   = hostDriver{}
	_ vm.Activity       = activity{}
)

// browserDesktop is the agent's browser as the panel sees it.
func (d desktops) browserDesktop(ctx context.Context, accountID, agentID string) (liveview.Desktop, error) {
	v, err := d.vms.Browser(accountID, agentID)
	if err != nil {
		return liveview.Desktop{}, err
	}
	out := liveview.Desktop{ID: v.ID, State: v.State, IdleStopAt: v.IdleStopAt, Kind: "browser"}
	if v.State == "absent" {
		out.ID = ""
		out.Message = "the agent's browser starts with its first browser tool call"
	}
	if v.State == "running" {
		d.viewLink(ctx, &out)
	}
	return out, nil
}

// hostDesktop is the execution node's own screen: shown only when the admin enabled "Host
// screen control" and the OS allows it; otherwise the message says what is missing.
func (d desktops) hostDesktop() (liveview.Desktop, error) {
	node := d.vms.NodeID()
	out := liveview.Desktop{ID: hostDesktopID(node), Kind: "host", State: "unavailable"}
	ns, err := d.b.Store.NodeSettings(node)
	if err != nil {
		return liveview.Desktop{}, err
	}
	if !ns.HostScreenControl {
		out.Message = "\"Host screen control\" is off for this execution node: an admin turns it on in Settings → Host. " +
			"Host command and file tools still work."
		return out, nil
	}
	if p := d.b.HostDesk.Permission(); !p.Granted {
		out.Message = "the host's screen cannot be used: " + p.Missing + "; " + p.HowToGrant +
			". Host command and file tools still work."
		return out, nil
	}
	out.State, out.Client = "running", hostDriver{d.b.HostDesk}
	return out, nil
}

// hostDriver is the host screen as the computer channel drives it: the primary display.
type hostDriver struct{ d *hostdesk.Desktop }

func (h hostDriver) Frames(ctx context.Context, o guest.StreamOptions) (guest.FrameStream, error) {
	return h.d.Frames(ctx, o)
}

func (h hostDriver) Input(ctx context.Context, in guest.Input) error { return h.d.Input(ctx, 0, in) }

// AgentDesktop is the screen agentID's computer panel shows, as liveview.Desktops gives it to the
// computer channel (never starting anything): on a runner whose link is down its state is
// "unreachable".
func (b *Backend) AgentDesktop(ctx context.Context, accountID, agentID string) (liveview.Desktop, error) {
	return desktops{b: b, vms: b.VMs}.Desktop(ctx, accountID, agentID)
}
