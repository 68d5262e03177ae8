package vm

import (
	"context"
	"time"

	"cubicle/backend/store"
	"cubicle/images"
)

// Health values of InstanceView.
const (
	HealthOK        = "ok"
	HealthUnhealthy = "unhealthy"
	// HealthUnreachable: the engine does not answer (EngineView.Unreachable), or the
	// desktop's node does not (UnreachableAgentView); the desktop may still run but nothing
	// reaches it until the engine or the node is back.
	HealthUnreachable = "unreachable"
)

// StateUnreachable is the state a view gives a desktop whose node cannot be reached now (a
// runner whose link is down): what it does is unknown until the node is back. It is never
// recorded.
const StateUnreachable = "unreachable"

// UnreachableAgentView is agentID's desktop on node as the agent's panel shows it while the
// node cannot be reached: state and health "unreachable", why in LastError, no images to
// choose from (nothing can be done to it from here until the node is back).
func UnreachableAgentView(node, agentID string, why error) AgentView {
	return AgentView{AgentID: agentID, Images: []string{}, Desktop: InstanceView{
		NodeID: node, AgentID: agentID, State: StateUnreachable, Health: HealthUnreachable, LastError: why.Error(),
		Agents: []AgentRef{},
	}}
}

// Status reports the engine, the images and their preparation, the policy and the desktops.
func (m *Manager) Status(ctx context.Context) (Status, error) {
	ns, err := m.st.NodeSettings(m.node)
	if err != nil {
		return Status{}, err
	}
	st := Status{NodeID: m.node, Compose: len(m.cfg.Compose) > 0,
		Policy: Policy{Isolation: ns.Isolation, MaxInstances: ns.MaxInstances, IdleStopMinutes: ns.IdleStopMinutes,
			PauseAfterMinutes: ns.PauseAfterMinutes}}
	st.Engine = m.engineView(ctx)
	st.ImageSources = m.sourcesView(ns)
	st.GuestLink = guestLinkView(m.links.Choice())
	prepared, err := m.st.VMImages(m.node)
	if err != nil {
		return Status{}, err
	}
	preps := m.PrepareStates()
	for _, k := range images.Keys() {
		iv := ImageView{Key: string(k)}
		for _, p := range prepared {
			if p.Key == string(k) {
				iv.Prepared, iv.Ref, iv.ImageID, iv.RecipeHash = true, p.Ref, p.ImageID, p.RecipeHash
				iv.DriverVersion, iv.PreparedAt = p.DriverVersion, p.PreparedAt
			}
		}
		for _, p := range preps {
			if p.Key == string(k) {
				iv.Prepare = &p
				st.Preparing = st.Preparing || p.Running
			}
		}
		st.Images = append(st.Images, iv)
	}
	if st.Compose && m.engine() != nil {
		if err := m.adoptCompose(ctx); err != nil {
			m.log.Warn("refresh compose desktops", "err", err)
		}
	}
	st.Instances = []InstanceView{}
	for _, in := range m.instancesOrNil() {
		v := m.instanceView(in)
		if v.State == StateRunning && !v.Fixed {
			st.Running++
		}
		st.Instances = append(st.Instances, v)
	}
	m.mu.Lock()
	st.Strays = append([]string(nil), m.strays...)
	m.mu.Unlock()
	return st, nil
}

func (m *Manager) engineView(ctx context.Context) EngineView {
	eng, err := m.engineNow()
	if err != nil {
		return EngineView{Problem: err.Error(), Connecting: m.Connecting()}
	}
	ictx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	info, err := eng.Info(ictx)
	if err != nil {
		return EngineView{Problem: "the container engine does not answer: " + err.Error(), Unreachable: m.Unreachable()}
	}
	return EngineView{Found: true, Kind: string(info.Kind), Version: info.Version, Socket: info.Socket,
		Rootless: info.Rootless, Arch: info.Arch, Unreachable: m.Unreachable()}
}

func (m *Manager) instanceView(in store.VMInstance) InstanceView {
	v := InstanceView{
		ID: in.ID, NodeID: in.NodeID, Scope: in.Scope, AccountID: in.AccountID, AgentID: in.AgentID, Name: in.Name,
		Description: m.describe(in), Fixed: in.Scope == scopeCompose, Task: in.Scope == scopeTask,
		ImageKey: in.ImageKey, ImageRef: in.ImageRef, State: in.State, Container: in.ContainerName,
		Workspace: in.WorkspaceVol, BrowserVolume: in.ProfileVol, StartedAt: in.StartedAt, LastError: in.LastError, HostWall: in.HostWall,
		Agents: []AgentRef{}, Orphaned: m.orphaned(in),
	}
	if acc, err := m.st.Account(in.AccountID); err == nil && in.AccountID != "" {
		v.Owner = acc.Username
	}
	switch in.Scope {
	case scopeShared:
		if ags, err := m.st.Agents(in.AccountID); err == nil {
			for _, a := range ags {
				if a.Computer == "vm" || a.Computer == "auto" {
					v.Agents = append(v.Agents, AgentRef{ID: a.ID, Name: a.Name})
				}
			}
		}
	case scopeAgent, scopeBrowser, scopeTask:
		if a, err := m.st.Agent(in.AgentID); err == nil {
			v.Agents = append(v.Agents, AgentRef{ID: a.ID, Name: a.Name})
		}
	}
	if in.ImageKey != "" && in.ImageRef != "" && in.ContainerID != "" {
		if img, err := m.st.VMImage(m.node, in.ImageKey); err == nil && img.Ref != in.ImageRef {
			v.ImagePending = true
		} else if err != nil {
			v.ImagePending = true
		}
	}
	if who, ok := m.busyWho(in.ID); ok {
		v.BusyBy = who
	}
	if why := m.Unreachable(); why != "" && takesSlot(in.State) && in.Scope != scopeCompose {
		v.Health = HealthUnreachable
		v.LastError = why
	} else if in.State == StateRunning {
		ls := m.links.State(in.ID)
		v.GuestLink = ls.Transport
		if v.GuestLink == "" {
			v.GuestLink = m.links.Choice().Primary
		}
		switch {
		case !ls.Healthy:
			v.Health = HealthUnhealthy
			if v.LastError == "" {
				v.LastError = "the desktop's driver cannot be reached: " + ls.LastError + "; start the desktop to repair it"
			}
		case ls.Connected:
			v.Health = HealthOK
		}
	}
	m.mu.Lock()
	dl, ok := m.idleDeadlineLocked(in.ID)
	m.mu.Unlock()
	if ok && (in.State == StateRunning || in.State == StatePaused) {
		secs := dl.Sub(m.clock.Now()).Seconds()
		secs = max(secs, 0)
		v.IdleStopAt, v.IdleStopInSeconds = dl.UTC(), &secs
	}
	return v
}

func (m *Manager) agentView(ctx context.Context, in store.VMInstance, ag store.Agent) (AgentView, error) {
	ns, err := m.st.NodeSettings(m.node)
	if err != nil {
		return AgentView{}, err
	}
	av := AgentView{AgentID: ag.ID, Isolation: ns.Isolation, Desktop: m.instanceView(in), Images: m.preparedKeys()}
	if av.Images == nil {
		av.Images = []string{}
	}
	if len(m.cfg.Compose) > 0 {
		av.Isolation = "compose"
		for _, d := range m.cfg.Compose {
			if c, err := m.st.VMInstance(composeID(d.Name)); err == nil {
				av.Desktops = append(av.Desktops, m.instanceView(c))
			}
		}
	}
	return av, nil
}
