package backend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/api"
	"cubicle/backend/fault"
	"cubicle/backend/fleet"
	"cubicle/backend/nodes"
	"cubicle/backend/snapshot"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

var _ api.Snapshots = (*snapshots)(nil)

// snapshots are agents' workspace snapshots (issue 25): the store in <DataDir>/snapshots,
// the workspace volumes the local VM manager reaches on this machine's disk, and the turn
// hooks that take one at the start and end of each turn that works on the Local VM.
//
// Where the volume is. The snapshot reads and restores the workspace volume's content where
// the engine keeps it (its mount point, `podman volume inspect`), not through the desktop: a
// stopped desktop has a workspace too (a restore needs it stopped), and the host reads files
// at disk speed (the guest exec path would stream every byte through the driver's link). An
// engine whose volumes are not on this machine (Podman machine, Docker Desktop, Kubernetes)
// is refused with fault.ErrUnavailable; desktops on a runner too (the snapshot store would
// have to be on the runner: not built yet).
type snapshots struct {
	b   *Backend
	st  *snapshot.Store
	log *slog.Logger

	mu     sync.Mutex
	before map[string]string // main turn id → the snapshot of the workspace as the turn found it; guarded by mu
}

func newSnapshots(b *Backend) (*snapshots, error) {
	log := b.log.With("svc", "snapshot")
	st, err := snapshot.Open(snapshot.Config{Dir: filepath.Join(b.cfg.DataDir, "snapshots"), Logger: log})
	if err != nil {
		return nil, err
	}
	return &snapshots{b: b, st: st, log: log, before: map[string]string{}}, nil
}

func (s *snapshots) close() error { return s.st.Close() }

// agent returns accountID's agent agentID, refusing agents whose desktop is not on this
// machine.
func (s *snapshots) agent(accountID, agentID string) (store.Agent, error) {
	a, err := s.b.Store.Agent(agentID)
	if err != nil || a.AccountID != accountID {
		return store.Agent{}, fault.NotFound("agent %q not found", agentID)
	}
	if fleet.NodeOf(a) != nodes.LocalID {
		return store.Agent{}, fault.Unavailable("workspace snapshots are kept on the machine that holds the desktop, and this "+
			"agent's desktop is on runner %s: snapshots of runner desktops are not supported yet", s.b.fleet.Label(a.NodeID))
	}
	if s.b.VMs == nil {
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

// List implements api.Snapshots.
func (s *snapshots) List(ctx context.Context, accountID, agentID string) ([]snapshot.Snapshot, error) {
	if _, err := s.agent(accountID, agentID); err != nil {
		return nil, err
	}
	return s.st.List(agentID)
}

// Take implements api.Snapshots.
func (s *snapshots) Take(ctx context.Context, accountID, agentID, name string) (snapshot.Snapshot, error) {
	if _, err := s.agent(accountID, agentID); err != nil {
		return snapshot.Snapshot{}, err
	}
	if err := snapshot.ValidName(name); err != nil {
		return snapshot.Snapshot{}, err
	}
	var sn snapshot.Snapshot
	err := s.b.VMs.WithWorkspace(ctx, accountID, agentID, vm.WorkspaceRead, func(ctx context.Context, ws vm.Workspace) error {
		var err error
		sn, _, err = s.st.Take(ctx, agentID, ws.Dir, snapshot.Options{Name: name, Kind: snapshot.KindManual, IDBase: ws.IDBase})
		return err
	})
	return sn, err
}

// snapshotOf returns agentID's snapshot sid after checking the agent.
func (s *snapshots) snapshotOf(accountID, agentID, sid string) (snapshot.Snapshot, error) {
	if _, err := s.agent(accountID, agentID); err != nil {
		return snapshot.Snapshot{}, err
	}
	return s.st.Get(agentID, sid)
}

// Restore implements api.Snapshots: the workspace as it is is snapshotted first (unless an
// existing snapshot has that content), so the restore can itself be undone.
func (s *snapshots) Restore(ctx context.Context, accountID, agentID, sid string) (api.RestoreResult, error) {
	sn, err := s.snapshotOf(accountID, agentID, sid)
	if err != nil {
		return api.RestoreResult{}, err
	}
	res := api.RestoreResult{Restored: sn}
	err = s.b.VMs.WithWorkspace(ctx, accountID, agentID, vm.WorkspaceReplace, func(ctx context.Context, ws vm.Workspace) error {
		prev, _, err := s.st.Take(ctx, agentID, ws.Dir, snapshot.Options{Kind: snapshot.KindSafety, SkipUnchanged: true, IDBase: ws.IDBase})
		if err != nil {
			return fmt.Errorf("snapshot the workspace before the restore: %w", err)
		}
		res.Previous = prev.ID
		return s.st.Replace(ctx, agentID, sid, ws.Dir, ws.IDBase)
	})
	if err != nil {
		return api.RestoreResult{}, classify(err)
	}
	return res, nil
}

// Delete implements api.Snapshots.
func (s *snapshots) Delete(ctx context.Context, accountID, agentID, sid string) error {
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

// Diff implements api.Snapshots.
func (s *snapshots) Diff(ctx context.Context, accountID, agentID, sid string) (snapshot.Diff, error) {
	if _, err := s.snapshotOf(accountID, agentID, sid); err != nil {
		return snapshot.Diff{}, err
	}
	var d snapshot.Diff
	err := s.b.VMs.WithWorkspace(ctx, accountID, agentID, vm.WorkspaceRead, func(ctx context.Context, ws vm.Workspace) error {
		var err error
		d, err = s.st.Diff(ctx, agentID, sid, ws.Dir, ws.IDBase)
		return err
	})
	return d, classify(err)
}

// Policy implements api.Snapshots.
func (s *snapshots) Policy(ctx context.Context, accountID, agentID string) (snapshot.Policy, error) {
	if _, err := s.agent(accountID, agentID); err != nil {
		return snapshot.Policy{}, err
	}
	return s.st.Policy(agentID)
}

// SetPolicy implements api.Snapshots.
func (s *snapshots) SetPolicy(ctx context.Context, accountID, agentID string, p snapshot.Policy) (snapshot.Policy, error) {
	if _, err := s.agent(accountID, agentID); err != nil {
		return snapshot.Policy{}, err
	}
	if _, err := s.st.SetPolicy(ctx, agentID, p); err != nil {
		return snapshot.Policy{}, err
	}
	return p, nil
}

// CheckFork implements api.Snapshots.
func (s *snapshots) CheckFork(ctx context.Context, accountID, agentID, sid string) error {
	_, err := s.snapshotOf(accountID, agentID, sid)
	return err
}

// Fork implements api.Snapshots: newAgentID's workspace volume is created and filled with
// the snapshot, which becomes the new agent's first snapshot.
func (s *snapshots) Fork(ctx context.Context, accountID, agentID, sid, newAgentID string) error {
	if _, err := s.snapshotOf(accountID, agentID, sid); err != nil {
		return err
	}
	if _, err := s.agent(accountID, newAgentID); err != nil {
		return err
	}
	err := s.b.VMs.WithWorkspace(ctx, accountID, newAgentID, vm.WorkspaceCreate, func(ctx context.Context, ws vm.Workspace) error {
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

// forget removes an agent's snapshots (the agent was deleted).
func (s *snapshots) forget(agentID string) {
	if err := s.st.DeleteOwner(agentID); err != nil {
		s.log.Warn("remove a deleted agent's snapshots", "agent", agentID, "err", err)
		return
	}
	if _, err := s.st.GC(context.Background()); err != nil {
		s.log.Warn("snapshot gc", "err", err)
	}
}

// turnTimeout bounds the snapshots a turn takes at its start and end.
const turnTimeout = 2 * time.Minute

// usesWorkspace says whether turn t works on its agent's Local VM workspace: main-agent chat
// turns on the local node (a helper's task desktop has none; a direct call is not a chat turn
// with a reply to undo from).
func (s *snapshots) usesWorkspace(ctx context.Context, t agent.TurnInfo) (store.Agent, bool) {
	if t.AgentID == "" || t.Helper != "" || t.TaskID != "" || t.Via != "" {
		return store.Agent{}, false
	}
	a, err := s.b.Store.Agent(t.AgentID)
	if err != nil || fleet.NodeOf(a) != nodes.LocalID || s.b.VMs == nil {
		return store.Agent{}, false
	}
	p, err := s.b.computers.TurnPlan(ctx, t)
	if err != nil || !p.VM {
		return store.Agent{}, false
	}
	return a, true
}

// turnStarted snapshots the workspace as the turn finds it, unless the newest snapshot has
// that content (then that one is the turn's "before"). A workspace not there yet (no desktop
// ever created) has no "before": that turn is not undoable. It never fails the turn.
func (s *snapshots) turnStarted(ctx context.Context, t agent.TurnInfo) {
	a, ok := s.usesWorkspace(ctx, t)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, turnTimeout)
	defer cancel()
	err := s.b.VMs.WithWorkspace(ctx, a.AccountID, a.ID, vm.WorkspaceRead, func(ctx context.Context, ws vm.Workspace) error {
		sn, _, err := s.st.Take(ctx, a.ID, ws.Dir, snapshot.Options{Kind: snapshot.KindTurn, Name: "Before a turn", SessionID: t.SessionID,
			SkipUnchanged: true, IDBase: ws.IDBase})
		if err == nil {
			s.mu.Lock()
			s.before[t.MainTurnID] = sn.ID
			s.mu.Unlock()
		}
		return err
	})
	if err != nil && !errors.Is(err, fault.ErrNotFound) {
		s.log.Warn("workspace snapshot at the turn's start", "agent", a.ID, "turn", t.TurnID, "err", err)
	}
}

// turnEnded snapshots the workspace after the turn when the turn changed it, naming the
// turn's reply and its "before" snapshot (the chat's undo), and records the tree's SHA-256 in
// the execution history (tool "workspace.snapshot": input = the tree before, output = after).
// a and ok are usesWorkspace's answer, asked before the turn's plan was forgotten.
func (s *snapshots) turnEnded(t agent.TurnInfo, a store.Agent, ok bool) {
	s.mu.Lock()
	before, hadBefore := s.before[t.MainTurnID]
	delete(s.before, t.MainTurnID)
	s.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), turnTimeout)
	defer cancel()
	start := time.Now()
	var sn, prev snapshot.Snapshot
	taken := false
	err := s.b.VMs.WithWorkspace(ctx, a.AccountID, a.ID, vm.WorkspaceRead, func(ctx context.Context, ws vm.Workspace) error {
		var err error
		if hadBefore {
			if prev, err = s.st.Get(a.ID, before); err != nil {
				hadBefore = false
			}
		}
		sn, taken, err = s.st.Take(ctx, a.ID, ws.Dir, snapshot.Options{Kind: snapshot.KindTurn, SessionID: t.SessionID, TurnID: t.TurnID,
			ReplyID: t.ReplyID, Before: before, SkipUnchanged: true, IDBase: ws.IDBase})
		return err
	})
	if err != nil {
		if !errors.Is(err, fault.ErrNotFound) {
			s.log.Warn("workspace snapshot at the turn's end", "agent", a.ID, "turn", t.TurnID, "err", err)
		}
		return
	}
	if !taken {
		return // the turn did not change the workspace
	}
	in := prev.TreeSHA256
	if !hadBefore {
		sum := sha256.Sum256(nil)
		in = hex.EncodeToString(sum[:])
	}
	out := sn.TreeSHA256
	now := time.Now().UTC()
	run := store.ToolRun{ID: agent.NewID(), SessionID: t.SessionID, UserID: t.UserID, TurnID: t.TurnID, Step: t.Step + 1,
		Tool: "workspace.snapshot", InputSHA256: in, OutputSHA256: &out, Status: store.RunSuccess,
		DurationMs: time.Since(start).Milliseconds(), CreatedAt: now, UpdatedAt: now}
	if err := s.b.Store.PutToolRun(run); err != nil {
		s.log.Warn("record the workspace snapshot in the history", "snapshot", sn.ID, "err", err)
	}
}
