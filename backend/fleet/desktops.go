package fleet

import (
	"context"
	"errors"
	"net"
	"time"

	"cubicle/backend/binding"
	"cubicle/backend/computer"
	"cubicle/backend/fault"
	"cubicle/backend/guest"
	"cubicle/backend/liveview"
	"cubicle/backend/vm"
)

// Desktops adapts the nodes' desktops to the binding (which may start a desktop) and to the
// screen channel (which only looks): each agent's calls go to the node it is placed on (the
// local VM manager or a runner's link, see placement). Task desktops and browsers are the
// local node's only.
type Desktops struct{ f *Fleet }

// local is the local node's desktop manager.
func (d Desktops) local() *vm.Manager { return d.f.cfg.Local }

// onRunner refuses what runner nodes do not offer yet for an agent placed on one.
func (d Desktops) onRunner(agentID, what string) error {
	a, err := d.f.cfg.Store.Agent(agentID)
	if err != nil || NodeOf(a) == "local" {
		return nil
	}
	return fault.Unavailable("%s is not available on runner nodes yet: agent %s is placed on %s; place it on this computer (local) to use it", what, a.Name, a.NodeID)
}

// viewLinkTimeout bounds connecting to a running desktop's driver for a viewer.
const viewLinkTimeout = 3 * time.Second

// Ensure implements binding.VMs: the agent's desktop, started (or created) when needed.
func (d Desktops) Ensure(ctx context.Context, accountID, agentID string) (binding.Desktop, error) {
	vms, err := d.f.AgentNode(agentID)
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
	d.f.Note(vms, v.Desktop.ID)
	return d.boundOn(ctx, vms, v.Desktop.ID)
}

// CreateTask implements binding.VMs: a helper's task-isolated desktop, created when needed.
func (d Desktops) CreateTask(ctx context.Context, s binding.TaskSpec) (binding.Desktop, error) {
	if err := d.onRunner(s.AgentID, "a task helper's own desktop"); err != nil {
		return binding.Desktop{}, err
	}
	id, err := d.local().CreateTask(ctx, vm.TaskSpec{AccountID: s.AccountID, AgentID: s.AgentID, SessionID: s.SessionID,
		TaskID: s.TaskID, Helper: s.Helper})
	if err != nil {
		return binding.Desktop{}, err
	}
	return d.bound(ctx, id)
}

// bound is running desktop id as the binding drives it: its shared driver link, and tunnels
// opened over the same transport.
func (d Desktops) bound(ctx context.Context, id string) (binding.Desktop, error) {
	return d.boundOn(ctx, d.local(), id)
}

// boundOn is bound for a desktop of node vms.
func (d Desktops) boundOn(ctx context.Context, vms Node, id string) (binding.Desktop, error) {
	c, err := vms.Link(ctx, id)
	if err != nil {
		return binding.Desktop{InstanceID: id}, err
	}
	return binding.Desktop{InstanceID: id, Computer: c, Tunnel: func(ctx context.Context, address string) (net.Conn, error) {
		return vms.Tunnel(ctx, id, address)
	}}, nil
}

// RemoveTask implements binding.VMs: removes a helper's task desktop.
func (d Desktops) RemoveTask(ctx context.Context, taskID string) error {
	return d.local().RemoveTask(ctx, taskID)
}

// EnsureBrowser implements binding.VMs: the agent's own browser, started when needed.
func (d Desktops) EnsureBrowser(ctx context.Context, accountID, agentID string) (binding.Desktop, error) {
	if err := d.onRunner(agentID, "the agent's own browser"); err != nil {
		return binding.Desktop{}, err
	}
	id, err := d.local().EnsureBrowser(ctx, accountID, agentID)
	if err != nil {
		if ctx.Err() != nil {
			return binding.Desktop{InstanceID: d.local().BrowserInstanceID(accountID, agentID)}, err
		}
		return binding.Desktop{}, err
	}
	return d.bound(ctx, id)
}

// Desktop implements liveview.Desktops: the screen the agent's computer panel shows, as it is —
// the Local VM's desktop, the agent's browser, or the host's own screen (SPEC §7; for auto
// what its latest turn chose) — never creating or starting anything; a paused desktop is
// resumed (its programs go on where they were).
func (d Desktops) Desktop(ctx context.Context, accountID, agentID string) (liveview.Desktop, error) {
	a, err := d.f.cfg.Store.Agent(agentID)
	if err != nil || a.AccountID != accountID {
		return liveview.Desktop{}, fault.NotFound("agent %q not found", agentID)
	}
	kind, _ := computer.Parse(a.Computer)
	if kind == computer.Auto {
		kind = computer.VM
		if p, ok := d.f.comp.Last(agentID); ok && p.Kind == computer.Browser {
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
	vms, err := d.f.NodeFor(a) // a cloud computer's desktop is on its cloud node
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
	d.f.Note(vms, v.Desktop.ID)
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
func (d Desktops) viewLink(ctx context.Context, out *liveview.Desktop) {
	d.viewLinkOn(ctx, d.local(), out)
}

// viewLinkOn is viewLink for a desktop of node vms.
func (d Desktops) viewLinkOn(ctx context.Context, vms Node, out *liveview.Desktop) {
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

// browserDesktop is the agent's browser as the panel sees it.
func (d Desktops) browserDesktop(ctx context.Context, accountID, agentID string) (liveview.Desktop, error) {
	v, err := d.local().Browser(accountID, agentID)
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
func (d Desktops) hostDesktop() (liveview.Desktop, error) {
	node := d.local().NodeID()
	out := liveview.Desktop{ID: hostDesktopID(node), Kind: "host", State: "unavailable"}
	ns, err := d.f.cfg.Store.NodeSettings(node)
	if err != nil {
		return liveview.Desktop{}, err
	}
	if !ns.HostScreenControl {
		out.Message = "\"Host screen control\" is off for this execution node: an admin turns it on in Settings → Host. " +
			"Host command and file tools still work."
		return out, nil
	}
	if p := d.f.cfg.HostScreen.Permission(); !p.Granted {
		out.Message = "the host's screen cannot be used: " + p.Missing + "; " + p.HowToGrant +
			". Host command and file tools still work."
		return out, nil
	}
	out.State, out.Client = "running", hostDriver{d.f.cfg.HostScreen}
	return out, nil
}

// hostDriver is the host screen as the computer channel drives it: the primary display.
type hostDriver struct{ d HostScreen }

func (h hostDriver) Frames(ctx context.Context, o guest.StreamOptions) (guest.FrameStream, error) {
	return h.d.Frames(ctx, o)
}

func (h hostDriver) Input(ctx context.Context, in guest.Input) error { return h.d.Input(ctx, 0, in) }

var (
	_ binding.VMs       = Desktops{}
	_ liveview.Desktops = Desktops{}
	_ liveview.Driver   = hostDriver{}
)
