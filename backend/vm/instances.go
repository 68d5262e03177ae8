package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"cubicle/backend/fault"
	"cubicle/backend/store"
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
	id := instanceID(m.ns, m.node, accountID, scope, scopeAgentID)
	in, err := m.st.VMInstance(id)
	if err == nil {
		return in, ag, nil
	}
	if !errors.Is(err, fault.ErrNotFound) {
		return in, ag, err
	}
	now := m.clock.Now().UTC()
	name := "cubicle-" + id
	in = store.VMInstance{
		ID: id, NodeID: m.node, AccountID: accountID, Scope: scope, AgentID: scopeAgentID,
		ContainerName: name, WorkspaceVol: name + "-workspace", ProfileVol: name + "-browser",
		State: StateAbsent, CreatedAt: now, UpdatedAt: now,
	}
	if m.engines().mapUsers {
		in.UserNSBase = userNSBase(id)
	}
	return in, ag, nil
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
// when there is none, resuming a paused one), stop stops it, recreate replaces the container
// (keeping the volumes) and starts it, remove removes the container (keeping the volumes and
// the record), pause freezes it and resume thaws it (Pause, Resume). An unknown action is
// fault.ErrInvalid.
//
// The action runs detached from ctx (see detach): when ctx ends first, Act returns ctx's
// error at once and the action completes or rolls back on its own; its outcome is in the
// desktop's record either way.
func (m *Manager) Act(ctx context.Context, accountID, agentID, action string) (AgentView, error) {
	if !slices.Contains(Actions(), action) && action != ActionPause && action != ActionResume {
		return AgentView{}, fault.Invalid("unknown local VM action %q: use one of %s, %s, %s", action, strings.Join(Actions(), ", "),
			ActionPause, ActionResume)
	}
	in, ag, err := m.resolve(accountID, agentID)
	if err != nil {
		return AgentView{}, err
	}
	if in.Scope == scopeCompose {
		return AgentView{}, fault.Conflict("desktop %q is a fixed desktop managed by Compose: it cannot be %s from Cubicle "+
			"(change compose.desktops.yaml and run docker compose up instead)", in.Name, pastTense(action))
	}
	err = m.detach(ctx, in.ID, action, func(ctx context.Context) error {
		// Reload in the queue: an earlier operation may have changed it.
		if cur, err := m.st.VMInstance(in.ID); err == nil {
			in = cur
		}
		switch action {
		case ActionCreate, ActionStart:
			return m.bringUp(ctx, &in, kindDesktop, nil, false)
		case ActionStop:
			if err := m.refuseBusy(in, action); err != nil {
				return err
			}
			return m.stopLocked(ctx, in.ID, false)
		case ActionRecreate:
			if err := m.refuseBusy(in, action); err != nil {
				return err
			}
			return m.bringUp(ctx, &in, kindDesktop, nil, true)
		case ActionPause:
			if err := m.refuseBusy(in, action); err != nil {
				return err
			}
			return m.pauseLocked(ctx, &in)
		case ActionResume:
			return m.resumeLocked(ctx, &in)
		default: // ActionRemove
			if err := m.refuseBusy(in, action); err != nil {
				return err
			}
			return m.removeLocked(ctx, in)
		}
	})
	if err != nil {
		if ctx.Err() != nil {
			return AgentView{}, err
		}
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
	err = m.detach(ctx, in.ID, "set image", func(context.Context) error {
		if cur, err := m.st.VMInstance(in.ID); err == nil {
			in = cur
		}
		if err := m.refuseBusy(in, "change the image of"); err != nil {
			return err
		}
		in.ImageKey = key
		in.UpdatedAt = m.clock.Now().UTC()
		return m.st.PutVMInstance(in)
	})
	if err != nil {
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

func pastTense(action string) string {
	switch action {
	case ActionCreate, ActionRemove, ActionRecreate, ActionResume:
		return action + "d"
	case ActionStop:
		return "stopped"
	case ActionPause:
		return "paused"
	}
	return action + "ed"
}

// StopInstance stops desktop id whoever uses it: a control lease that expired while running,
// a revoked authorisation, a shutdown (SPEC §1.5: these stop the instance even with "Never
// auto-stop", so that late operations are fenced off). Its volumes stay.
//
// Like Act, the stop runs detached from ctx.
func (m *Manager) StopInstance(ctx context.Context, id, reason string) error {
	m.log.Info("stopping desktop", "instance", id, "reason", reason)
	return m.detach(ctx, id, "stop", func(ctx context.Context) error { return m.stopLocked(ctx, id, false) })
}

// DeleteData deletes a desktop's retained work data — its workspace and browser-profile
// volumes — with its container and record (an administrator's explicit act; nothing else ever
// deletes them, SPEC §1.5). A desktop in use (a task, a person's control) is refused with
// fault.ErrConflict; a Compose or task desktop too. The next create starts afresh.
//
// Like Act, it runs detached from ctx.
func (m *Manager) DeleteData(ctx context.Context, id string) error {
	eng, err := m.needEngine(ctx)
	if err != nil {
		return err
	}
	return m.detach(ctx, id, "delete data", func(ctx context.Context) error {
		in, err := m.st.VMInstance(id)
		if err != nil {
			return err
		}
		switch in.Scope {
		case scopeCompose:
			return fault.Conflict("%s is managed by Compose: its data is the deployment's (compose.desktops.yaml)", m.describe(in))
		case scopeTask:
			return fault.Conflict("%s is removed with its task", m.describe(in))
		}
		if err := m.refuseBusy(in, "delete the data of"); err != nil {
			return err
		}
		if err := m.removeLocked(ctx, in); err != nil {
			return err
		}
		for _, vol := range []string{in.WorkspaceVol, in.ProfileVol} {
			if vol == "" {
				continue
			}
			if err := eng.RemoveVolume(ctx, vol); err != nil && !errors.Is(err, fault.ErrNotFound) {
				return fmt.Errorf("delete volume %s: %w", vol, err)
			}
		}
		if in, err = m.st.VMInstance(id); err != nil {
			return err
		}
		if err := m.st.DeleteVMInstance(id); err != nil && !errors.Is(err, fault.ErrNotFound) {
			return err
		}
		m.changed(in, in.State, true)
		if err := os.RemoveAll(m.runDir(id)); err != nil {
			m.log.Warn("remove run directory", "instance", id, "err", err)
		}
		m.log.Info("desktop data deleted", "instance", id, "workspace", in.WorkspaceVol, "profile", in.ProfileVol)
		return nil
	})
}
