package vm

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/store"
	"cubicle/images"
)

// Browsers (SPEC §7, computer "browser"): an agent whose computer is "Browser only" works on a
// Chromium of its own, in a container of the standard image that runs no desktop session —
// the driver starts the X server and Chromium only (CUBICLE_SESSION), so the person can watch
// the page live and take over like a desktop, while the agent drives it only through the
// DevTools protocol, reached through the driver's tunnel (guest.OpTunnel) to 127.0.0.1:9222
// inside the container: no port is published.
//
// A browser is a persistent instance with scope "browser" and its own browser-profile volume
// (never the agent's desktop profile), created, started, stopped, reconciled and idle-stopped
// by the same lifecycle as a desktop. It does not take one of the node's desktop slots. Its
// image is the prepared standard image, or — when no image was prepared yet — the standard
// image present in the engine (built by content hash), so an agent on "auto" can browse
// before an admin prepared the Local VM.

// scopeBrowser marks a browser's record (store.VMInstance.Scope).
const scopeBrowser = "browser"

// DevToolsPort is where the browser's Chromium listens inside its container (loopback only).
const DevToolsPort = 9222

// browserSession is the driver's session command line of a browser container.
var browserSession = strings.Join([]string{
	"chromium",
	fmt.Sprintf("--remote-debugging-port=%d", DevToolsPort),
	"--remote-debugging-address=127.0.0.1",
	"--user-data-dir=" + BrowserTarget,
	"--window-position=0,0", "--window-size=1280,800", "--start-maximized",
	"--no-first-run", "--no-default-browser-check", "--disable-background-networking",
	"--disable-component-update", "--disable-sync", "--disable-features=Translate",
	"about:blank",
}, " ")

// browserSpec turns a desktop's container spec into a browser's: Chromium instead of the
// desktop session, the browser-profile volume only.
func browserSpec(spec *engine.ContainerSpec, in store.VMInstance) {
	spec.Env["CUBICLE_SESSION"] = browserSession
	spec.Volumes = []engine.VolumeMount{{Name: in.ProfileVol, Target: BrowserTarget}}
	spec.Labels[LabelRole] = "desktop"
	spec.Labels[LabelAgent] = in.AgentID
}

// BrowserInstanceID is the instance id of the browser of agentID (of accountID) on this node.
func (m *Manager) BrowserInstanceID(accountID, agentID string) string {
	return instanceID(m.ns, m.node, accountID, scopeBrowser, agentID)
}

// resolveBrowser returns the browser record of agentID (in memory when it has none yet).
func (m *Manager) resolveBrowser(accountID, agentID string) (store.VMInstance, store.Agent, error) {
	ag, err := m.st.Agent(agentID)
	if err != nil || ag.AccountID != accountID {
		return store.VMInstance{}, store.Agent{}, fault.NotFound("agent %q not found", agentID)
	}
	id := m.BrowserInstanceID(accountID, agentID)
	in, err := m.st.VMInstance(id)
	if err == nil {
		return in, ag, nil
	}
	if !errors.Is(err, fault.ErrNotFound) {
		return in, ag, err
	}
	now := m.clock.Now().UTC()
	name := "cubicle-" + id
	in = store.VMInstance{ID: id, NodeID: m.node, AccountID: accountID, Scope: scopeBrowser, AgentID: agentID,
		ImageKey: string(images.Standard), ContainerName: name, ProfileVol: name + "-browser",
		State: StateAbsent, CreatedAt: now, UpdatedAt: now}
	if m.engines().mapUsers {
		in.UserNSBase = userNSBase(id)
	}
	return in, ag, nil
}

// EnsureBrowser makes agentID's browser run (creating its container when it has none) and
// returns its instance id. Compose nodes have no browsers.
func (m *Manager) EnsureBrowser(ctx context.Context, accountID, agentID string) (string, error) {
	if len(m.cfg.Compose) > 0 {
		return "", fault.Conflict("this node runs only the fixed desktops of compose.desktops.yaml and has no " +
			"per-agent browsers; choose Local VM for this agent")
	}
	in, ag, err := m.resolveBrowser(accountID, agentID)
	if err != nil {
		return "", err
	}
	err = m.detach(ctx, in.ID, "start browser", func(ctx context.Context) error {
		if cur, err := m.st.VMInstance(in.ID); err == nil {
			in = cur
		}
		return m.bringUp(ctx, &in, kindBrowser, nil, false)
	})
	if err != nil {
		if ctx.Err() != nil {
			return "", err
		}
		return "", fmt.Errorf("the browser of agent %s: %w", ag.Name, err)
	}
	return in.ID, nil
}

// Browser returns agentID's browser as it is (never starting it).
func (m *Manager) Browser(accountID, agentID string) (InstanceView, error) {
	in, _, err := m.resolveBrowser(accountID, agentID)
	if err != nil {
		return InstanceView{}, err
	}
	return m.instanceView(in), nil
}

// VMReady reports whether agentID's Local VM can be used now, for the computer "auto": its
// image is prepared, and its desktop runs or a desktop slot is free. why says what is missing.
func (m *Manager) VMReady(ctx context.Context, accountID, agentID string) (ok bool, why string) {
	if m.engine() == nil {
		return false, "no container engine (" + m.engines().problem + ")"
	}
	in, _, err := m.resolve(accountID, agentID)
	if err != nil {
		return false, err.Error()
	}
	if in.Scope == scopeCompose {
		return in.State == StateRunning, "the fixed desktop is " + in.State
	}
	keys := m.preparedKeys()
	if len(keys) == 0 {
		return false, "no Local VM image is prepared on this node"
	}
	if in.ImageKey != "" && !slices.Contains(keys, in.ImageKey) {
		return false, fmt.Sprintf("the desktop's image %q is not prepared", in.ImageKey)
	}
	if in.State == StateRunning || in.State == StatePaused {
		return true, "" // a paused desktop holds its slot and is resumed when used
	}
	m.mu.Lock()
	preparing := m.preparing > 0
	m.mu.Unlock()
	if preparing {
		return false, "a desktop image is being prepared"
	}
	ns, err := m.st.NodeSettings(m.node)
	if err != nil {
		return false, err.Error()
	}
	if running := m.runningDesktops(in.ID); len(running) >= ns.MaxInstances {
		return false, fmt.Sprintf("all %d desktop slots are in use", ns.MaxInstances)
	}
	return true, ""
}

// preparedRef is the image in's container is created from: the prepared image of its key, or
// for a browser the standard image even when it was not prepared (see above).
func (m *Manager) preparedRef(ctx context.Context, in store.VMInstance) (string, error) {
	img, err := m.st.VMImage(m.node, in.ImageKey)
	if err == nil {
		return img.Ref, nil
	}
	if !errors.Is(err, fault.ErrNotFound) {
		return "", err
	}
	if in.Scope == scopeBrowser {
		if l, ok := m.engines().images.(interface {
			List(ctx context.Context) ([]images.Status, error)
		}); ok {
			sts, lerr := l.List(ctx)
			if lerr == nil {
				for _, st := range sts {
					if st.Key == images.Standard && st.Prepared {
						return st.Ref, nil
					}
				}
			}
		}
		return "", fault.Conflict("Browser only runs Chromium from the standard desktop image, which is not on this node yet: " +
			"an admin prepares it in Settings → Local VM")
	}
	return "", fault.Conflict("image %q is not prepared on this node: an admin prepares it in Settings → Local VM, "+
		"or choose a prepared image (%s)", in.ImageKey, strings.Join(m.preparedKeys(), ", "))
}

// wantWorkDir is the working directory in's container should be made with: the agent's
// terminal.cwd resolved inside the desktop, for an agent's own desktop ("" = the workspace).
func (m *Manager) wantWorkDir(in store.VMInstance) string {
	if in.Scope != scopeAgent {
		return ""
	}
	ag, err := m.st.Agent(in.AgentID)
	if err != nil {
		return in.WorkDir
	}
	return ResolveWorkDir(ag.WorkDir)
}

// ResolveWorkDir resolves an agent's terminal.cwd inside a desktop (SPEC §1.7): "" for the
// workspace ("", ".", "auto", "cwd"), a relative directory under the workspace, an absolute one
// as configured.
func ResolveWorkDir(dir string) string {
	switch d := strings.TrimSpace(dir); {
	case d == "" || d == "." || d == "auto" || d == "cwd":
		return ""
	case strings.HasPrefix(d, "/"):
		if p := path.Clean(d); p != WorkspaceTarget {
			return p
		}
		return ""
	default:
		if p := path.Join(WorkspaceTarget, d); p != WorkspaceTarget {
			return p
		}
		return ""
	}
}

// WorkDirChanged applies a change of agentID's working directory (SPEC §1.5): its own running
// desktop is rebuilt (volumes kept) when idle; a busy one is rebuilt when it next starts or when
// this is called again once idle. It reports whether a rebuild happened.
func (m *Manager) WorkDirChanged(ctx context.Context, accountID, agentID string) (bool, error) {
	in, _, err := m.resolve(accountID, agentID)
	if err != nil || in.Scope != scopeAgent {
		return false, err
	}
	rebuilt := false
	err = m.detach(ctx, in.ID, "rebuild for a new working directory", func(ctx context.Context) error {
		cur, err := m.st.VMInstance(in.ID)
		if err != nil || cur.State != StateRunning || cur.WorkDir == m.wantWorkDir(cur) {
			return nil
		}
		if who, busy := m.busyWho(cur.ID); busy {
			m.mu.Lock()
			m.rebuild[cur.ID] = true
			m.mu.Unlock()
			m.log.Info("desktop rebuild for a new working directory waits until it is idle", "instance", cur.ID, "busy", who)
			return nil
		}
		rebuilt = true
		return m.bringUp(ctx, &cur, kindDesktop, nil, true)
	})
	return rebuilt && err == nil, err
}
