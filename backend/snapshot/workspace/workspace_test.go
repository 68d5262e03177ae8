package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/computer"
	"cubicle/backend/fault"
	"cubicle/backend/snapshot"
	"cubicle/backend/store"
	"cubicle/backend/vm"
	"cubicle/internal/testenv"
)

// fakeStore holds agents and the tool runs recorded.
type fakeStore struct {
	mu     sync.Mutex
	agents map[string]store.Agent
	runs   []store.ToolRun
}

func (f *fakeStore) Agent(id string) (store.Agent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.agents[id]
	if !ok {
		return store.Agent{}, fault.NotFound("agent %q not found", id)
	}
	return a, nil
}

func (f *fakeStore) PutToolRun(r store.ToolRun) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs = append(f.runs, r)
	return nil
}

func (f *fakeStore) toolRuns() []store.ToolRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]store.ToolRun(nil), f.runs...)
}

// fakeVolumes are workspace volumes as directories: an agent's is dirs/<agent id>, there
// once created (WorkspaceCreate) or made by the test; shared marks isolation "shared".
type fakeVolumes struct {
	dirs   string
	shared bool
}

func (v fakeVolumes) WithWorkspace(ctx context.Context, accountID, agentID string, mode vm.WorkspaceMode, fn func(context.Context, vm.Workspace) error) error {
	dir := filepath.Join(v.dirs, agentID)
	if mode == vm.WorkspaceCreate {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	} else if _, err := os.Stat(dir); err != nil {
		return fault.NotFound("agent %s has no workspace yet", agentID)
	}
	return fn(ctx, vm.Workspace{Dir: dir, Volume: agentID + "-workspace", Shared: v.shared})
}

// fakePlans gives every turn the same computer.
type fakePlans struct{ vm bool }

func (p fakePlans) TurnPlan(context.Context, agent.TurnInfo) (computer.Plan, error) {
	return computer.Plan{VM: p.vm}, nil
}

type fakeLabels struct{}

func (fakeLabels) Label(node string) string { return `runner "mac-mini" (` + node + `)` }

type testEnv struct {
	*Snapshots
	st   *fakeStore
	vols fakeVolumes
}

// newTestEnv is Snapshots over fake agents (ada and bea of account acc, cy of acc on runner
// r-1), workspaces in a temporary directory and turns on the desktop.
func newTestEnv(t *testing.T, cfg Config) testEnv {
	t.Helper()
	st := &fakeStore{agents: map[string]store.Agent{
		"ada": {ID: "ada", AccountID: "acc"},
		"bea": {ID: "bea", AccountID: "acc"},
		"cy":  {ID: "cy", AccountID: "acc", NodeID: "r-1"},
	}}
	vols := fakeVolumes{dirs: t.TempDir()}
	cfg.Dir, cfg.Store, cfg.Labels = t.TempDir(), st, fakeLabels{}
	cfg.Logger = testenv.Logger(t, slog.LevelInfo)
	if cfg.Volumes == nil {
		cfg.Volumes = vols
	}
	if cfg.Plans == nil {
		cfg.Plans = fakePlans{vm: true}
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return testEnv{Snapshots: s, st: st, vols: vols}
}

// write makes agentID's workspace hold file name with content.
func (e testEnv) write(t *testing.T, agentID, name, content string) {
	t.Helper()
	dir := filepath.Join(e.vols.dirs, agentID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e testEnv) read(t *testing.T, agentID, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.vols.dirs, agentID, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAgentChecks: every method refuses another account's agent as a missing one, and an
// agent whose desktop is not on this machine as unavailable, saying where it is.
func TestAgentChecks(t *testing.T) {
	e := newTestEnv(t, Config{})
	noVM := newTestEnv(t, Config{})
	noVM.cfg.Volumes = nil
	for _, tc := range []struct {
		name             string
		s                *Snapshots
		account, agentID string
		class            error
		says             string
	}{
		{"unknown agent", e.Snapshots, "acc", "nope", fault.ErrNotFound, `agent "nope" not found`},
		{"another account's agent", e.Snapshots, "other", "ada", fault.ErrNotFound, `agent "ada" not found`},
		{"agent on a runner", e.Snapshots, "acc", "cy", fault.ErrUnavailable, `on runner runner "mac-mini" (r-1)`},
		{"no Local VM", noVM.Snapshots, "acc", "ada", fault.ErrUnavailable, "Local VM is not available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			errs := map[string]error{}
			_, errs["List"] = tc.s.List(ctx, tc.account, tc.agentID)
			_, errs["Take"] = tc.s.Take(ctx, tc.account, tc.agentID, "mine")
			_, errs["Restore"] = tc.s.Restore(ctx, tc.account, tc.agentID, "x")
			errs["Delete"] = tc.s.Delete(ctx, tc.account, tc.agentID, "x")
			_, errs["Diff"] = tc.s.Diff(ctx, tc.account, tc.agentID, "x")
			_, errs["Policy"] = tc.s.Policy(ctx, tc.account, tc.agentID)
			_, errs["SetPolicy"] = tc.s.SetPolicy(ctx, tc.account, tc.agentID, snapshot.Policy{})
			errs["CheckFork"] = tc.s.CheckFork(ctx, tc.account, tc.agentID, "x")
			for name, err := range errs {
				if !errors.Is(err, tc.class) || !strings.Contains(err.Error(), tc.says) {
					t.Errorf("%s: %v; want %v saying %q", name, err, tc.class, tc.says)
				}
			}
		})
	}
}

// TestTurnsAreUndoable: a turn on the desktop that changes the workspace leaves a snapshot
// naming its reply and the snapshot it started from, recorded in the history with the trees'
// hashes; a turn that changes nothing, a helper's turn and a turn without the desktop take
// none. The computer gate's release runs at every turn's end.
func TestTurnsAreUndoable(t *testing.T) {
	e := newTestEnv(t, Config{})
	ctx := t.Context()
	e.write(t, "ada", "notes.txt", "first")
	released := 0
	release := func(agent.TurnInfo) { released++ }
	turn := agent.TurnInfo{AgentID: "ada", SessionID: "s1", MainTurnID: "t1", TurnID: "t1", ReplyID: "r1", UserID: "acc", Step: 2}

	e.TurnStarted(ctx, turn)
	e.write(t, "ada", "notes.txt", "changed by the turn")
	e.TurnEnded(turn, release)

	list, err := e.List(ctx, "acc", "ada")
	if err != nil || len(list) != 2 {
		t.Fatalf("snapshots after a changing turn: %+v %v; want before and after", list, err)
	}
	after, before := list[0], list[1]
	if after.Kind != snapshot.KindTurn || after.ReplyID != "r1" || after.Before != before.ID || before.Name != "Before a turn" {
		t.Fatalf("the turn's snapshots: after %+v, before %+v", after, before)
	}
	runs := e.st.toolRuns()
	if len(runs) != 1 {
		t.Fatalf("history: %+v, want one workspace.snapshot run", runs)
	}
	if r := runs[0]; r.Tool != "workspace.snapshot" || r.InputSHA256 != before.TreeSHA256 || r.OutputSHA256 == nil ||
		*r.OutputSHA256 != after.TreeSHA256 || r.Step != 3 || r.TurnID != "t1" || r.Status != store.RunSuccess {
		t.Fatalf("the history's run: %+v", r)
	}

	// Undo: restoring the turn's "before" gives the workspace back, and is undoable itself.
	res, err := e.Restore(ctx, "acc", "ada", after.Before)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.read(t, "ada", "notes.txt"); got != "first" {
		t.Fatalf("restored notes.txt = %q", got)
	}
	if res.Restored.ID != before.ID || res.Previous != after.ID {
		t.Fatalf("restore result %+v: want restored %s, previous %s (the workspace equalled it)", res, before.ID, after.ID)
	}

	count := func() int { l, _ := e.Store().List("ada"); return len(l) }
	for _, tc := range []struct {
		name string
		turn agent.TurnInfo
		plan bool // the turn's plan is the desktop
		uses bool // the turn works on ada's workspace (its start may take a "before")
		edit bool // the turn changes ada's workspace
	}{
		{"a turn that changes nothing", agent.TurnInfo{AgentID: "ada", MainTurnID: "t2", TurnID: "t2"}, true, true, false},
		{"a helper's turn", agent.TurnInfo{AgentID: "ada", MainTurnID: "t3", TurnID: "t3", Helper: "h"}, true, false, true},
		{"a direct call", agent.TurnInfo{AgentID: "ada", MainTurnID: "t4", TurnID: "t4", Via: "mcp"}, true, false, true},
		{"a turn without the desktop", agent.TurnInfo{AgentID: "ada", MainTurnID: "t5", TurnID: "t5"}, false, false, true},
		{"an agent on a runner", agent.TurnInfo{AgentID: "cy", MainTurnID: "t6", TurnID: "t6"}, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.cfg.Plans = fakePlans{vm: tc.plan}
			n0, runs, rel := count(), len(e.st.toolRuns()), released
			e.TurnStarted(ctx, tc.turn)
			n := count()
			if !tc.uses && n != n0 {
				t.Errorf("the turn's start took a snapshot: %d → %d", n0, n)
			}
			if tc.edit {
				e.write(t, "ada", "notes.txt", "edited in "+tc.name)
			}
			e.TurnEnded(tc.turn, release)
			if got := count(); got != n {
				t.Errorf("the turn's end took a snapshot: %d → %d", n, got)
			}
			if got := len(e.st.toolRuns()); got != runs {
				t.Errorf("history runs %d → %d", runs, got)
			}
			if released != rel+1 {
				t.Errorf("release ran %d times, want once", released-rel)
			}
		})
	}
}

// TestTurnWithoutBefore: a turn whose start found no workspace records the empty tree's hash
// as its input; one whose agent has no workspace at all takes nothing and logs no failure.
func TestTurnWithoutBefore(t *testing.T) {
	e := newTestEnv(t, Config{})
	turn := agent.TurnInfo{AgentID: "ada", MainTurnID: "t1", TurnID: "t1"}
	e.TurnStarted(t.Context(), turn) // no workspace yet: no "before"
	e.write(t, "ada", "made.txt", "by the turn")
	e.TurnEnded(turn, func(agent.TurnInfo) {})
	runs := e.st.toolRuns()
	empty := sha256.Sum256(nil)
	if len(runs) != 1 || runs[0].InputSHA256 != hex.EncodeToString(empty[:]) {
		t.Fatalf("history: %+v; want one run from the empty tree", runs)
	}
	if list, _ := e.List(t.Context(), "acc", "ada"); len(list) != 1 || list[0].Before != "" {
		t.Fatalf("snapshots: %+v; want one with no before", list)
	}

	bea := agent.TurnInfo{AgentID: "bea", MainTurnID: "t2", TurnID: "t2"}
	e.TurnStarted(t.Context(), bea)
	e.TurnEnded(bea, func(agent.TurnInfo) {})
	if list, _ := e.Store().List("bea"); len(list) != 0 {
		t.Fatalf("an agent without a workspace has snapshots: %+v", list)
	}
}

// TestFork: a fork fills the new agent's workspace and gives it its first snapshot; on a
// shared desktop it is refused and the new agent has none.
func TestFork(t *testing.T) {
	for _, shared := range []bool{false, true} {
		e := newTestEnv(t, Config{})
		e.vols.shared = shared
		e.cfg.Volumes = e.vols
		e.write(t, "ada", "app.go", "package main")
		sn, err := e.Take(t.Context(), "acc", "ada", "built")
		if err != nil {
			t.Fatal(err)
		}
		err = e.Fork(t.Context(), "acc", "ada", sn.ID, "bea")
		list, _ := e.Store().List("bea")
		if shared {
			if !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), `isolation "shared"`) || len(list) != 0 {
				t.Fatalf("fork on a shared desktop: %v, bea's snapshots %+v", err, list)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].Kind != snapshot.KindFork || list[0].TreeSHA256 != sn.TreeSHA256 {
			t.Fatalf("the fork's snapshots: %+v", list)
		}
		if got := e.read(t, "bea", "app.go"); got != "package main" {
			t.Fatalf("the fork's workspace: %q", got)
		}
	}
}

// TestDamagedSnapshot: a restore of a snapshot whose stored data is damaged is a conflict
// saying so, and leaves the workspace as it was.
func TestDamagedSnapshot(t *testing.T) {
	e := newTestEnv(t, Config{})
	e.write(t, "ada", "data.txt", strings.Repeat("stored once ", 100))
	sn, err := e.Take(t.Context(), "acc", "ada", "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.Store().Manifest("ada", sn.ID)
	if err != nil {
		t.Fatal(err)
	}
	var chunk string
	for _, en := range m.Entries {
		if len(en.Chunks) > 0 {
			chunk = en.Chunks[0]
		}
	}
	p := filepath.Join(e.Store().Dir(), "chunks", chunk[:2], chunk)
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x55
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	e.write(t, "ada", "data.txt", "now")
	_, err = e.Restore(t.Context(), "acc", "ada", sn.ID)
	if !errors.Is(err, fault.ErrConflict) || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("restore of a damaged snapshot: %v", err)
	}
	if got := e.read(t, "ada", "data.txt"); got != "now" {
		t.Fatalf("a failed restore changed the workspace: %q", got)
	}
}

// TestForget: a deleted agent's snapshots go.
func TestForget(t *testing.T) {
	e := newTestEnv(t, Config{})
	e.write(t, "ada", "a.txt", "a")
	if _, err := e.Take(t.Context(), "acc", "ada", ""); err != nil {
		t.Fatal(err)
	}
	e.Forget("ada")
	if list, err := e.Store().List("ada"); err != nil || len(list) != 0 {
		t.Fatalf("snapshots after Forget: %+v %v", list, err)
	}
}
