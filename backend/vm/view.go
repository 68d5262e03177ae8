package vm

import (
	"context"
	"time"

	"cubicle/backend/link"
	"cubicle/backend/store"
	"cubicle/images"
)

// EngineView says which container engine the node uses, or what is wrong.
type EngineView struct {
	Found    bool   `json:"found"`
	Kind     string `json:"kind,omitempty"`
	Version  string `json:"version,omitempty"`
	Socket   string `json:"socket,omitempty"`
	Rootless bool   `json:"rootless"`
	Arch     string `json:"arch,omitempty"`
	Problem  string `json:"problem,omitempty"` // what is wrong and how to fix it
	// Unreachable says why the engine stopped answering (its event stream or a comparison
	// failed), while it does not; desktops are then unreachable and refused (fail closed).
	Unreachable string `json:"unreachable,omitempty"`
	// Connecting: the engine is still being connected (the server has just started); the
	// desktops are shown as they were recorded and answer once it is there.
	Connecting bool `json:"connecting,omitempty"`
}

// ImageView is one image key with its prepared record, if any.
type ImageView struct {
	Key           string        `json:"imageKey"`
	Prepared      bool          `json:"prepared"`
	Ref           string        `json:"ref,omitempty"`
	ImageID       string        `json:"imageId,omitempty"`
	RecipeHash    string        `json:"recipeHash,omitempty"`
	DriverVersion string        `json:"driverVersion,omitempty"`
	PreparedAt    time.Time     `json:"preparedAt,omitzero"`
	Prepare       *PrepareState `json:"prepare,omitempty"` // running or last preparation
}

// InstanceView is a desktop as the API shows it.
type InstanceView struct {
	ID          string `json:"id"`
	NodeID      string `json:"nodeId"`
	Scope       string `json:"scope"` // shared | agent | browser | task | compose
	AccountID   string `json:"accountId,omitempty"`
	AgentID     string `json:"agentId,omitempty"`
	Description string `json:"description"`
	// Owner is the owning account's username ("" for fixed desktops or a deleted account).
	Owner string `json:"owner,omitempty"`
	// Agents are the agents that use the desktop: the agent of an own desktop, browser or task
	// desktop; every agent of the account on a Local VM (or auto) for a shared one.
	Agents []AgentRef `json:"agents"`
	// Orphaned: the desktop's agent (or, for a shared desktop, its account) was deleted.
	Orphaned bool `json:"orphaned"`
	// Removed: the record is gone (an answer to the removal of an orphaned or task desktop).
	Removed bool   `json:"removed,omitempty"`
	Name    string `json:"name,omitempty"` // compose desktops
	Fixed   bool   `json:"fixed"`          // a Compose desktop: no create/remove/count change
	// Task marks a helper's task-isolated desktop: removed when its task ends, never started,
	// stopped, recreated or removed by people.
	Task          bool      `json:"task"`
	ImageKey      string    `json:"imageKey,omitempty"`
	ImageRef      string    `json:"imageRef,omitempty"`
	ImagePending  bool      `json:"imagePending"` // the chosen image differs from the container's: recreate to apply
	State         string    `json:"state"`        // running, stopped, absent, creating, stopping, removing, missing; unreachable (views only, see UnreachableAgentView)
	Container     string    `json:"container,omitempty"`
	Workspace     string    `json:"workspaceVolume,omitempty"`
	BrowserVolume string    `json:"browserProfileVolume,omitempty"`
	BusyBy        string    `json:"busyBy,omitempty"`
	IdleStopAt    time.Time `json:"idleStopAt,omitzero"`
	// IdleStopInSeconds counts down to IdleStopAt; absent when no idle timer runs.
	IdleStopInSeconds *float64  `json:"idleStopInSeconds,omitempty"`
	StartedAt         time.Time `json:"startedAt,omitzero"`
	LastError         string    `json:"lastError,omitempty"`
	// HostWall: "on" when the running desktop cannot reach this machine's services, else why
	// not ("off: …"); empty when no wall is configured.
	HostWall string `json:"hostWall,omitempty"`
	// GuestLink is how the desktop's driver is reached: "socket" or "exec" (the transport
	// of its link, or the one it will use); empty when it does not run.
	GuestLink string `json:"guestLink,omitempty"`
	// Health is "ok" while the running desktop's driver answers over its link, "unhealthy"
	// when the link ended or cannot be made (LastError says why; Start repairs it); empty
	// when not running or not yet connected.
	Health string `json:"health,omitempty"`
}

// AgentRef names an agent.
type AgentRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Health values of InstanceView.
const (
	HealthOK        = "ok"
	HealthUnhealthy = "unhealthy"
	// HealthUnreachable: the engine does not answer (EngineView.Unreachable), or the
	// desktop's node does not (UnreachableAgentView); the desktop may still run but nothing
	// reaches it until the engine or the node is back.
	HealthUnreachable = "unreachable"
)

// Policy is the node's isolation policy and idle policy.
type Policy struct {
	Isolation       string `json:"isolation"`
	MaxInstances    int    `json:"maxInstances"`
	IdleStopMinutes int    `json:"idleStopMinutes"` // 0 = never
}

// Status is GET /api/app/admin/local-vm.
type Status struct {
	NodeID    string      `json:"nodeId"`
	Engine    EngineView  `json:"engine"`
	Compose   bool        `json:"compose"` // fixed desktops from compose.desktops.yaml
	Images    []ImageView `json:"images"`
	Preparing bool        `json:"preparing"`
	Policy    Policy      `json:"policy"`
	// ImageSources are the images' pinned bases and where each value comes from.
	ImageSources ImageSources   `json:"imageSources"`
	Running      int            `json:"running"`
	Instances    []InstanceView `json:"instances"`
	Strays       []string       `json:"strays,omitempty"` // containers with our labels no record knows
	// GuestLink is how new desktops' drivers are reached, and why (CUBICLE_GUEST_LINK).
	GuestLink link.Choice `json:"guestLink"`
}

// AgentView is GET /api/app/agents/:id/local-vm.
type AgentView struct {
	AgentID   string       `json:"agentId"`
	Isolation string       `json:"isolation"`
	Desktop   InstanceView `json:"desktop"`
	// Images are the prepared image keys the desktop may use.
	Images []string `json:"images"`
	// Desktops are the fixed desktops to choose from (Compose mode only).
	Desktops []InstanceView `json:"desktops,omitempty"`
}

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
		Policy: Policy{Isolation: ns.Isolation, MaxInstances: ns.MaxInstances, IdleStopMinutes: ns.IdleStopMinutes}}
	st.Engine = m.engineView(ctx)
	st.ImageSources = m.sourcesView(ns)
	st.GuestLink = m.links.Choice()
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
