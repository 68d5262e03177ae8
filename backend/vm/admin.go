package vm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// Every desktop reachable by an administrator (issue 16): the admin instance actions act on
// any desktop of the node by its id — a shared desktop, an agent's own desktop or browser, a
// helper's task desktop, a desktop whose agent or account is gone (orphaned), another
// account's — where the agent actions (Act) reach only the caller's agent's own desktop. And
// what deleting an agent does to its desktop and data.

// Admin instance actions (POST /api/app/admin/local-vm/instances/:id/:action).
var AdminActions = []string{ActionStop, ActionRemove}

// AdminAct stops or removes desktop id, whoever it belongs to. A desktop in use (an agent task
// runs on it, a person holds control) is refused with fault.ErrConflict naming who, unless
// force is set: then their task or control is revoked first (fenced, SPEC §1.5) and the
// desktop stops anyway. Stopping or removing a task desktop removes it (its task then fails
// at its next action); removing an orphaned desktop also forgets its record (its volumes stay
// and show among the leftovers, for an explicit clean-up). Fixed Compose desktops are refused.
func (m *Manager) AdminAct(ctx context.Context, id, action string, force bool) (InstanceView, error) {
	if !slices.Contains(AdminActions, action) {
		return InstanceView{}, fault.Invalid("unknown desktop action %q: use %s", action, strings.Join(AdminActions, " or "))
	}
	in, err := m.st.VMInstance(id)
	if errors.Is(err, fault.ErrNotFound) || (err == nil && in.NodeID != m.node) {
		return InstanceView{}, fault.NotFound("no desktop %q on this node", id)
	} else if err != nil {
		return InstanceView{}, err
	}
	if in.Scope == scopeCompose {
		return InstanceView{}, fault.Conflict("desktop %q is a fixed desktop managed by Compose: it cannot be %s from Cubicle "+
			"(change compose.desktops.yaml and run docker compose up instead)", in.Name, pastTense(action))
	}
	if _, err := m.needEngine(ctx); err != nil {
		return InstanceView{}, err
	}
	var orphan bool
	err = m.detach(ctx, id, "admin "+action, func(ctx context.Context) error {
		cur, err := m.st.VMInstance(id)
		if err != nil {
			return err
		}
		in = cur
		if who, busy := m.busyWho(id); busy {
			if !force {
				return fault.Conflict("cannot %s %s: it is in use by %s; wait for the task to finish or for "+
					"control to be handed back, or %s it anyway (their task or control ends now)", action, m.describe(in), who, action)
			}
			m.log.Info("administrator ends the use of a desktop", "instance", id, "by", who, "action", action)
			if m.cfg.Activity != nil {
				m.cfg.Activity.Revoke(id)
			}
			m.mu.Lock()
			delete(m.busy, id)
			m.mu.Unlock()
		}
		orphan = m.orphaned(in)
		switch {
		case in.Scope == scopeTask:
			return m.removeTaskLocked(ctx, id)
		case action == ActionStop:
			return m.stopLocked(ctx, id, false)
		default:
			if err := m.removeLocked(ctx, in); err != nil {
				return err
			}
			if orphan {
				return m.forgetLocked(id)
			}
			return nil
		}
	})
	if err != nil {
		if ctx.Err() != nil {
			return InstanceView{}, err
		}
		return InstanceView{}, fmt.Errorf("%s %s: %w", action, m.describe(in), err)
	}
	m.log.Info("administrator acted on a desktop", "instance", id, "action", action, "scope", in.Scope, "orphaned", orphan)
	cur, err := m.st.VMInstance(id)
	if errors.Is(err, fault.ErrNotFound) {
		in.State, in.ContainerID = StateAbsent, ""
		v := m.instanceView(in)
		v.Removed = true
		return v, nil
	} else if err != nil {
		return InstanceView{}, err
	}
	return m.instanceView(cur), nil
}

// forgetLocked deletes instance id's record (never its volumes) and announces it gone. The
// instance lock is held and its container is removed.
func (m *Manager) forgetLocked(id string) error {
	in, err := m.st.VMInstance(id)
	if errors.Is(err, fault.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if err := m.st.DeleteVMInstance(id); err != nil && !errors.Is(err, fault.ErrNotFound) {
		return err
	}
	m.clearIdle(id)
	m.links.Drop(id)
	prev := in.State
	in.State, in.UpdatedAt = StateAbsent, m.clock.Now().UTC()
	m.changed(in, prev, true)
	return nil
}

// orphaned reports whether in belongs to nobody any more: its agent (an agent's desktop,
// browser or task desktop) or its account (a shared desktop) was deleted.
func (m *Manager) orphaned(in store.VMInstance) bool {
	switch in.Scope {
	case scopeAgent, scopeBrowser, scopeTask:
		_, err := m.st.Agent(in.AgentID)
		return errors.Is(err, fault.ErrNotFound)
	case scopeShared:
		_, err := m.st.Account(in.AccountID)
		return errors.Is(err, fault.ErrNotFound)
	}
	return false
}

// Stats samples the CPU and memory of every running desktop of the node (the engine's stats,
// taken concurrently). Desktops that stopped meanwhile are left out.
func (m *Manager) Stats(ctx context.Context) ([]InstanceStats, error) {
	eng, err := m.engineNow() // a sample does not wait for a connecting engine
	if err != nil {
		return nil, err
	}
	var (
		mu  sync.Mutex
		out []InstanceStats
		wg  sync.WaitGroup
	)
	for _, in := range m.instancesOrNil() {
		if in.State != StateRunning || in.ContainerID == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := eng.ContainerStats(ctx, in.ContainerID)
			if err != nil {
				if !errors.Is(err, fault.ErrConflict) && !errors.Is(err, fault.ErrNotFound) {
					m.log.Debug("desktop stats", "instance", in.ID, "err", err)
				}
				return
			}
			mu.Lock()
			out = append(out, InstanceStats{InstanceID: in.ID, CPUPercent: st.CPUPercent, MemoryBytes: st.MemoryBytes,
				MemoryLimit: st.MemoryLimit, PIDs: st.PIDs})
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b InstanceStats) int { return strings.Compare(a.InstanceID, b.InstanceID) })
	return out, nil
}

// ownInstances returns the records of agentID's own desktop and browser (the ones deleting
// the agent concerns), whether or not their containers exist.
func (m *Manager) ownInstances(accountID, agentID string) []store.VMInstance {
	var out []store.VMInstance
	for _, id := range []string{instanceID(m.ns, m.node, accountID, scopeAgent, agentID), m.BrowserInstanceID(accountID, agentID)} {
		if in, err := m.st.VMInstance(id); err == nil && in.AccountID == accountID && in.AgentID == agentID {
			out = append(out, in)
		}
	}
	return out
}

// AgentData tells what deleting agentID of accountID concerns (see AgentData); with measure,
// the volumes' sizes are measured (which may take seconds), else they are -1.
func (m *Manager) AgentData(ctx context.Context, accountID, agentID string, measure bool) (AgentData, error) {
	ag, err := m.st.Agent(agentID)
	if err != nil || ag.AccountID != accountID {
		return AgentData{}, fault.NotFound("agent %q not found", agentID)
	}
	d := AgentData{AgentID: agentID, Desktops: []InstanceView{}, Volumes: []VolumeView{}}
	for _, in := range m.ownInstances(accountID, agentID) {
		d.Desktops = append(d.Desktops, m.instanceView(in))
		for _, v := range []VolumeView{{Name: in.WorkspaceVol, Kind: "workspace"}, {Name: in.ProfileVol, Kind: "browser-profile"}} {
			if v.Name != "" {
				v.InstanceID, v.SizeBytes = in.ID, -1
				d.Volumes = append(d.Volumes, v)
			}
		}
	}
	if sh, err := m.st.VMInstance(instanceID(m.ns, m.node, accountID, scopeShared, "")); err == nil {
		v := m.instanceView(sh)
		d.Shared = &v
	}
	names := make([]string, len(d.Volumes))
	for i, v := range d.Volumes {
		names[i] = v.Name
	}
	if len(d.Volumes) > 0 && measure {
		if eng, err := m.engineNow(); err != nil {
			d.SizeProblem = err.Error()
		} else if sizes, err := eng.VolumeSizes(ctx, names); err != nil {
			d.SizeProblem = "the engine could not measure the volumes: " + err.Error()
		} else {
			for i, v := range d.Volumes {
				if n, ok := sizes[v.Name]; ok {
					d.Volumes[i].SizeBytes = n
				} else {
					d.Volumes[i].SizeBytes = 0 // never created (the desktop never ran)
				}
			}
		}
	}
	for _, v := range d.Volumes {
		if v.SizeBytes < 0 {
			d.SizeBytes = -1
			break
		}
		d.SizeBytes += v.SizeBytes
	}
	return d, nil
}

// ForgetAgent is the desktop side of deleting agentID: with removeDesktop its own desktop and
// browser are stopped, their containers removed and their records forgotten (their volumes
// stay and are listed among the leftovers); with deleteData too, their workspace and browser
// profile volumes are deleted — only ever on this explicit request. A desktop in use refuses
// (fault.ErrConflict naming who). Without removeDesktop nothing changes: the desktop keeps
// running, orphaned, for an administrator to stop. The account's shared desktop is never
// touched. The agent record itself is the caller's to delete afterwards.
func (m *Manager) ForgetAgent(ctx context.Context, accountID, agentID string, removeDesktop, deleteData bool) error {
	if deleteData && !removeDesktop {
		return fault.Invalid("the agent's data can be deleted only together with its desktop: also remove the desktop")
	}
	if !removeDesktop {
		return nil
	}
	own := m.ownInstances(accountID, agentID)
	for _, in := range own {
		if who, busy := m.busyWho(in.ID); busy {
			return fault.Conflict("cannot delete the agent now: %s is in use by %s; wait for the task to finish or for "+
				"control to be handed back", m.describe(in), who)
		}
	}
	if len(own) > 0 {
		if _, err := m.needEngine(ctx); err != nil {
			return err
		}
	}
	var errs []error
	for _, in := range own {
		err := m.detach(ctx, in.ID, "forget agent", func(ctx context.Context) error {
			cur, err := m.st.VMInstance(in.ID)
			if errors.Is(err, fault.ErrNotFound) {
				return nil
			} else if err != nil {
				return err
			}
			if err := m.removeLocked(ctx, cur); err != nil {
				return err
			}
			if err := m.forgetLocked(in.ID); err != nil {
				return err
			}
			if !deleteData {
				return nil
			}
			for _, v := range []string{cur.WorkspaceVol, cur.ProfileVol} {
				if v == "" {
					continue
				}
				if err := m.engine().RemoveVolume(ctx, v); err != nil && !errors.Is(err, fault.ErrNotFound) {
					return fmt.Errorf("delete volume %s: %w", v, err)
				}
				m.log.Info("deleted a deleted agent's volume on request", "volume", v, "agent", agentID)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.describe(in), err))
		}
	}
	return errors.Join(errs...)
}
