package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"cubicle/backend/agent"
	"cubicle/backend/fault"
	"cubicle/backend/fleet"
	"cubicle/backend/nodes"
	"cubicle/backend/snapshot"
	"cubicle/backend/store"
	"cubicle/backend/vm"
)

// turnTimeout bounds the snapshots a turn takes at its start and end.
const turnTimeout = 2 * time.Minute

// historyTool is the execution history's tool name of a turn's workspace snapshot (input:
// the tree's SHA-256 before the turn, output: after).
const historyTool = "workspace.snapshot"

// usesWorkspace says whether turn t works on its agent's Local VM workspace: main-agent chat
// turns on the local node (a helper's task desktop has none; a direct call is not a chat turn
// with a reply to undo from).
func (s *Snapshots) usesWorkspace(ctx context.Context, t agent.TurnInfo) (store.Agent, bool) {
	if t.AgentID == "" || t.Helper != "" || t.TaskID != "" || t.Via != "" {
		return store.Agent{}, false
	}
	a, err := s.cfg.Store.Agent(t.AgentID)
	if err != nil || fleet.NodeOf(a) != nodes.LocalID || s.cfg.Volumes == nil {
		return store.Agent{}, false
	}
	p, err := s.cfg.Plans.TurnPlan(ctx, t)
	if err != nil || !p.VM {
		return store.Agent{}, false
	}
	return a, true
}

// TurnStarted snapshots the workspace as turn t finds it, unless the newest snapshot has
// that content (then that one is the turn's "before"). A workspace not there yet (no desktop
// ever created) has no "before": that turn is not undoable. It never fails the turn.
func (s *Snapshots) TurnStarted(ctx context.Context, t agent.TurnInfo) {
	a, ok := s.usesWorkspace(ctx, t)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, turnTimeout)
	defer cancel()
	err := s.cfg.Volumes.WithWorkspace(ctx, a.AccountID, a.ID, vm.WorkspaceRead, func(ctx context.Context, ws vm.Workspace) error {
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

// TurnEnded snapshots the workspace after turn t when the turn changed it, naming the turn's
// reply and its "before" snapshot (the chat's undo), and records the tree's SHA-256 in the
// execution history (tool "workspace.snapshot": input = the tree before, output = after). release (the
// computer gate's TurnEnded: the desktop is released, the turn's plan forgotten) runs in
// between: after the turn's plan was asked whether the turn worked on the workspace, before
// the snapshot is taken. It never fails the turn.
func (s *Snapshots) TurnEnded(t agent.TurnInfo, release func(agent.TurnInfo)) {
	a, ok := s.usesWorkspace(context.Background(), t) // asked before the turn's plan is forgotten
	release(t)
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
	err := s.cfg.Volumes.WithWorkspace(ctx, a.AccountID, a.ID, vm.WorkspaceRead, func(ctx context.Context, ws vm.Workspace) error {
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
		Tool: historyTool, InputSHA256: in, OutputSHA256: &out, Status: store.RunSuccess,
		DurationMs: time.Since(start).Milliseconds(), CreatedAt: now, UpdatedAt: now}
	if err := s.cfg.Store.PutToolRun(run); err != nil {
		s.log.Warn("record the workspace snapshot in the history", "snapshot", sn.ID, "err", err)
	}
}
