package vm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"cubicle/backend/engine"
	"cubicle/backend/fault"
	"cubicle/backend/store"
	"cubicle/images/guest/wire"
)

// Task desktops (SPEC §1.3): a temporary task helper works on a task-isolated desktop that is
// created for its task and removed when the task ends. It is a container of the image the
// agent's desktop uses, with its own run directory and no volume at all: its workspace is the
// container's own scratch layer, gone with the container, and the agent's persistent
// workspace and browser profile are never mounted. Its record (scope "task") is written
// before the engine is touched, so it counts against capacity like any running desktop and a
// crash leaves an intent that the next Start completes by removing the desktop. Users cannot
// start, stop, recreate or remove a task desktop: no agent's action resolves to one.

// scopeTask marks a task desktop's record (store.VMInstance.Scope).
const scopeTask = "task"

// RoleTask is the io.cubicle.role label of a task desktop's container.
const RoleTask = "task"

// Labels of a task desktop's container, next to the instance, node and role labels.
const (
	LabelAccount = wire.LabelAccount
	LabelAgent   = wire.LabelAgent
	LabelSession = wire.LabelSession
	LabelTask    = wire.LabelTask
)

// TaskSpec names the task a task desktop is created for. AccountID, AgentID and TaskID are
// required.
type TaskSpec struct {
	AccountID string
	AgentID   string // the agent whose helper runs the task; its desktop's image is used
	SessionID string
	TaskID    string
	Helper    string // the helper's name, for people
}

// TaskInstanceID is the instance id of task taskID's desktop on node.
func TaskInstanceID(node, taskID string) string {
	h := sha256.Sum256([]byte(node + "\x00task\x00" + taskID))
	return "task-" + hex.EncodeToString(h[:8])
}

// CreateTask returns the id of the running task desktop of spec.TaskID, creating and starting
// it when there is none (a second call for the same task returns the same desktop). It is
// refused with fault.ErrConflict when the node's capacity is used up, while an image is
// being prepared, on a Compose node (whose desktops are fixed), or when no image is prepared.
// A desktop that fails to come up is removed before the error returns. Like Act, the work
// runs detached from ctx: a RemoveTask of the same task always runs after it.
func (m *Manager) CreateTask(ctx context.Context, spec TaskSpec) (string, error) {
	if spec.AccountID == "" || spec.AgentID == "" || spec.TaskID == "" {
		return "", fault.Invalid("a task desktop needs an account, an agent and a task")
	}
	if len(m.cfg.Compose) > 0 {
		return "", fault.Conflict("this node runs only the fixed desktops of compose.desktops.yaml, so a task helper " +
			"cannot get a task-isolated desktop here; do the task without a helper")
	}
	if _, err := m.needEngine(ctx); err != nil {
		return "", err
	}
	agentIn, _, err := m.resolve(spec.AccountID, spec.AgentID)
	if err != nil {
		return "", err
	}
	id := TaskInstanceID(m.node, spec.TaskID)
	err = m.detach(ctx, id, "create task desktop", func(ctx context.Context) error {
		if in, err := m.st.VMInstance(id); err == nil {
			if _, ok := m.links.Get(id); ok && in.State == StateRunning {
				return nil // running, and its driver answers
			}
			if in.State == StateRunning {
				if c, found, err := m.findContainer(ctx, in, RoleTask); err == nil && found && c.Running {
					return nil
				}
			}
			// A desktop of this task that died or never came up: start over with a fresh one.
			if err := m.removeTaskLocked(ctx, in.ID); err != nil {
				return err
			}
		}
		now := m.clock.Now().UTC()
		in := store.VMInstance{ID: id, NodeID: m.node, AccountID: spec.AccountID, Scope: scopeTask, AgentID: spec.AgentID,
			Name: spec.Helper, ImageKey: agentIn.ImageKey, ContainerName: "cubicle-" + id, State: StateAbsent, CreatedAt: now}
		if m.engines().mapUsers {
			in.UserNSBase = userNSBase(id)
		}
		if in.ImageKey != "" {
			if _, err := m.st.VMImage(m.node, in.ImageKey); errors.Is(err, fault.ErrNotFound) {
				return fault.Conflict("image %q of the agent's desktop is not prepared on this node: an admin prepares it "+
					"in Settings → Local VM", in.ImageKey)
			}
		}
		labels := map[string]string{LabelAccount: spec.AccountID, LabelAgent: spec.AgentID, LabelSession: spec.SessionID,
			LabelTask: spec.TaskID}
		if err := m.bringUp(ctx, &in, kindTask, labels, false); err != nil {
			return err
		}
		m.log.Info("task desktop running", "instance", id, "helper", spec.Helper, "agent", spec.AgentID)
		return nil
	})
	if err != nil {
		return "", err
	}
	return id, nil
}

// RemoveTask removes task taskID's desktop: its container, run directory and record. Removing
// a task desktop that does not exist succeeds. It never touches a persistent desktop or any
// volume.
//
// The removal runs detached from ctx, after any operation on the task's desktop still under
// way (a creation its caller gave up on included).
func (m *Manager) RemoveTask(ctx context.Context, taskID string) error {
	id := TaskInstanceID(m.node, taskID)
	return m.detach(ctx, id, "remove task desktop", func(ctx context.Context) error { return m.removeTaskLocked(ctx, id) })
}

// removeTaskLocked removes task desktop id (whatever state it is in); the instance lock is held.
func (m *Manager) removeTaskLocked(ctx context.Context, id string) error {
	in, recErr := m.st.VMInstance(id)
	if recErr != nil && !errors.Is(recErr, fault.ErrNotFound) {
		return recErr
	}
	if recErr == nil && in.Scope != scopeTask {
		// Task ids hash into "task-…" ids, which no persistent desktop has; refuse anyway.
		return fault.Conflict("desktop %s is not a task desktop; it is never removed with a task", id)
	}
	m.clearIdle(id)
	m.links.Drop(id)
	if eng := m.engine(); eng != nil {
		start := time.Now()
		ctrs, err := eng.ListContainers(ctx, map[string]string{engine.LabelInstance: id, LabelNode: m.node, LabelRole: RoleTask})
		if err != nil {
			return fmt.Errorf("remove task desktop %s: list containers: %w", id, err)
		}
		removed := 0
		for _, c := range ctrs {
			if !m.owns(c, in, recErr == nil) && c.Labels[LabelStore] != "" {
				continue // another data directory's
			}
			// Stopped first (its own user namespace: see bringUp's replace).
			if err := eng.StopContainer(ctx, c.ID, m.cfg.StopTimeout); err != nil && !errors.Is(err, fault.ErrNotFound) {
				m.log.Warn("stop a task desktop before removing it", "instance", id, "container", c.Name, "err", err)
			}
			if err := eng.RemoveContainer(ctx, c.ID, true); err != nil && !errors.Is(err, fault.ErrNotFound) {
				return fmt.Errorf("remove task desktop %s: %w", id, err)
			}
			removed++
		}
		if removed > 0 || recErr == nil {
			m.log.Info("task desktop removed", "instance", id, "took", time.Since(start).Round(time.Millisecond))
		}
	}
	if err := os.RemoveAll(m.runDir(id)); err != nil {
		m.log.Warn("remove a task desktop's run directory", "instance", id, "err", err)
	}
	m.mu.Lock()
	delete(m.busy, id)
	m.mu.Unlock()
	if err := m.st.DeleteVMInstance(id); err != nil && !errors.Is(err, fault.ErrNotFound) {
		return fmt.Errorf("remove task desktop %s: %w", id, err)
	}
	if recErr == nil {
		prev := in.State
		in.State, in.UpdatedAt = StateAbsent, m.clock.Now().UTC()
		m.changed(in, prev, true)
	}
	return nil
}

// removeTasks removes every task desktop this node's store knows (at start-up: their tasks
// ended with the process that ran them; at Close: they end with it).
func (m *Manager) removeTasks(ctx context.Context) error {
	var errs []error
	for _, in := range m.instancesOrNil() {
		if in.Scope != scopeTask {
			continue
		}
		m.log.Info("removing the task desktop of a helper task that ended with the process", "instance", in.ID, "helper", in.Name)
		unlock := m.lock(in.ID)
		errs = append(errs, m.removeTaskLocked(ctx, in.ID))
		unlock()
	}
	return errors.Join(errs...)
}
