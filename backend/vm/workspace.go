package vm

import (
	"context"
	"errors"
	"fmt"
	"os"

	"cubicle/backend/fault"
	"cubicle/backend/store"
)

// VolumePather is implemented by engines that can say where a named volume's content is
// (podman and docker: the volume's mount point). The path is on the engine's machine: it is
// only usable here when the engine runs on this machine (checked with os.Stat).
type VolumePather interface {
	VolumePath(ctx context.Context, name string) (string, error)
}

// WorkspaceMode says what a workspace operation does to the volume.
type WorkspaceMode int

const (
	// WorkspaceRead reads the workspace (a snapshot, a diff); the desktop may run.
	WorkspaceRead WorkspaceMode = iota
	// WorkspaceReplace replaces the workspace's content (a restore): it is refused while the
	// desktop is in use (an agent's task, a person's control); a running desktop is stopped
	// around it and started again after.
	WorkspaceReplace
	// WorkspaceCreate fills the workspace of a desktop never created (a fork): its volume
	// is created; a desktop that exists already is refused.
	WorkspaceCreate
)

// Workspace is the workspace volume an operation works on.
type Workspace struct {
	Dir      string // the volume's content, a directory on this machine
	Volume   string
	Instance string
	// IDBase is the host id of the desktop's user 0 when the desktop has its own user
	// namespace (0 otherwise): file owners are stored relative to it.
	IDBase int
	// Shared: the account's shared desktop (isolation "shared"), whose workspace all the
	// account's agents use.
	Shared bool
}

// WithWorkspace runs fn on the workspace volume of agentID's desktop, in the desktop's
// operation queue (no start, stop or other workspace operation runs meanwhile). Errors:
// fault.ErrNotFound for an unknown agent or a workspace never created, fault.ErrConflict
// when mode forbids the desktop's state, fault.ErrUnavailable when the engine's volumes are
// not on this machine's disk (an engine in a VM, Kubernetes).
func (m *Manager) WithWorkspace(ctx context.Context, accountID, agentID string, mode WorkspaceMode, fn func(ctx context.Context, ws Workspace) error) error {
	in, _, err := m.resolve(accountID, agentID)
	if err != nil {
		return err
	}
	if in.Scope == scopeCompose {
		return fault.Conflict("this agent uses a fixed desktop managed by Compose: its workspace is the deployment's and has no snapshots")
	}
	eng, err := m.needEngine(ctx)
	if err != nil {
		return err
	}
	vp, ok := eng.(VolumePather)
	if !ok {
		return fault.Unavailable("workspace snapshots need the workspace volume on this machine's disk; this engine keeps volumes elsewhere")
	}
	return m.detach(ctx, in.ID, "workspace", func(ctx context.Context) error {
		cur, err := m.st.VMInstance(in.ID)
		exists := err == nil
		if err != nil && !errors.Is(err, fault.ErrNotFound) {
			return err
		}
		if exists {
			in = cur
		}
		ws := Workspace{Volume: in.WorkspaceVol, Instance: in.ID, IDBase: max(in.UserNSBase, 0), Shared: in.Scope == scopeShared}
		if ws.IDBase == 0 && !exists && m.engines().mapUsers {
			ws.IDBase = userNSBase(in.ID)
		}
		switch mode {
		case WorkspaceCreate:
			if exists && in.ContainerID != "" {
				return fault.Conflict("the new agent's desktop exists already: its workspace is not replaced")
			}
			l := m.labels(in.ID, "volume")
			l[LabelVolume] = "workspace"
			if err := eng.EnsureVolume(ctx, in.WorkspaceVol, l); err != nil {
				return fmt.Errorf("create workspace volume: %w", err)
			}
			if !exists {
				// Record the desktop (absent, no container) so its user namespace and volume are
				// the ones the files were written for.
				in.UserNSBase = ws.IDBase
				if err := m.st.PutVMInstance(in); err != nil {
					return err
				}
			}
		default:
			if !exists {
				return fault.NotFound("this agent's desktop has never been created, so it has no workspace yet; start it first")
			}
		}
		dir, err := vp.VolumePath(ctx, in.WorkspaceVol)
		if errors.Is(err, fault.ErrNotFound) {
			return fault.NotFound("this agent's workspace volume %s does not exist; start its desktop first", in.WorkspaceVol)
		}
		if err != nil {
			return fmt.Errorf("workspace volume %s: %w", in.WorkspaceVol, err)
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fault.Unavailable("workspace snapshots need the workspace volume on this machine's disk; the engine keeps it at %s, "+
				"which this process cannot reach (an engine in a VM or on another host)", dir)
		}
		ws.Dir = dir
		if mode != WorkspaceReplace {
			return fn(ctx, ws)
		}
		return m.replaceWorkspace(ctx, in, ws, fn)
	})
}

// replaceWorkspace runs fn with the desktop stopped (the caller holds the instance's queue):
// refused while it is in use, a running desktop is stopped first and started again after,
// whether fn succeeded or not.
func (m *Manager) replaceWorkspace(ctx context.Context, in store.VMInstance, ws Workspace, fn func(ctx context.Context, ws Workspace) error) error {
	if err := m.refuseBusy(in, "restore the workspace of"); err != nil {
		return err
	}
	switch in.State {
	case StateCreating, StateStarting, StateStopping, StateRemoving:
		return fault.Conflict("the desktop is %s; restore its workspace once it has settled", in.State)
	}
	restart := in.State == StateRunning || in.State == StatePaused
	if restart {
		if err := m.stopLocked(ctx, in.ID, false); err != nil {
			return fmt.Errorf("stop the desktop before the restore: %w", err)
		}
	}
	err := fn(ctx, ws)
	if restart {
		cur, gerr := m.st.VMInstance(in.ID)
		if gerr == nil {
			gerr = m.bringUp(ctx, &cur, kindDesktop, nil, false)
		}
		if gerr != nil {
			m.log.Warn("desktop not started again after a workspace restore", "instance", in.ID, "err", gerr)
			if err == nil {
				err = fmt.Errorf("the workspace was restored, but the desktop did not start again: %w", gerr)
			}
		}
	}
	return err
}
