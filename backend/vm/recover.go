package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// reconcile brings the store in line with the engine at start-up:
//   - a container of a known instance is adopted: running → "running" (its idle timer starts
//     now), otherwise "stopped"; an interrupted stop or remove is completed;
//   - a record whose container vanished becomes "absent" (its volumes are untouched);
//   - a leftover probe of an interrupted preparation (its run directory is ours) is removed;
//   - every task desktop (a helper's, see tasks.go) whose record or run directory is ours is
//     removed: its task ended with the process that ran it;
//   - other desktop containers with our labels that no record knows are reported as strays.
func (m *Manager) reconcile(ctx context.Context) error {
	if m.cfg.Engine == nil {
		m.log.Warn("no container engine; desktops are not reconciled", "problem", m.cfg.EngineProblem)
		return nil
	}
	eng := m.cfg.Engine
	ctrs, err := eng.ListContainers(ctx, map[string]string{engine.LabelManaged: "true", LabelNode: m.node})
	if err != nil {
		return fmt.Errorf("list desktop containers: %w", err)
	}
	byInstance := map[string][]engine.ContainerState{}
	for _, c := range ctrs {
		id := c.Labels[engine.LabelInstance]
		switch c.Labels[LabelRole] {
		case "probe":
			if _, err := os.Stat(m.runDir(id)); err == nil {
				m.log.Info("removing the probe desktop of an interrupted preparation", "container", c.Name)
				if err := eng.RemoveContainer(ctx, c.ID, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
					m.log.Error("remove leftover probe", "container", c.Name, "err", err)
				}
				os.RemoveAll(m.runDir(id))
			}
		case "desktop":
			byInstance[id] = append(byInstance[id], c)
		case RoleTask:
			// A record is written before the container is created and deleted after it is
			// removed, so a task desktop of ours has a record; its run directory is checked
			// too (a record lost with a damaged store). Others' are left alone.
			_, recErr := m.st.VMInstance(id)
			if _, err := os.Stat(m.runDir(id)); err == nil || recErr == nil {
				m.log.Info("removing the task desktop of a helper task that ended with the process", "container", c.Name)
				if err := eng.RemoveContainer(ctx, c.ID, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
					m.log.Error("remove leftover task desktop", "container", c.Name, "err", err)
				}
			}
		}
	}
	if err := m.removeTasks(ctx); err != nil {
		m.log.Error("remove leftover task desktops", "err", err)
	}
	known := map[string]bool{}
	for _, in := range m.instancesOrNil() {
		if in.Scope == scopeCompose || in.Scope == scopeTask {
			continue
		}
		known[in.ID] = true
		if err := m.reconcileOne(ctx, in, byInstance[in.ID]); err != nil {
			m.log.Error("reconcile desktop", "instance", in.ID, "err", err)
		}
	}
	var strays []string
	for id, cs := range byInstance {
		if known[id] {
			continue
		}
		for _, c := range cs {
			strays = append(strays, c.Name)
		}
	}
	slices.Sort(strays)
	if len(strays) > 0 {
		m.log.Warn("desktop containers with Cubicle labels that no record knows (left alone)", "containers", strays)
	}
	m.mu.Lock()
	m.strays = strays
	m.mu.Unlock()
	return m.adoptCompose(ctx)
}

func (m *Manager) reconcileOne(ctx context.Context, in store.VMInstance, cs []engine.ContainerState) error {
	if len(cs) == 0 {
		if in.State == stateAbsent && in.ContainerID == "" {
			return nil
		}
		m.log.Info("desktop container vanished; marked absent (volumes kept)", "instance", in.ID, "was", in.State)
		in.ContainerID, in.ImageRef = "", ""
		return m.setState(&in, stateAbsent, "")
	}
	c := cs[0]
	for _, x := range cs {
		if x.Running || x.ID == in.ContainerID {
			c = x
		}
	}
	in.ContainerID = c.ID
	switch {
	case in.State == stateRemoving:
		m.log.Info("completing an interrupted remove", "instance", in.ID)
		return m.removeLocked(ctx, in)
	case in.State == stateStopping || c.Status == "stopping":
		m.log.Info("completing an interrupted stop", "instance", in.ID, "engine state", c.Status)
		if err := m.setState(&in, stateStopping, ""); err != nil {
			return err
		}
		m.settle(ctx, m.cfg.Engine, c.ID) // a stop the engine is still carrying out
		return m.stopLocked(ctx, in.ID, true)
	case c.Running:
		if in.ImageRef == "" {
			in.ImageRef = c.Image
		}
		in.StartedAt = c.StartedAt
		if err := m.setState(&in, stateRunning, ""); err != nil {
			return err
		}
		if _, err := m.makeRunDirKeepSocket(in.ID); err != nil {
			return err
		}
		m.log.Info("adopted running desktop", "instance", in.ID, "container", c.Name)
		m.armIdle(in.ID)
		return nil
	default:
		if in.ImageRef == "" {
			in.ImageRef = c.Image
		}
		return m.setState(&in, stateStopped, "")
	}
}

// makeRunDirKeepSocket makes sure a running desktop's run directory exists (it holds the live
// socket, which must not be removed).
func (m *Manager) makeRunDirKeepSocket(id string) (string, error) {
	dir := m.runDir(id)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", err
	}
	return dir, nil
}

// composeID is the instance id of a fixed Compose desktop.
func composeID(name string) string { return "compose-" + name }

func (m *Manager) composeByID(id string) (ComposeDesktop, bool) {
	for _, d := range m.cfg.Compose {
		if composeID(d.Name) == id {
			return d, true
		}
	}
	return ComposeDesktop{}, false
}

// adoptCompose records the fixed Compose desktops and their containers' states.
func (m *Manager) adoptCompose(ctx context.Context) error {
	for _, d := range m.cfg.Compose {
		id := composeID(d.Name)
		// The desktop's driver (uid 1000) creates its socket here.
		if dir := m.composeRunDir(d); os.MkdirAll(dir, 0o777) == nil {
			os.Chmod(dir, 0o777)
		}
		in, err := m.st.VMInstance(id)
		if errors.Is(err, fault.ErrNotFound) {
			now := m.clock.Now().UTC()
			in = store.VMInstance{ID: id, NodeID: m.node, Scope: scopeCompose, Name: d.Name, CreatedAt: now}
		} else if err != nil {
			return err
		}
		ctrs, err := m.cfg.Engine.ListContainers(ctx, map[string]string{LabelCompose: d.Name})
		if err != nil {
			return fmt.Errorf("list compose desktop %s: %w", d.Name, err)
		}
		state := stateMissing
		in.ContainerID, in.ContainerName = "", ""
		for _, c := range ctrs {
			in.ContainerID, in.ContainerName, in.ImageRef = c.ID, c.Name, c.Image
			state = stateStopped
			if c.Running {
				state = stateRunning
				break
			}
		}
		if state == stateMissing {
			m.log.Warn("fixed desktop from compose.desktops.yaml not found; is the Compose project up?", "desktop", d.Name,
				"label", LabelCompose+"="+d.Name)
		}
		if in.State != state || in.ContainerID == "" {
			if err := m.setState(&in, state, ""); err != nil {
				return err
			}
		}
	}
	return nil
}
