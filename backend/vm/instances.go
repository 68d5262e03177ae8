package vm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/store"
	"cubicle/images/guest/wire"
)

// Instance states (store.VMInstance.State). "absent" means there is no container (never
// created, removed, or vanished); the record and the volumes remain.
const (
	stateCreating = "creating"
	stateRunning  = "running"
	stateStopping = "stopping"
	stateStopped  = "stopped"
	stateRemoving = "removing"
	stateAbsent   = "absent"
	stateMissing  = "missing" // a Compose desktop whose container is not there
)

// Scopes (store.VMInstance.Scope) and isolation policies.
const (
	scopeShared  = "shared"
	scopeAgent   = "agent"
	scopeCompose = "compose"

	IsolationShared   = "shared"
	IsolationPerAgent = "per-agent"
)

// Actions of POST /api/app/agents/:id/local-vm/:action.
const (
	ActionCreate   = "create"
	ActionStart    = "start"
	ActionStop     = "stop"
	ActionRecreate = "recreate"
	ActionRemove   = "remove"
)

// Actions lists the instance actions.
func Actions() []string {
	return []string{ActionCreate, ActionStart, ActionStop, ActionRecreate, ActionRemove}
}

// resolve finds (creating in memory, not storing) the instance record agentID of accountID
// uses under the node's current isolation policy, or in Compose mode its chosen fixed desktop.
func (m *Manager) resolve(accountID, agentID string) (store.VMInstance, store.Agent, error) {
	ag, err := m.st.Agent(agentID)
	if err != nil || ag.AccountID != accountID {
		return store.VMInstance{}, store.Agent{}, fault.NotFound("agent %q not found", agentID)
	}
	if len(m.cfg.Compose) > 0 {
		id := composeID(m.cfg.Compose[0].Name)
		if b, err := m.st.VMBinding(agentID); err == nil {
			if _, ok := m.composeByID(b.Desktop); ok {
				id = b.Desktop
			}
		}
		in, err := m.st.VMInstance(id)
		if err != nil {
			return store.VMInstance{}, ag, fmt.Errorf("fixed desktop %s: %w", id, err)
		}
		return in, ag, nil
	}
	ns, err := m.st.NodeSettings(m.node)
	if err != nil {
		return store.VMInstance{}, ag, err
	}
	scope, scopeAgentID := scopeAgent, agentID
	if ns.Isolation == IsolationShared {
		scope, scopeAgentID = scopeShared, ""
	}
	id := instanceID(m.node, accountID, scope, scopeAgentID)
	in, err := m.st.VMInstance(id)
	if err == nil {
		return in, ag, nil
	}
	if !errors.Is(err, fault.ErrNotFound) {
		return in, ag, err
	}
	now := m.clock.Now().UTC()
	name := "cubicle-" + id
	return store.VMInstance{
		ID: id, NodeID: m.node, AccountID: accountID, Scope: scope, AgentID: scopeAgentID,
		ContainerName: name, WorkspaceVol: name + "-workspace", ProfileVol: name + "-browser",
		State: stateAbsent, CreatedAt: now, UpdatedAt: now,
	}, ag, nil
}

// Agent returns the desktop agentID of accountID uses (which may have no container yet).
func (m *Manager) Agent(ctx context.Context, accountID, agentID string) (AgentView, error) {
	in, ag, err := m.resolve(accountID, agentID)
	if err != nil {
		return AgentView{}, err
	}
	return m.agentView(ctx, in, ag)
}

// Act runs action on agentID's desktop: create and start make it run (creating the container
// when there is none), stop stops it, recreate replaces the container (keeping the volumes)
// and starts it, remove removes the container (keeping the volumes and the record). An unknown
// action is fault.ErrInvalid.
func (m *Manager) Act(ctx context.Context, accountID, agentID, action string) (AgentView, error) {
	if !slices.Contains(Actions(), action) {
		return AgentView{}, fault.Invalid("unknown local VM action %q: use one of %s", action, strings.Join(Actions(), ", "))
	}
	in, ag, err := m.resolve(accountID, agentID)
	if err != nil {
		return AgentView{}, err
	}
	if in.Scope == scopeCompose {
		return AgentView{}, fault.Conflict("desktop %q is a fixed desktop managed by Compose: it cannot be %s from Cubicle "+
			"(change compose.desktops.yaml and run docker compose up instead)", in.Name, pastTense(action))
	}
	unlock := m.lock(in.ID)
	defer unlock()
	// Reload under the lock: another operation may have changed it.
	if cur, err := m.st.VMInstance(in.ID); err == nil {
		in = cur
	}
	switch action {
	case ActionCreate, ActionStart:
		err = m.ensureRunning(ctx, in, false)
	case ActionStop:
		if err = m.refuseBusy(in, action); err == nil {
			err = m.stopLocked(ctx, in.ID, false)
		}
	case ActionRecreate:
		if err = m.refuseBusy(in, action); err == nil {
			err = m.ensureRunning(ctx, in, true)
		}
	case ActionRemove:
		if err = m.refuseBusy(in, action); err == nil {
			err = m.removeLocked(ctx, in)
		}
	}
	if err != nil {
		return AgentView{}, fmt.Errorf("%s desktop of agent %s: %w", action, ag.Name, err)
	}
	cur, err := m.st.VMInstance(in.ID)
	if err != nil {
		return AgentView{}, err
	}
	return m.agentView(ctx, cur, ag)
}

// SetImage saves the image key agentID's desktop uses (SPEC §1.11: prepared keys only). A
// running container keeps its image until it is recreated.
func (m *Manager) SetImage(ctx context.Context, accountID, agentID, key string) (AgentView, error) {
	in, ag, err := m.resolve(accountID, agentID)
	if err != nil {
		return AgentView{}, err
	}
	if in.Scope == scopeCompose {
		return AgentView{}, fault.Conflict("desktop %q is a fixed desktop managed by Compose; its image is set by the deployment", in.Name)
	}
	if _, err := m.st.VMImage(m.node, key); errors.Is(err, fault.ErrNotFound) {
		return AgentView{}, fault.Invalid("image %q is not prepared on this node: choose one of the prepared images (%s), "+
			"or ask an admin to prepare it in Settings → Local VM", key, strings.Join(m.preparedKeys(), ", "))
	} else if err != nil {
		return AgentView{}, err
	}
	unlock := m.lock(in.ID)
	defer unlock()
	if cur, err := m.st.VMInstance(in.ID); err == nil {
		in = cur
	}
	if err := m.refuseBusy(in, "change the image of"); err != nil {
		return AgentView{}, err
	}
	in.ImageKey = key
	in.UpdatedAt = m.clock.Now().UTC()
	if err := m.st.PutVMInstance(in); err != nil {
		return AgentView{}, err
	}
	return m.agentView(ctx, in, ag)
}

// ChooseDesktop saves which fixed Compose desktop agentID uses (SPEC §1.6, §5).
func (m *Manager) ChooseDesktop(ctx context.Context, accountID, agentID, desktopID string) (AgentView, error) {
	if len(m.cfg.Compose) == 0 {
		return AgentView{}, fault.Conflict("this node has no fixed Compose desktops; desktops follow the isolation policy")
	}
	if _, ok := m.composeByID(desktopID); !ok {
		return AgentView{}, fault.Invalid("no fixed desktop %q on this node", desktopID)
	}
	if _, _, err := m.resolve(accountID, agentID); err != nil {
		return AgentView{}, err
	}
	if err := m.st.PutVMBinding(store.VMBinding{AgentID: agentID, Desktop: desktopID}); err != nil {
		return AgentView{}, err
	}
	return m.Agent(ctx, accountID, agentID)
}

// refuseBusy returns a fault.ErrConflict error naming who uses the instance, if anyone does.
func (m *Manager) refuseBusy(in store.VMInstance, what string) error {
	if who, ok := m.busyWho(in.ID); ok {
		return fault.Conflict("cannot %s this desktop: it is in use by %s; wait for the task to finish or for control "+
			"to be handed back", what, who)
	}
	return nil
}

func (m *Manager) busyWho(id string) (string, bool) {
	m.mu.Lock()
	who, ok := m.busy[id]
	m.mu.Unlock()
	if ok {
		return who, true
	}
	if m.cfg.Activity != nil {
		return m.cfg.Activity.Busy(id)
	}
	return "", false
}

// ensureRunning makes in run, creating its container when it has none (or, with recreate,
// replacing it). The instance lock is held.
func (m *Manager) ensureRunning(ctx context.Context, in store.VMInstance, recreate bool) error {
	eng, err := m.needEngine()
	if err != nil {
		return err
	}
	m.mu.Lock()
	preparing := m.preparing > 0
	m.mu.Unlock()
	if preparing {
		return fault.Conflict("a desktop image is being prepared and every desktop was stopped for it; " +
			"try again when the preparation in Settings → Local VM has finished")
	}
	if in.ImageKey == "" {
		keys := m.preparedKeys()
		switch {
		case slices.Contains(keys, "standard"):
			in.ImageKey = "standard"
		case len(keys) > 0:
			in.ImageKey = keys[0]
		default:
			return fault.Conflict("no desktop image is prepared yet: an admin prepares one in Settings → Local VM")
		}
	}
	// The container as the engine sees it (found by label, so a crash between create and
	// the store update is covered).
	ctr, found, err := m.findContainer(ctx, in)
	if err != nil {
		return err
	}
	if want := m.wantWorkDir(in); found && !recreate && want != in.WorkDir {
		// The agent's working directory changed since the container was made: rebuild it
		// (volumes kept) now that it is being started or is idle (SPEC §1.5).
		m.log.Info("rebuilding desktop for a new working directory", "instance", in.ID, "from", in.WorkDir, "to", want)
		recreate = true
	}
	if found && recreate {
		if err := m.setState(&in, stateRemoving, ""); err != nil {
			return err
		}
		if err := eng.RemoveContainer(ctx, ctr.ID, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
			return fmt.Errorf("remove the old container: %w", err)
		}
		m.clearIdle(in.ID)
		in.ContainerID, in.ImageRef = "", ""
		if err := m.setState(&in, stateAbsent, ""); err != nil {
			return err
		}
		found = false
	}
	if found && ctr.Running {
		in.ContainerID = ctr.ID
		if in.State != stateRunning {
			in.StartedAt = m.clock.Now().UTC()
			if err := m.setState(&in, stateRunning, ""); err != nil {
				return err
			}
			m.armIdle(in.ID)
		}
		return nil
	}

	m.capMu.Lock()
	defer m.capMu.Unlock()
	if in.Scope != scopeBrowser { // a browser takes no desktop slot
		if err := m.checkCapacity(in.ID); err != nil {
			return err
		}
	}
	if !found {
		ref, err := m.imageRef(ctx, in)
		if err != nil {
			return err
		}
		in.ImageRef = ref
		in.WorkDir = m.wantWorkDir(in)
		if err := m.setState(&in, stateCreating, ""); err != nil {
			return err
		}
		if ctr, err = m.createContainer(ctx, eng, in); err != nil {
			m.setState(&in, stateAbsent, err.Error())
			return err
		}
		in.ContainerID = ctr.ID
		if err := m.setState(&in, stateCreating, ""); err != nil {
			return err
		}
	} else {
		in.ContainerID = ctr.ID
	}
	if _, err := m.makeRunDir(in.ID); err != nil {
		return err
	}
	err = eng.StartContainer(ctx, in.ContainerID)
	if errors.Is(err, fault.ErrConflict) {
		// Still stopping (a stop that an earlier process began): wait for it, then start.
		m.settle(ctx, eng, in.ContainerID)
		err = eng.StartContainer(ctx, in.ContainerID)
	}
	if err != nil {
		m.setState(&in, stateStopped, err.Error())
		return fmt.Errorf("start container %s: %w", in.ContainerName, err)
	}
	if err := m.waitDriver(ctx, in.ID); err != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*m.cfg.StopTimeout)
		eng.StopContainer(sctx, in.ContainerID, m.cfg.StopTimeout)
		cancel()
		m.setState(&in, stateStopped, err.Error())
		return err
	}
	in.StartedAt = m.clock.Now().UTC()
	if err := m.setState(&in, stateRunning, ""); err != nil {
		return err
	}
	m.armIdle(in.ID)
	m.log.Info("desktop running", "instance", in.ID, "container", in.ContainerName, "image", in.ImageRef)
	return nil
}

// settle waits (up to twice the stop timeout) while container id is between running and
// stopped, e.g. finishing a stop that a crashed process began.
func (m *Manager) settle(ctx context.Context, eng Engine, id string) {
	deadline := time.Now().Add(2*m.cfg.StopTimeout + time.Second)
	for time.Now().Before(deadline) {
		st, err := eng.InspectContainer(ctx, id)
		if err != nil || st.Running || st.Status != "stopping" {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitDriver waits for the desktop's driver handshake.
func (m *Manager) waitDriver(ctx context.Context, id string) error {
	wctx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	defer cancel()
	g, err := m.cfg.Dial(wctx, m.SocketPath(id))
	if err != nil {
		return fault.Unavailable("the desktop started but its driver did not answer within %s (%v); "+
			"recreate the desktop, or prepare the image again", m.cfg.ReadyTimeout, err)
	}
	g.Close()
	return nil
}

// createContainer creates in's volumes and container (not started).
func (m *Manager) createContainer(ctx context.Context, eng Engine, in store.VMInstance) (engine.ContainerState, error) {
	for vol, kind := range map[string]string{in.WorkspaceVol: "workspace", in.ProfileVol: "browser-profile"} {
		if vol == "" {
			continue
		}
		l := m.labels(in.ID, "volume")
		l[LabelVolume] = kind
		if err := eng.EnsureVolume(ctx, vol, l); err != nil {
			return engine.ContainerState{}, fmt.Errorf("create volume %s: %w", vol, err)
		}
	}
	dir, err := m.makeRunDir(in.ID)
	if err != nil {
		return engine.ContainerState{}, err
	}
	spec := engine.ContainerSpec{
		Name:     in.ContainerName,
		Image:    in.ImageRef,
		Labels:   m.labels(in.ID, "desktop"),
		Env:      map[string]string{wire.EnvRunDir: RunDirTarget},
		Hostname: "cubicle",
		Mounts:   []engine.Mount{{Source: dir, Target: RunDirTarget}},
		Volumes: []engine.VolumeMount{
			{Name: in.WorkspaceVol, Target: WorkspaceTarget},
			{Name: in.ProfileVol, Target: BrowserTarget},
		},
		Limits:      m.engineLimits(),
		StopTimeout: m.cfg.StopTimeout,
	}
	if in.WorkDir != "" {
		spec.Env["CUBICLE_WORKSPACE"] = in.WorkDir
	}
	if in.Scope == scopeBrowser {
		browserSpec(&spec, in)
	}
	ctr, err := eng.CreateContainer(ctx, spec)
	if errors.Is(err, fault.ErrExists) {
		// A container of that name without our instance label (or from a crash the label
		// search missed): it is ours by name; remove it and try once more.
		if rerr := eng.RemoveContainer(ctx, in.ContainerName, true); rerr == nil {
			ctr, err = eng.CreateContainer(ctx, spec)
		}
	}
	if err != nil {
		return engine.ContainerState{}, fmt.Errorf("create container %s: %w", in.ContainerName, err)
	}
	return ctr, nil
}

func (m *Manager) engineLimits() engine.Limits {
	l := m.cfg.Limits
	return engine.Limits{MemoryBytes: l.MemoryBytes, NanoCPUs: l.NanoCPUs, PIDs: l.PIDs, ShmBytes: l.ShmBytes,
		NoFile: 20000, NProc: 32768}
}

// findContainer returns the container of in, looked up by its instance label.
func (m *Manager) findContainer(ctx context.Context, in store.VMInstance) (engine.ContainerState, bool, error) {
	eng, err := m.needEngine()
	if err != nil {
		return engine.ContainerState{}, false, err
	}
	ctrs, err := eng.ListContainers(ctx, map[string]string{engine.LabelInstance: in.ID, LabelNode: m.node})
	if err != nil {
		return engine.ContainerState{}, false, fmt.Errorf("list containers: %w", err)
	}
	var best engine.ContainerState
	found := false
	for _, c := range ctrs {
		if c.Labels[LabelRole] != "desktop" {
			continue
		}
		if !found || c.Running || c.ID == in.ContainerID {
			best, found = c, true
		}
	}
	return best, found, nil
}

// checkCapacity refuses to start one more desktop when MaxInstances already run. capMu is held.
func (m *Manager) checkCapacity(except string) error {
	ns, err := m.st.NodeSettings(m.node)
	if err != nil {
		return err
	}
	running := m.runningDesktops(except)
	if len(running) >= ns.MaxInstances {
		return fault.Conflict("at most %d desktops may run at the same time on this node and %d already run: %s; "+
			"stop one of them, or raise the limit in Settings → Local VM", ns.MaxInstances, len(running), strings.Join(running, ", "))
	}
	return nil
}

// describe names an instance for people: "the desktop of agent Bot" / "the shared desktop of alice".
func (m *Manager) describe(in store.VMInstance) string {
	switch in.Scope {
	case scopeAgent:
		if ag, err := m.st.Agent(in.AgentID); err == nil {
			return fmt.Sprintf("the desktop of agent %s", ag.Name)
		}
		return fmt.Sprintf("the desktop of agent %s", in.AgentID)
	case scopeShared:
		if acc, err := m.st.Account(in.AccountID); err == nil {
			return fmt.Sprintf("the shared desktop of %s", acc.Username)
		}
		return fmt.Sprintf("the shared desktop of account %s", in.AccountID)
	case scopeBrowser:
		if ag, err := m.st.Agent(in.AgentID); err == nil {
			return fmt.Sprintf("the browser of agent %s", ag.Name)
		}
		return fmt.Sprintf("the browser of agent %s", in.AgentID)
	case scopeTask:
		name := in.AgentID
		if ag, err := m.st.Agent(in.AgentID); err == nil {
			name = ag.Name
		}
		return fmt.Sprintf("the task desktop of helper %s (agent %s)", in.Name, name)
	default:
		return fmt.Sprintf("fixed desktop %s", in.Name)
	}
}

// stopLocked stops instance id's container and marks it stopped. The caller holds the lock
// unless takeLock is set.
func (m *Manager) stopLocked(ctx context.Context, id string, takeLock bool) error {
	if takeLock {
		defer m.lock(id)()
	}
	in, err := m.st.VMInstance(id)
	if err != nil {
		return err
	}
	m.clearIdle(id)
	if in.ContainerID == "" || in.State == stateAbsent {
		return nil
	}
	eng, err := m.needEngine()
	if err != nil {
		return err
	}
	if err := m.setState(&in, stateStopping, ""); err != nil {
		return err
	}
	start := time.Now()
	err = eng.StopContainer(ctx, in.ContainerID, m.cfg.StopTimeout)
	if errors.Is(err, fault.ErrNotFound) {
		in.ContainerID = ""
		return m.setState(&in, stateAbsent, "")
	}
	if err != nil {
		m.setState(&in, stateStopped, err.Error())
		return fmt.Errorf("stop container %s: %w", in.ContainerName, err)
	}
	m.log.Info("desktop stopped", "instance", id, "took", time.Since(start).Round(time.Millisecond))
	return m.setState(&in, stateStopped, "")
}

// removeLocked removes in's container (never its volumes). The instance lock is held.
func (m *Manager) removeLocked(ctx context.Context, in store.VMInstance) error {
	eng, err := m.needEngine()
	if err != nil {
		return err
	}
	m.clearIdle(in.ID)
	ctr, found, err := m.findContainer(ctx, in)
	if err != nil {
		return err
	}
	if !found && in.ContainerID == "" {
		return m.setState(&in, stateAbsent, "")
	}
	if err := m.setState(&in, stateRemoving, ""); err != nil {
		return err
	}
	id := in.ContainerID
	if found {
		id = ctr.ID
	}
	if err := eng.StopContainer(ctx, id, m.cfg.StopTimeout); err != nil && !errors.Is(err, fault.ErrNotFound) {
		return fmt.Errorf("stop container %s: %w", in.ContainerName, err)
	}
	if err := eng.RemoveContainer(ctx, id, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
		return fmt.Errorf("remove container %s: %w", in.ContainerName, err)
	}
	in.ContainerID, in.ImageRef = "", ""
	return m.setState(&in, stateAbsent, "")
}

// setState records in's new state (and its other fields) in the store and tells OnChange.
func (m *Manager) setState(in *store.VMInstance, state, lastErr string) error {
	prev, prevErr := in.State, in.LastError
	in.State, in.LastError = state, lastErr
	in.UpdatedAt = m.clock.Now().UTC()
	if err := m.st.PutVMInstance(*in); err != nil {
		return fmt.Errorf("record desktop state %s: %w", state, err)
	}
	if prev != state || prevErr != lastErr {
		m.changed(*in, prev, false)
	}
	return nil
}

// changed tells Config.OnChange about in (now in its recorded state, before in prev).
func (m *Manager) changed(in store.VMInstance, prev string, removed bool) {
	if m.cfg.OnChange == nil {
		return
	}
	m.cfg.OnChange(InstanceChange{InstanceID: in.ID, Scope: in.Scope, AccountID: in.AccountID, AgentID: in.AgentID,
		State: in.State, Previous: prev, LastError: in.LastError, Removed: removed, At: in.UpdatedAt})
}

func (m *Manager) preparedKeys() []string {
	imgs, err := m.st.VMImages(m.node)
	if err != nil {
		return nil
	}
	keys := make([]string, 0, len(imgs))
	for _, i := range imgs {
		keys = append(keys, i.Key)
	}
	return keys
}

func pastTense(action string) string {
	switch action {
	case ActionCreate, ActionRemove, ActionRecreate:
		return action + "d"
	case ActionStop:
		return "stopped"
	}
	return action + "ed"
}

// StopInstance stops desktop id whoever uses it: a control lease that expired while running,
// a revoked authorisation, a shutdown (SPEC §1.5: these stop the instance even with "Never
// auto-stop", so that late operations are fenced off). Its volumes stay.
func (m *Manager) StopInstance(ctx context.Context, id, reason string) error {
	m.log.Info("stopping desktop", "instance", id, "reason", reason)
	return m.stopLocked(ctx, id, true)
}
