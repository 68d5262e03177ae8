// Package workspace is agents' workspace snapshots as the server offers them (issue 25,
// docs/snapshots.md): the snapshot store in <data>/snapshots over the workspace volumes the
// local VM manager reaches on this machine's disk, the API's list, take, restore, delete,
// diff, policy and fork with their agent checks (Snapshots implements api.Snapshots), and the
// turn hooks that take one at the start and end of each chat turn that works on the Local VM
// (recorded in the execution history, the chat's undo).
//
// Where the volume is. A snapshot reads and restores the workspace volume's content where the
// engine keeps it (its mount point, `podman volume inspect`), not through the desktop: a
// stopped desktop has a workspace too (a restore needs it stopped), and the host reads files
// at disk speed (the guest exec path would stream every byte through the driver's link). An
// engine whose volumes are not on this machine (Podman machine, Docker Desktop, Kubernetes)
// is refused with fault.ErrUnavailable; desktops on a runner too (the snapshot store would
// have to be on the runner: not built yet).
//
// The root package (backend) wires Snapshots: it hands it the store, the VM manager, the
// turns' computer plans and the nodes' names, and calls the turn hooks from the runtime's
// (chat.go). Methods are safe for concurrent use; Close closes the snapshot store.
package workspace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"cubicle/backend/agent"
	"cubicle/backend/computer"
	"cubicle/backend/fault"
	"cubicle/backend/fleet"
	"cubicle/backend/nodes"
	"cubicle/backend/snapshot"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// Store is what Snapshots reads and writes of the store (*store.Store): agents, and the
// turns' snapshots recorded in the execution history.
type Store interface {
	Agent(id string) (store.Agent, error)
	PutToolRun(r store.ToolRun) error
}

// Volumes reaches the workspace volumes of the local node's desktops (*vm.Manager). Its
// errors are the manager's: fault.ErrNotFound for a workspace never created,
// fault.ErrConflict when mode forbids the desktop's state, fault.ErrUnavailable when the
// engine's volumes are not on this machine's disk.
type Volumes interface {
	WithWorkspace(ctx context.Context, accountID, agentID string, mode vm.WorkspaceMode, fn func(ctx context.Context, ws vm.Workspace) error) error
}

// Plans gives a turn's computer plan (*fleet.Computers): only turns on the desktop (VM)
// are snapshotted.
type Plans interface {
	TurnPlan(ctx context.Context, t agent.TurnInfo) (computer.Plan, error)
}

// Labels names a node for people (*fleet.Fleet), in the refusal of a runner's agent.
type Labels interface {
	Label(node string) string
}

var (
	_ Store   = (*store.Store)(nil)
	_ Volumes = (*vm.Manager)(nil)
	_ Plans   = (*fleet.Computers)(nil)
	_ Labels  = (*fleet.Fleet)(nil)
)

// Config configures Snapshots. Dir, Store, Plans and Labels are required.
type Config struct {
	// Dir is the snapshot store's directory (normally <data>/snapshots).
	Dir   string
	Store Store
	// Volumes is the local node's workspace volumes; nil: this server has no Local VM (every
	// agent's snapshots are refused as unavailable, and no turn takes one).
	Volumes Volumes
	Plans   Plans
	Labels  Labels
	Logger  *slog.Logger
}

// Snapshots are agents' workspace snapshots: the store, the agent checks the API needs and
// the turn hooks.
type Snapshots struct {
	cfg Config
	st  *snapshot.Store
	log *slog.Logger

	mu     sync.Mutex
	before map[string]string // main turn id → the snapshot of the workspace as the turn found it; guarded by mu
}

// New opens the snapshot store in cfg.Dir.
func New(cfg Config) (*Snapshots, error) {
	if cfg.Dir == "" || cfg.Store == nil || cfg.Plans == nil || cfg.Labels == nil {
		return nil, errors.New("workspace: Config.Dir, Store, Plans and Labels are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	st, err := snapshot.Open(snapshot.Config{Dir: cfg.Dir, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	return &Snapshots{cfg: cfg, st: st, log: cfg.Logger, before: map[string]string{}}, nil
}

// Close closes the snapshot store; call it after the VM manager is closed (no workspace
// operation runs).
func (s *Snapshots) Close() error { return s.st.Close() }

// Store is the snapshot store itself (the tests read manifests and records through it).
func (s *Snapshots) Store() *snapshot.Store { return s.st }

// agent returns accountID's agent agentID, refusing agents whose desktop is not on this
// machine.
func (s *Snapshots) agent(accountID, agentID string) (store.Agent, error) {
	a, err := s.cfg.Store.Agent(agentID)
	if err != nil || a.AccountID != accountID {
		return store.Agent{}, fault.NotFound("agent %q not found", agentID)
	}
	if fleet.NodeOf(a) != nodes.LocalID {
		return store.Agent{}, fault.Unavailable("workspace snapshots are kept on the machine that holds the desktop, and this "+
			"agent's desktop is on runner %s: snapshots of runner desktops are not supported yet", s.cfg.Labels.Label(a.NodeID))
	}
	if s.cfg.Volumes == nil {
		return store.Agent{}, fault.Unavailable("Local VM is not available on this server, so there is no workspace to snapshot")
	}
	return a, nil
}

// classify gives damaged snapshot data a class a person is shown.
func classify(err error) error {
	if errors.Is(err, snapshot.ErrCorrupt) && fault.Class(err) == nil {
		return fault.Conflict("the snapshot's stored data is damaged, so it was not restored (the workspace is unchanged): %v", err)
	}
	return err
}

// List is agentID's snapshots, newest first (api.Snapshots).
func (s *Snapshots) List(ctx context.Context, accountID, agentID string) ([]snapshot.Snapshot, error) {
	if _, err := s.agent(accountID, agentID); err != nil {
		return nil, err
	}
	return s.st.List(agentID)
}

// Take snapshots agentID's workspace now, named name (api.Snapshots).
func (s *Snapshots) Take(ctx context.Context, accountID, agentID, name string) (snapshot.Snapshot, error) {
	if _, err := s.agent(accountID, agentID); err != nil {
		return snapshot.Snapshot{}, err
	}
	if err := snapshot.ValidName(name); err != nil {
		return snapshot.Snapshot{}, err
	}
	var sn snapshot.Snapshot
	err := s.cfg.Volumes.WithWorkspace(ctx, accountID, agentID, vm.WorkspaceRead, func(ctx context.Context, ws vm.Workspace) error {
		var err error
		sn, _, err = s.st.Take(ctx, agentID, ws.Dir, snapshot.Options{Name: name, Kind: snapshot.KindManual, IDBase: ws.IDBase})
		return err
	})
	return sn, err
}

// snapshotOf returns agentID's snapshot sid after checking the agent.
func (s *Snapshots) snapshotOf(accountID, agentID, sid string) (snapshot.Snapshot, error) {
	if _, err := s.agent(accountID, agentID); err != nil {
		return snapshot.Snapshot{}, err
	}
	return s.st.Get(agentID, sid)
}

// Restore makes agentID's workspace snapshot sid again (api.Snapshots): the workspace as it
// is is snapshotted first (unless an existing snapshot has that content), so the restore can
// itself be undone.
func (s *Snapshots) Restore(ctx context.Context, accountID, agentID, sid string) (snapshot.RestoreResult, error) {
	sn, err := s.snapshotOf(accountID, agentID, sid)
	if err != nil {
		return snapshot.RestoreResult{}, err
	}
	res := snapshot.RestoreResult{Restored: sn}
	err = s.cfg.Volumes.WithWorkspace(ctx, accountID, agentID, vm.WorkspaceReplace, func(ctx context.Context, ws vm.Workspace) error {
		prev, _, err := s.st.Take(ctx, agentID, ws.Dir, snapshot.Options{Kind: snapshot.KindSafety, SkipUnchanged: true, IDBase: ws.IDBase})
		if err != nil {
			return fmt.Errorf("snapshot the workspace before the restore: %w", err)
		}
		res.Previous = prev.ID
		return s.st.Replace(ctx, agentID, sid, ws.Dir, ws.IDBase)
	})
	if err != nil {
		return snapshot.RestoreResult{}, classify(err)
	}
	return res, nil
}

// Delete removes agentID's snapshot sid and the chunks nothing else uses (api.Snapshots).
func (s *Snapshots) Delete(ctx context.Context, accountID, agentID, sid string) error {
	if _, err := s.snapshotOf(accountID, agentID, sid); err != nil {
		return err
	}
	if err := s.st.Delete(agentID, sid); err != nil {
		return err
	}
	if _, err := s.st.GC(ctx); err != nil {
		s.log.Warn("snapshot gc", "err", err)
	}
	return nil
}

// Diff compares agentID's snapshot sid with its workspace now (api.Snapshots).
func (s *Snapshots) Diff(ctx context.Context, accountID, agentID, sid string) (snapshot.Diff, error) {
	if _, err := s.snapshotOf(accountID, agentID, sid); err != nil {
		return snapshot.Diff{}, err
	}
	var d snapshot.Diff
	err := s.cfg.Volumes.WithWorkspace(ctx, accountID, agentID, vm.WorkspaceRead, func(ctx context.Context, ws vm.Workspace) error {
		var err error
		d, err = s.st.Diff(ctx, agentID, sid, ws.Dir, ws.IDBase)
		return err
	})
	return d, classify(err)
}

// Policy is agentID's retention policy (api.Snapshots).
func (s *Snapshots) Policy(ctx context.Context, accountID, agentID string) (snapshot.Policy, error) {
	if _, err := s.agent(accountID, agentID); err != nil {
		return snapshot.Policy{}, err
	}
	return s.st.Policy(agentID)
}

// SetPolicy sets agentID's retention policy and applies it (api.Snapshots).
func (s *Snapshots) SetPolicy(ctx context.Context, accountID, agentID string, p snapshot.Policy) (snapshot.Policy, error) {
	if _, err := s.agent(accountID, agentID); err != nil {
		return snapshot.Policy{}, err
	}
	if _, err := s.st.SetPolicy(ctx, agentID, p); err != nil {
		return snapshot.Policy{}, err
	}
	return p, nil
}

// CheckFork checks that a fork from agentID's snapshot sid can start (api.Snapshots).
func (s *Snapshots) CheckFork(ctx context.Context, accountID, agentID, sid string) error {
	_, err := s.snapshotOf(accountID, agentID, sid)
	return err
}

// Fork creates newAgentID's workspace volume and fills it with agentID's snapshot sid, which
// becomes the new agent's first snapshot (api.Snapshots).
func (s *Snapshots) Fork(ctx context.Context, accountID, agentID, sid, newAgentID string) error {
	if _, err := s.snapshotOf(accountID, agentID, sid); err != nil {
		return err
	}
	if _, err := s.agent(accountID, newAgentID); err != nil {
		return err
	}
	err := s.cfg.Volumes.WithWorkspace(ctx, accountID, newAgentID, vm.WorkspaceCreate, func(ctx context.Context, ws vm.Workspace) error {
		if ws.Shared {
			return fault.Conflict("desktops are shared per account on this node (isolation \"shared\"): a fork would overwrite the " +
				"workspace every agent of the account uses; an administrator can switch to one desktop per agent")
		}
		if err := s.st.Replace(ctx, agentID, sid, ws.Dir, ws.IDBase); err != nil {
			return err
		}
		_, err := s.st.Copy(agentID, sid, newAgentID, snapshot.KindFork, "")
		return err
	})
	return classify(err)
}

// Forget removes an agent's snapshots (the agent was deleted).
func (s *Snapshots) Forget(agentID string) {
	if err := s.st.DeleteOwner(agentID); err != nil {
		s.log.Warn("remove a deleted agent's snapshots", "agent", agentID, "err", err)
		return
	}
	if _, err := s.st.GC(context.Background()); err != nil {
		s.log.Warn("snapshot gc", "err", err)
	}
}
