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
//     now), paused → "paused", otherwise "stopped"; an interrupted stop or remove is
//     completed;
//   - a record whose container vanished becomes "absent" (its volumes are untouched);
//   - a leftover probe of an interrupted preparation (this store's) is removed;
//   - every task desktop (a helper's, see tasks.go) of this store is removed: its task ended
//     with the process that ran it;
//   - other desktop containers of this store that no record knows are reported as strays.
//
// Containers of other data directories (another store id) are never touched nor listed.
func (m *Manager) reconcile(ctx context.Context) error {
	if m.engine() == nil {
		m.log.Warn("no container engine; desktops are not reconciled", "problem", m.engines().problem)
		return nil
	}
	eng := m.engine()
	ctrs, err := eng.ListContainers(ctx, map[string]string{engine.LabelManaged: "true", LabelNode: m.node})
	if err != nil {
		return fmt.Errorf("list desktop containers: %w", err)
	}
	records := map[string]store.VMInstance{}
	for _, in := range m.instancesOrNil() {
		records[in.ID] = in
	}
	byInstance := map[string][]engine.ContainerState{}
	for _, c := range ctrs {
		id := c.Labels[engine.LabelInstance]
		in, known := records[id]
		mine := m.owns(c, in, known)
		switch c.Labels[LabelRole] {
		case RoleProbe:
			// An old probe without a store label is ours when its run directory is.
			if _, err := os.Stat(m.runDir(id)); mine || (err == nil && c.Labels[LabelStore] == "") {
				m.log.Info("removing the probe desktop of an interrupted preparation", "container", c.Name)
				if err := eng.RemoveContainer(ctx, c.ID, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
					m.log.Error("remove leftover probe", "container", c.Name, "err", err)
				}
				os.RemoveAll(m.runDir(id))
			}
		case RoleDesktop:
			if mine {
				byInstance[id] = append(byInstance[id], c)
			}
		case RoleTask:
			// A record is written before the container is created and deleted after it is
			// removed, so a task desktop of ours has a record; an old one without a store
			// label is ours when its run directory is.
			if _, err := os.Stat(m.runDir(id)); mine || known || (err == nil && c.Labels[LabelStore] == "") {
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
	for _, in := range records {
		if in.Scope == scopeCompose || in.Scope == scopeTask {
			continue
		}
		if err := m.reconcileOne(ctx, in, byInstance[in.ID]); err != nil {
			m.log.Error("reconcile desktop", "instance", in.ID, "err", err)
		}
	}
	var strays []string
	for id, cs := range byInstance {
		if _, known := records[id]; known {
			continue
		}
		for _, c := range cs {
			strays = append(strays, c.Name)
		}
	}
	slices.Sort(strays)
	if len(strays) > 0 {
		m.log.Warn("desktop containers of this data directory that no record knows (left alone)", "containers", strays)
	}
	m.mu.Lock()
	m.strays = strays
	m.mu.Unlock()
	return m.adoptCompose(ctx)
}

// reconcileOne completes an interrupted stop or remove of in, and otherwise records what the
// engine reports.
func (m *Manager) reconcileOne(ctx context.Context, in store.VMInstance, cs []engine.ContainerState) error {
	defer m.lock(in.ID)()
	c, state := pick(cs, in.ContainerID)
	switch {
	case state == StateAbsent:
		if in.State != StateAbsent || in.ContainerID != "" {
			m.log.Info("desktop container vanished; marked absent (volumes kept)", "instance", in.ID, "was", in.State)
		}
	case in.State == StateRemoving:
		m.log.Info("completing an interrupted remove", "instance", in.ID)
		in.ContainerID = c.ID
		return m.removeLocked(ctx, in)
	case in.State == StateStopping || state == StateStopping:
		m.log.Info("completing an interrupted stop", "instance", in.ID, "engine state", c.Status)
		in.ContainerID = c.ID
		if err := m.setState(&in, StateStopping, ""); err != nil {
			return err
		}
		m.settle(ctx, m.engine(), c.ID) // a stop the engine is still carrying out
		return m.stopLocked(ctx, in.ID, false)
	case state == StateRunning:
		m.log.Info("adopted running desktop", "instance", in.ID, "container", c.Name)
		if in.State == StateRunning {
			// Recorded running: walled again all the same (it may have been restarted while
			// this process was not there, in a new network namespace).
			in.ContainerID = c.ID
			if err := m.wallOrStop(ctx, &in); err != nil {
				return m.syncLocked(ctx, in.ID, err.Error())
			}
			if err := m.setState(&in, in.State, in.LastError); err != nil {
				return err
			}
		}
	}
	if err := m.syncLocked(ctx, in.ID, keepError); err != nil {
		return err
	}
	if state == StatePaused && kindOf(in).idle {
		// Paused before the restart (by Pause or the idle policy): kept paused, and its idle
		// stop counts from now.
		m.log.Info("adopted paused desktop", "instance", in.ID, "container", c.Name)
		m.armIdle(in.ID)
		m.mu.Lock()
		m.idlePaused[in.ID] = true
		m.mu.Unlock()
	}
	return nil
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
		if err := m.adoptOneCompose(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// adoptOneCompose records fixed desktop d and its container's state.
func (m *Manager) adoptOneCompose(ctx context.Context, d ComposeDesktop) error {
	id := composeID(d.Name)
	// The desktop's driver (uid 1000) creates its socket here.
	if dir := m.composeRunDir(d); os.MkdirAll(dir, 0o777) == nil {
		os.Chmod(dir, 0o777)
	}
	in, err := m.st.VMInstance(id)
	isNew := errors.Is(err, fault.ErrNotFound)
	if isNew {
		now := m.clock.Now().UTC()
		in = store.VMInstance{ID: id, NodeID: m.node, Scope: scopeCompose, Name: d.Name, CreatedAt: now}
	} else if err != nil {
		return err
	}
	ctrs, err := m.engine().ListContainers(ctx, map[string]string{LabelCompose: d.Name})
	if err != nil {
		return fmt.Errorf("list compose desktop %s: %w", d.Name, err)
	}
	c, state := pick(ctrs, in.ContainerID)
	if state == StateAbsent {
		state = StateMissing
	}
	if !isNew && in.State == state && in.ContainerID == c.ID {
		return nil
	}
	if state == StateMissing {
		m.log.Warn("fixed desktop from compose.desktops.yaml not found; is the Compose project up?", "desktop", d.Name,
			"label", LabelCompose+"="+d.Name)
	}
	in.ContainerID, in.ContainerName, in.ImageRef = c.ID, c.Name, c.Image
	return m.setState(&in, state, "")
}
