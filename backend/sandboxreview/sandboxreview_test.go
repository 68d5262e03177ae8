package sandboxreview

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"

	"cubicle/backend/agent"
	"cubicle/backend/api"
	"cubicle/backend/fault"
	"cubicle/backend/nodes"
	"cubicle/backend/sandbox"
	"cubicle/backend/store"
	"cubicle/internal/testenv"
)

// settings keeps the nodes' host sandbox settings in memory, as security.Service does in the
// store.
type settings map[string]store.HostSandbox

func (s settings) HostSandbox(node string) store.HostSandbox { return s[node] }
func (s settings) HostSandboxes() map[string]store.HostSandbox {
	return s
}
func (s settings) WidenHostSandbox(by, node, path string, write, revoke bool) (store.HostSandbox, error) {
	h := s[node]
	list := &h.Read
	if write {
		list = &h.ReadWrite
	}
	switch i := slices.Index(*list, path); {
	case revoke && i < 0:
		return h, fault.NotFound("no widening %s on %s", path, node)
	case revoke:
		*list = slices.Delete(*list, i, i+1)
	case i < 0:
		*list = append(*list, path)
	}
	s[node] = h
	return h, nil
}

// runner is a runner's node whose link may be down.
type runner struct {
	own  []string
	down bool
}

func (r runner) Label() string { return "runner r1" }
func (r runner) HostProtected(context.Context) ([]string, error) {
	if r.down {
		return nil, errors.New("the runner is not connected")
	}
	return r.own, nil
}

// TestRefusalsAndWidenings, over a real store: refusals are recorded once per node, account,
// agent, path and access (counted again when repeated; none without a path); the review
// names them; an approved write widens its directory (or the path itself) and the review then
// shows it widened; a hidden credential folder is opened for reading only; Cubicle's data
// directory, a runner's own data and the protected paths are never widened, and a refusal
// does not change the settings; a runner that cannot say what its own data is blocks the
// approval; a widening is revoked.
func TestRefusalsAndWidenings(t *testing.T) {
	log := testenv.Logger(t, slog.LevelInfo)
	st, err := store.Open(filepath.Join(t.TempDir(), "cubicle.db"), store.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreateAccount(store.Account{ID: "acc1", Username: "ada", Role: store.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateAgent(store.Agent{ID: "ag1", AccountID: "acc1", Name: "Builder"}); err != nil {
		t.Fatal(err)
	}
	data, home := "/srv/cubicle", "/home/ada"
	set := settings{}
	r1 := &runner{own: []string{"/var/lib/cubicle-runner"}}
	rv, err := New(Config{Store: st, Settings: set, DataDir: data, Label: func(n string) string { return "node " + n },
		Runner: func(node string) (Runner, error) {
			if node != "r1" {
				return nil, fault.NotFound("no runner %q", node)
			}
			return r1, nil
		},
		Protected: func(home string) []string { return []string{filepath.Join(home, "private")} }, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	turn := agent.TurnInfo{UserID: "acc1", AgentID: "ag1", SessionID: "s1"}
	rv.SandboxRefused(turn, "", home, []sandbox.Refusal{
		{Path: "/opt/out/report.txt", Write: true, Line: "cannot create /opt/out/report.txt: Read-only file system"},
		{Path: filepath.Join(home, ".ssh/id_ed25519"), Hidden: filepath.Join(home, ".ssh"), Line: "Permission denied"},
		{Line: "cat: x: Permission denied"}, // no path: nothing to widen
	})
	rv.SandboxRefused(turn, nodes.LocalID, home, []sandbox.Refusal{{Path: "/opt/out/report.txt", Write: true, Line: "again"}})
	rv.SandboxRefused(turn, nodes.LocalID, home, []sandbox.Refusal{{Path: filepath.Join(data, "secrets/session.key"), Write: true, Line: "denied"}})
	rv.SandboxRefused(turn, nodes.LocalID, home, []sandbox.Refusal{{Path: filepath.Join(home, "private/notes/a.txt"), Write: true, Line: "denied"}})
	rv.SandboxRefused(turn, "r1", "/home/runner", []sandbox.Refusal{{Path: "/var/lib/cubicle-runner/token", Write: true, Line: "denied"}})

	review, err := rv.SandboxReview(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	find := func(rv api.SandboxReview, path string) api.SandboxRefusal {
		t.Helper()
		i := slices.IndexFunc(rv.Refusals, func(r api.SandboxRefusal) bool { return r.Path == path })
		if i < 0 {
			t.Fatalf("no refusal of %s in %+v", path, rv.Refusals)
		}
		return rv.Refusals[i]
	}
	if len(review.Refusals) != 5 {
		t.Fatalf("%d refusals, want 5 (one per path and node): %+v", len(review.Refusals), review.Refusals)
	}
	out := find(review, "/opt/out/report.txt")
	if out.Count != 2 || out.Line != "again" || out.Node != nodes.LocalID || out.AccountName != "ada" || out.AgentName != "Builder" ||
		out.NodeName != "node local" || out.Widened {
		t.Fatalf("the repeated refusal: %+v", out)
	}

	// A write: its directory by default, the path itself with scope "path".
	w, err := rv.ApproveWidening(context.Background(), "acc1", out.ID, "")
	if err != nil || w.Path != "/opt/out" || w.Access != api.AccessReadWrite {
		t.Fatalf("approve the write: %+v, %v", w, err)
	}
	if review, _ = rv.SandboxReview(context.Background()); !find(review, "/opt/out/report.txt").Widened ||
		!slices.Contains(review.Widenings, api.Widening{Node: nodes.LocalID, Path: "/opt/out", Access: api.AccessReadWrite}) {
		t.Fatalf("after the approval: %+v", review)
	}
	// A hidden credential file: its folder is opened for reading.
	ssh := find(review, filepath.Join(home, ".ssh/id_ed25519"))
	if w, err := rv.ApproveWidening(context.Background(), "acc1", ssh.ID, "directory"); err != nil || w.Path != filepath.Join(home, ".ssh") || w.Access != api.AccessRead {
		t.Fatalf("approve the credential read: %+v, %v", w, err)
	}

	// Never widened: the data directory, a protected path, a runner's own data.
	before := set.HostSandbox(nodes.LocalID)
	for _, path := range []string{filepath.Join(data, "secrets/session.key"), filepath.Join(home, "private/notes/a.txt"), "/var/lib/cubicle-runner/token"} {
		if _, err := rv.ApproveWidening(context.Background(), "acc1", find(review, path).ID, "path"); !errors.Is(err, fault.ErrForbidden) {
			t.Errorf("approve %s: %v, want forbidden", path, err)
		}
	}
	if after := set.HostSandbox(nodes.LocalID); !slices.Equal(after.ReadWrite, before.ReadWrite) || !slices.Equal(after.Read, before.Read) ||
		len(set.HostSandbox("r1").ReadWrite) != 0 {
		t.Fatalf("a refused approval changed the settings: %+v → %+v (r1 %+v)", before, after, set.HostSandbox("r1"))
	}
	r1.down = true
	if _, err := rv.ApproveWidening(context.Background(), "acc1", find(review, "/var/lib/cubicle-runner/token").ID, "path"); !errors.Is(err, fault.ErrUnavailable) {
		t.Errorf("approve on a runner that is away: %v, want unavailable", err)
	}
	if _, err := rv.ApproveWidening(context.Background(), "acc1", out.ID, "everything"); !errors.Is(err, fault.ErrInvalid) {
		t.Errorf("a scope that does not exist: %v", err)
	}
	if _, err := rv.ApproveWidening(context.Background(), "acc1", "nope", ""); !errors.Is(err, fault.ErrNotFound) {
		t.Errorf("an unknown refusal: %v", err)
	}

	if err := rv.RevokeWidening(context.Background(), "acc1", api.Widening{Node: nodes.LocalID, Path: "/opt/out/", Access: api.AccessReadWrite}); err != nil {
		t.Fatal(err)
	}
	if review, _ = rv.SandboxReview(context.Background()); find(review, "/opt/out/report.txt").Widened {
		t.Fatal("still widened after the revocation")
	}
}
